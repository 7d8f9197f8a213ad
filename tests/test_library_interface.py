"""Every job library module (harness.libraries) and every model (harness.libraries.models) declares the interface the
library kinds run it through, and agrees with the other lists that name the libraries."""

from __future__ import annotations

import importlib
import inspect
import re
import types
from pathlib import Path

import pytest
import yaml

from harness import libraries
from harness.libraries import catalogue
from harness.experiments import registry
from harness.experiments.libraries import wakeups
from harness.claims.strategies import STRATEGIES

# What every adapter declares (harness/libraries/__init__.py and harness/libraries/models.py say what each is).
TEXT = str
COMMON = {"NAME": TEXT, "SOURCE": TEXT, "CLAIMED": TEXT, "COMPLETED": TEXT, "SETTINGS": dict, "RECOVERY": dict,
          "JOBS_TABLE": TEXT, "ID_COLUMN": TEXT}
RACED = {**COMMON, "PACKAGE": TEXT, "CLAIM_LOGGED": TEXT}
MODELLED = {**COMMON, "CLAIM": TEXT, "CONNECTIONS": int, "PROTOCOL": object}
# What a module may leave out: libraries.OptionalParts, each with its default written there once.
OPTIONAL = {"JOBS_SCHEMA": TEXT, "STATS_TABLE": TEXT, "AUDIT_ID_SQL": TEXT, "JOB_CAP": int, "NOTIFIES_ON_CHANGE": bool,
            "CONNECTIONS": int, "STOPS_ON_ITS_OWN": bool, "INSTALL_HINT": TEXT, "CLAIM_FUNCTION": TEXT, "WAKEUP": dict,
            "FAILED": TEXT, "HOLDS_BY_SESSION": bool, "POOLER_SETTING": (dict, type(None)), "POOLER_READ": dict,
            "installed_version": types.FunctionType, "EARLIER_RELEASES": dict, "PRODUCTION": dict,
            "HUNG": dict, "declare_dead": types.FunctionType, "STALL": dict}
RECOVERY_KEYS = {"mechanism", "setting", "default_s", "raced_s"}
# name -> the parameters it takes, in order
FUNCTIONS = {"install": ("url",), "enqueue": ("url", "n", "job_s"), "work": ("url", "log", "ready", "start", "job_s")}
WAKE_FUNCTIONS = {"wake_install": ("url",), "wake_work": ("url", "log", "ready", "start", "listen"),
                  "enqueue_paced": ("url", "n", "interval_s", "listen")}


def _accepted(module, function: str, parameters: tuple) -> list[tuple]:
    """The parameter lists a function may take: enqueue may number its jobs from `first` (the soak's arrivals call
    it again and again), and must where the audit reads that number (AUDIT_ID_SQL)."""
    if function != "enqueue":
        return [parameters]
    numbered = (*parameters, "first")
    return [numbered] if getattr(module, "AUDIT_ID_SQL", None) else [parameters, numbered]


def interface_problems(module, name: str, declared: dict[str, type]) -> list[str]:
    """What a library module lacks or declares wrongly, one line each (nothing where it holds)."""
    problems = []
    for attribute, kind in {**declared, **{k: v for k, v in OPTIONAL.items() if hasattr(module, k)}}.items():
        if not hasattr(module, attribute):
            problems.append(f"{name}: no {attribute}")
        elif not isinstance(getattr(module, attribute), kind):
            wanted = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
            problems.append(f"{name}: {attribute} is {type(getattr(module, attribute)).__name__}, not {wanted}")
    if getattr(module, "NAME", name) != name:
        problems.append(f"{name}: NAME is {module.NAME!r}")
    missing = RECOVERY_KEYS - set(getattr(module, "RECOVERY", None) or {})
    if isinstance(getattr(module, "RECOVERY", None), dict) and missing:
        problems.append(f"{name}: RECOVERY lacks {', '.join(sorted(missing))}")
    functions = {**FUNCTIONS, **(WAKE_FUNCTIONS if hasattr(module, "WAKEUP") else {})}
    for function, parameters in functions.items():
        found = getattr(module, function, None)
        if not callable(found):
            problems.append(f"{name}: no {function}()")
        elif tuple(inspect.signature(found).parameters) not in _accepted(module, function, parameters):
            problems.append(f"{name}: {function}{inspect.signature(found)} does not take ({', '.join(parameters)})")
    return problems


