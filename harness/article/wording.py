"""The findings' sentences, kept as text beside the article's prose rather than in the rules' code.

Each section's sentences sit in harness/article/templates/sentences/<section>.yml,
one template per key (`F1.ours`, `F1.rare`, ...), written with named fields that
the rule fills with figures it has already formatted:

    say = Sentences("races")
    say("F1.ours", duplicate_jobs="9,763", job_count="10,000", share="97.6%", workers="2")

A sentence per library (or per any declared name) is one template per name under
one prefix (`claim.procrastinate`, `claim.pgmq`, ...), said for every name at once:

    say.each("claim", RACED_LIBRARY_STRATEGIES)  # {name: its claim.<name> sentence}

A key the file lacks, or a field the call does not fill, fails at once, naming
both; tests/test_wording.py checks every key a section says exists and every key
its file holds is said: for `say.each`, with its literal prefix and its names (a
literal list, or a tuple the section imports by name, such as the libraries'
declaration in harness.libraries.catalogue), every `<prefix>.<name>`.
"""

from __future__ import annotations

import functools
import string
from pathlib import Path

import yaml

SENTENCES_DIR = Path(__file__).parent / "templates" / "sentences"


@functools.cache
def sentences(section: str) -> dict[str, str]:
    """Every template of one section: {key: template}."""
    path = SENTENCES_DIR / f"{section}.yml"
    loaded = yaml.safe_load(path.read_text()) or {}
    return {str(key): str(text).strip() for key, text in loaded.items()}


def fields(template: str) -> set[str]:
    """The named fields a template needs filled."""
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


class Sentences:
    """One section's templates, filled by key."""

    def __init__(self, section: str):
        self.section = section

    def __call__(self, key: str, **values) -> str:
        templates = sentences(self.section)
        if key not in templates:
            raise KeyError(f"no sentence {key!r} in {SENTENCES_DIR / self.section}.yml")
        template = templates[key]
        unfilled = fields(template) - set(values)
        if unfilled:
            raise KeyError(f"sentence {self.section}:{key} needs {', '.join(sorted(unfilled))}")
        return template.format(**values)

    def each(self, prefix: str, names, own=None, **values) -> dict[str, str]:
        """{name: the template `<prefix>.<name>` filled}, for each name in order. Every template fills what it names
        of `values`: one library's sentence may name a default that another's has no use for; `own(name)`, where it
        is given, adds the values that are each name's own (a library's release: labels.release_said)."""
        return {name: self(f"{prefix}.{name}", **values, **(own(name) if own else {})) for name in names}
