"""The claim and completion statements credited to each library installed here are in its installed package's own
files (site-packages, node_modules): an upgrade that changes one fails here, by name, rather than leaving a sentence
about the library that its code no longer bears out. The fragments are declared beside each library
(harness.libraries.catalogue.LIBRARIES, Source.credited)."""

from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path

import pytest

from harness.libraries.node import NODE_DIR
from harness.libraries.catalogue import LIBRARIES
from harness.libraries.declaration import Credited

INSTALLED = [library for library in LIBRARIES if library.runs_here]


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def missing(root: Path, credited: Credited) -> str | None:
    """Why the credited fragment is not where its declaration says (None where it is)."""
    path = root / credited.file
    if not path.is_file():
        return f"{credited.file}: no such file"
    text = _flat(path.read_text(encoding="utf-8"))
    start = text.find(_flat(credited.anchor))
    if start < 0:
        return f"{credited.file}: no {credited.anchor!r}"
    body_start = start + len(_flat(credited.anchor))
    end = text.find(_flat(credited.end), body_start)
    body = text[body_start:end if end >= 0 else len(text)]
    if _flat(credited.fragment) not in body:
        return f"{credited.file}: {credited.role} {credited.fragment!r} not in {credited.anchor!r}"
    return None


def installed_root(where: str, file: str) -> Path | None:
    """The directory a credited file's path starts from (site-packages or node_modules), or None where its package
    is not installed."""
    package = file.split("/", 1)[0]
    if where == "node_modules":
        root = NODE_DIR / "node_modules"
        return root if (root / package / "package.json").is_file() else None
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).parent


def test_every_library_installed_here_credits_a_claim_and_a_completion():
    for library in INSTALLED:
        source = library.source
        assert source.installed in ("site-packages", "node_modules"), library.name
        assert {c.role for c in source.credited} == {"claim", "completion"}, library.name
        assert any("SKIP LOCKED" in c.fragment.upper() for c in source.credited if c.role == "claim"), library.name
    assert not any(library.source.credited for library in LIBRARIES if not library.runs_here)


@pytest.mark.parametrize("library", INSTALLED, ids=lambda library: library.name)
def test_credited_statements_are_in_the_installed_package(library):
    source = library.source
    root = installed_root(source.installed, source.credited[0].file)
    if root is None:
        pytest.skip(f"{library.title} is not installed here")
    problems = [why for credited in source.credited if (why := missing(root, credited))]
    assert not problems, f"{library.title} {source.release}: " + "; ".join(problems)


@pytest.mark.parametrize("library", INSTALLED, ids=lambda library: library.name)
def test_a_doctored_statement_fails_the_check(library, tmp_path):
    """Each credited fragment, changed in a copy of its file, is reported missing: the check can fail."""
    source = library.source
    root = installed_root(source.installed, source.credited[0].file)
    if root is None:
        pytest.skip(f"{library.title} is not installed here")
    for credited in source.credited:
        copy = tmp_path / credited.file
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / credited.file, copy)
        assert missing(tmp_path, credited) is None
        text = _flat(copy.read_text(encoding="utf-8"))
        # the upgrade the check is for: the statement's text changes where the declaration says it is
        fragment = _flat(credited.fragment)
        copy.write_text(text.replace(fragment, fragment.replace(" ", " changed ", 1)), encoding="utf-8")
        assert missing(tmp_path, credited) is not None, credited