@pytest.mark.parametrize("name", libraries.NAMES)
def test_every_raced_library_declares_the_shared_interface(name):
    module = libraries.get(name).module
    assert interface_problems(module, name, RACED) == []
    assert name in STRATEGIES and STRATEGIES[name].protocol, "its claim protocol races in the tight loop"


@pytest.mark.parametrize("name", libraries.MODELS)
def test_every_model_declares_the_shared_interface(name):
    module = libraries.get(name).module
    assert interface_problems(module, name, MODELLED) == []
    assert module.CLAIM in STRATEGIES, "its claim races in the tight loop under this name"


def test_every_library_folder_is_declared_once_and_every_declaration_has_a_folder():
    """Adding a library takes its folder (its library.py and adapter.py) and its place in
    harness.libraries.catalogue.LIBRARIES: a folder left out of the catalogue, or a declaration without its folder,
    fails here."""
    declared = [library.name for library in catalogue.LIBRARIES]
    assert len(declared) == len(set(declared))
    root = Path(libraries.__file__).parent
    folders = {path.parent.name for path in root.glob("*/library.py")}
    adapters = {path.parent.name for path in root.glob("*/adapter.py")}
    assert folders == adapters == set(declared)
    assert set(libraries.NAMES) == {library.name for library in catalogue.LIBRARIES if library.runs_here}
    assert set(libraries.MODELS) == {library.name for library in catalogue.LIBRARIES if not library.runs_here}


def test_no_params_file_names_every_library_one_by_one():
    """A params section that runs every library says so in one word (`all`, `models`, `libraries` among strategies),
    which its kind reads off the declaration: a list naming each of them would need a new library added to it."""
    groups = {"raced here": libraries.NAMES, "modelled": libraries.MODELS,
              "whose protocol races": catalogue.LIBRARY_STRATEGIES}
    spelled = []
    for path in sorted((Path(__file__).resolve().parent.parent / "notebooks" / "params").glob("*.yml")):
        for section, settings in yaml.safe_load(path.read_text()).items():
            woken = {"that can both listen and poll": wakeups.offering()} if registry.SECTIONS.get(section) == \
                "wakeups" else {}
            for key, listed in (settings.items() if isinstance(settings, dict) else ()):
                spelled += [f"{path.name}: {section}.{key} names every library {group}"
                            for group, names in {**groups, **woken}.items()
                            if isinstance(listed, list) and all(isinstance(item, str) for item in listed)
                            and set(names) <= set(listed)]
    assert spelled == []


def test_the_interface_check_names_what_a_module_gets_wrong():
    def work(url, log, ready):  # one parameter short
        pass

    broken = types.SimpleNamespace(NAME="other", SOURCE="x", CLAIMED="true", COMPLETED="DELETE", SETTINGS={},
                                   RECOVERY={"mechanism": "none"}, JOBS_TABLE="jobs", ID_COLUMN="id", PACKAGE="x",
                                   JOB_CAP="40", install=lambda url: None, work=work, WAKEUP={})
    assert interface_problems(broken, "broken", RACED) == [
        "broken: no CLAIM_LOGGED", "broken: JOB_CAP is str, not int", "broken: NAME is 'other'",
        "broken: RECOVERY lacks default_s, raced_s, setting", "broken: no enqueue()",
        "broken: work(url, log, ready) does not take (url, log, ready, start, job_s)", "broken: no wake_install()",
        "broken: no wake_work()", "broken: no enqueue_paced()"]


def test_the_adapter_gives_each_optional_part_its_default_and_reads_the_rest_from_the_module():
    """libraries.Adapter: what a module leaves out takes OptionalParts' default, what it declares is read as
    declared, and a change to the module (a test's monkeypatch, through either) reads the same through both; the
    test's list of optional parts is OptionalParts'."""
    import dataclasses

    assert {field.name for field in dataclasses.fields(libraries.OptionalParts)} == set(OPTIONAL)
    bare = libraries.Adapter(types.SimpleNamespace(NAME="bare", JOBS_TABLE="jobs"))
    assert (bare.JOBS_SCHEMA, bare.JOB_CAP, bare.CONNECTIONS, bare.STOPS_ON_ITS_OWN, bare.WAKEUP) == (None, None, 2,
                                                                                                    True, None)
    assert bare.stats_table == "jobs" and bare.NAME == "bare" and bare.INSTALL_HINT == "run make install"
    with pytest.raises(AttributeError):
        bare.install
    bare.JOB_CAP = 40
    assert bare.module.JOB_CAP == 40 == bare.JOB_CAP


def test_a_monkeypatch_through_the_adapter_is_undone_on_the_module():
    pgmq = libraries.get("pgmq")
    written = pgmq.module.COMPLETION_LOGGED
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pgmq, "COMPLETION_LOGGED", "first")
        patch.setattr(pgmq, "COMPLETION_LOGGED", "second")
        assert pgmq.module.COMPLETION_LOGGED == "second"
    assert pgmq.module.COMPLETION_LOGGED == written == pgmq.COMPLETION_LOGGED
    pgboss = libraries.get("pgboss")
    assert pgboss.JOB_CAP == pgboss.module.JOB_CAP and pgboss.stats_table == pgboss.module.STATS_TABLE
    assert libraries.get("pgmq") is libraries.get("pgmq"), "one adapter a library"


def docs_table(after: str) -> dict[str, list[str]]:
    """The Markdown table of docs/libraries.md that follows the line starting with `after`: {first cell: cells}."""
    lines = (Path(__file__).resolve().parent.parent / "docs" / "libraries.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(after))
    rows = [line for line in lines[start + 2:] if line.startswith("|")]
    table = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        table[cells[0]] = cells
    assert rows and table
    return table


def named_in_docs(library) -> str:
    """A library as docs/libraries.md's tables name it: its title, a model's without its language and marked."""
    return library.title if library.runs_here else f"{library.title.split(' (')[0]} (model)"


def test_the_docs_tables_of_the_libraries_agree_with_their_declarations():
    """docs/libraries.md keeps two tables by hand: what the stale-completion probe should find, and where each
    model's protocol was read. Each row says what the library's declaration says (its STALE_COMPLETION, its
    Source's release and commit), and each declared library has its row."""
    probe = docs_table("| library | its completion checks (source) | the probe should find |")
    sources = docs_table("| strategy | read from (repository, files, commit) |")
    wrong = []
    for library in catalogue.LIBRARIES:
        expected = libraries.get(library.name).STALE_COMPLETION["expected"].replace("_", " ")
        row = probe.get(named_in_docs(library))
        if row is None or not row[-1].startswith(expected):
            wrong.append(f"{library.name}: the probe table says {row and row[-1]!r}, its declaration {expected!r}")
        elif library.name != "pgmq" and not re.search(  # pgmq's row cites the SQL as its client ships it
                rf"\(v?{re.escape(library.source.release.removeprefix('v'))}[,)]", row[1]):
            wrong.append(f"{library.name}: the probe table cites {row[1]!r}, its declaration the release "
                         f"{library.source.release}")
        if not library.runs_here:
            read = sources.get(f"`{library.name}`")
            source = library.source
            if read is None or f"({source.release})" not in read[1] or f"`{source.commit}`" not in read[1] \
                    or source.repository not in read[1]:
                wrong.append(f"{library.name}: the sources table says {read and read[1]!r}, its declaration "
                             f"{source.repository} {source.release} at {source.commit}")
    assert wrong == []
    assert len(probe) == len(catalogue.LIBRARIES)


def test_the_docs_table_of_earlier_releases_agrees_with_their_declarations():
    """Each earlier release a library declares (EARLIER_RELEASES) has its row in docs/libraries.md, with what its
    source says the probe should find, or "(not run)" for one read only; and no row names an undeclared one."""
    lines = (ROOT / "docs" / "libraries.md").read_text().splitlines()
    start = lines.index("| library | earlier release | its completion checks (source at that tag) | the probe should find |")
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[(cells[0], cells[1])] = cells
    declared = {}
    for library in catalogue.LIBRARIES:
        for release, read in (libraries.get(library.name).EARLIER_RELEASES or {}).items():
            declared[(named_in_docs(library), release)] = "(not run)" if read.get("read_only") else \
                read["expected"].replace("_", " ")
            assert read["source"].count(":") >= 1 and read["checks"], (library.name, release)
    assert {key: cells[-1] for key, cells in rows.items()} == declared
    assert ("chancy", "0.25.0") in declared and ("Solid Queue (model)", "1.4.0") in declared


ROOT = Path(__file__).resolve().parent.parent


def _sentences(name: str) -> dict:
    return yaml.safe_load((ROOT / "harness" / "article" / "templates" / "sentences" / f"{name}.yml").read_text())


def _pinned(library) -> bool:
    """Its distribution (or npm package) is pinned where make install reads it."""
    package = libraries.get(library.name).PACKAGE
    if (ROOT / "harness" / "libraries" / "node" / "package.json").read_text().count(f'"{package}"'):
        return True
    return f'"{package}' in (ROOT / "pyproject.toml").read_text() and \
        f"{package}==" in (ROOT / "requirements.lock").read_text().lower()


def _folder(lib) -> Path:
    return ROOT / "harness" / "libraries" / lib.name


# What each file the docs' list names holds of a declared library (harness.libraries.declaration.Library).
TOUCHED = {
    "harness/libraries/<name>/library.py":
        lambda lib: importlib.import_module(f"harness.libraries.{lib.name}.library").LIBRARY is lib,
    "harness/libraries/<name>/adapter.py": lambda lib: libraries.get(lib.name).module.__file__ == str(
        _folder(lib) / "adapter.py"),
    "harness/libraries/<name>/__init__.py": lambda lib: (_folder(lib) / "__init__.py").read_text() == "",
    "harness/libraries/<name>/worker.cjs":
        lambda lib: (_folder(lib) / "worker.cjs").exists() == (libraries.get(lib.name).installed_version is not None
                                                               and lib.runs_here),
    "harness/libraries/catalogue.py": lambda lib: lib in catalogue.LIBRARIES,  # a folder's, listed there
    "harness/article/templates/sentences/libraries.yml":
        lambda lib: not lib.runs_here or f"claim.{lib.name}" in _sentences("libraries"),
    "harness/article/templates/sentences/library_faults.yml":
        lambda lib: f"configure.{lib.name}" in _sentences("library_faults"),
    "harness/article/templates/sentences/library_poolers.yml":
        lambda lib: {f"docs.{lib.name}", f"docs_where.{lib.name}"} <= set(_sentences("library_poolers")),
    "pyproject.toml": lambda lib: not lib.runs_here or _pinned(lib),
    "docs/layout.md": lambda lib: f"    {lib.name}/ " in (ROOT / "docs" / "layout.md").read_text(),
    "docs/libraries.md": lambda lib: f"| {named_in_docs(lib)} |" in (ROOT / "docs" / "libraries.md").read_text(),
}


def adding_a_library() -> list[str]:
    """The first file each step of docs/libraries.md's "Adding a library" names, in order."""
    text = (ROOT / "docs" / "libraries.md").read_text()
    section = text[text.index("## Adding a library"):]
    return [line.split("`")[1] for line in section.splitlines() if line[:1].isdigit() and ". `" in line]


def test_adding_a_library_lists_every_file_a_declared_library_is_in():
    """The docs' numbered list is the files a new library touches: each declared library is found in each of
    them, and the list names no other file."""
    assert adding_a_library() == list(TOUCHED)
    # every library with a folder, declared in its library.py, whether or not the catalogue lists it
    found = [importlib.import_module(f"harness.libraries.{path.parent.name}.library").LIBRARY
             for path in sorted((ROOT / "harness" / "libraries").glob("*/library.py"))]
    assert len(found) == len(catalogue.LIBRARIES)
    missing = [f"{library.name}: {path}" for library in found for path, holds in TOUCHED.items() if not holds(library)]
    assert missing == []


def _spelled(release: str, root: Path = ROOT) -> list[str]:
    """Where root's harness/ (its code, sentences and scripts) spells a release, by file and line."""
    bare = release.removeprefix("SQL ").removeprefix("v")
    pattern = re.compile(rf"(?<![\d.]){re.escape(bare)}(?!\.?\d)")
    return [f"{path.relative_to(root)}:{number}" for path in sorted((root / "harness").rglob("*"))
            if path.suffix in (".py", ".yml", ".cjs") and "node_modules" not in path.parts
            for number, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]


@pytest.mark.parametrize("library", catalogue.LIBRARIES, ids=lambda library: library.name)
def test_a_release_is_named_once_and_is_the_one_installed(library):
    """A library's release is spelled in its library.py alone (its adapter and sentences read it from there); one
    raced here is the release installed and pinned (for pgmq, the SQL its client ships)."""
    assert _spelled(library.source.release) == [f"harness/libraries/{library.name}/library.py:"
                                                 f"{_line_of(library)}"]
    if not library.runs_here:
        return
    if library.name == "pgmq":
        from pgmq.install import get_embedded_sql_version
        assert library.source.release == f"SQL {get_embedded_sql_version()}"
        return
    installed = libraries.version(library.name)
    assert installed in (None, library.source.release), installed  # None: a Node library where Node is not
    package = libraries.get(library.name).PACKAGE
    pins = (ROOT / "requirements.lock").read_text().lower() + (ROOT / "harness" / "libraries" / "node" /
                                                                 "package.json").read_text()
    assert f"{package}=={library.source.release}" in pins or f'"{package}": "{library.source.release}"' in pins


def _line_of(library) -> int:
    lines = (ROOT / "harness" / "libraries" / library.name / "library.py").read_text().splitlines()
    return next(n for n, line in enumerate(lines, 1) if f'"{library.source.release}"' in line)


def test_the_release_check_finds_a_second_spelling(tmp_path):
    """The check sees a release spelled outside its library.py (in a copy of the declaration, beside it)."""
    chancy = libraries_named("chancy")
    folder = tmp_path / "harness" / "libraries" / "chancy"
    folder.mkdir(parents=True)
    (folder / "library.py").write_text((ROOT / "harness" / "libraries" / "chancy" / "library.py").read_text())
    assert _spelled(chancy.source.release, tmp_path) == [f"harness/libraries/chancy/library.py:{_line_of(chancy)}"]
    (folder / "spelled_twice.py").write_text(f'NOTE = "chancy {chancy.source.release}"\n')
    assert "harness/libraries/chancy/spelled_twice.py:1" in _spelled(chancy.source.release, tmp_path)


def libraries_named(name: str):
    return next(library for library in catalogue.LIBRARIES if library.name == name)


# Releases the docs name that no library here declares, each with the reason: the tags procrastinate's how-to reads
# the same in (its stalled-jobs task), read in its history rather than raced.
READ_ACROSS = {"3.1.0": "procrastinate's first tag with the same how-to", "3.9.0": "its last before 3.10.0"}


def releases_in_docs(root: Path = ROOT) -> dict[str, list[str]]:
    """Every three-part release the README and docs/ name ("1.2.3" or "v1.2.3", not an address's four parts):
    {release without its v: [file:line, ...]}."""
    pattern = re.compile(r"(?<![\d.])v?(\d+\.\d+\.\d+)(?!\.?\d)")
    found: dict[str, list[str]] = {}
    for path in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for release in pattern.findall(line):
                found.setdefault(release, []).append(f"{path.relative_to(root)}:{number}")
    return found


def declared_releases() -> set[str]:
    """Each library's release as its declaration names it, its earlier releases, and the release installed."""
    named = set()
    for library in catalogue.LIBRARIES:
        named.add(library.source.release.removeprefix("SQL ").removeprefix("v"))
        named.update(libraries.get(library.name).EARLIER_RELEASES or {})
        if library.runs_here and libraries.version(library.name):
            named.add(libraries.version(library.name))
    return named


def test_every_release_the_docs_name_is_one_a_library_declares():
    """The docs' prose cites releases by hand: each is a release a declaration names (or installed here), so an
    upgrade that leaves a sentence at the old release fails here."""
    stale = {release: where for release, where in releases_in_docs().items()
             if release not in declared_releases() and release not in READ_ACROSS}
    assert stale == {}, "named in the docs, declared by no library: " + str(stale)


def test_the_docs_release_check_finds_a_release_left_behind(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("Listening on 127.0.0.1 and 0.0.0.0.\n")
    (tmp_path / "docs" / "libraries.md").write_text("chancy (0.26.0) and chancy v0.24.9, pg-boss 10.4.2.\n")
    found = releases_in_docs(tmp_path)
    assert found == {"0.26.0": ["docs/libraries.md:1"], "0.24.9": ["docs/libraries.md:1"],
                     "10.4.2": ["docs/libraries.md:1"]}
    assert [release for release in found if release not in declared_releases()] == ["0.24.9"]
