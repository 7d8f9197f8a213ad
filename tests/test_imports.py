"""The import graph of harness/ has no circles, imports inside functions included; the article reads runs only
through the store, and the store is the only reader of a run's files."""

from __future__ import annotations

import ast
from pathlib import Path

HARNESS = Path(__file__).resolve().parent.parent / "harness"


def import_graph() -> dict[str, set[str]]:
    modules = {}
    for path in HARNESS.rglob("*.py"):
        parts = path.relative_to(HARNESS.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("harness"):
                imported |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
            elif isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names if alias.name.startswith("harness")}
        modules[name] = imported
    return {name: {m for m in imported if m in modules and m != name} for name, imported in modules.items()}


def test_no_import_circles():
    graph = import_graph()
    circles = []

    def walk(start, node, path):
        for nxt in graph[node]:
            if nxt == start:
                circles.append(" -> ".join([*path, start]))
            elif nxt > start and nxt not in path:
                walk(start, nxt, [*path, nxt])

    for name in graph:
        walk(name, name, [name])
    assert circles == []



def test_nothing_imports_the_cli_and_lower_floors_do_not_import_higher_ones():
    graph = import_graph()
    cli_users = sorted(name for name, imported in graph.items() if "harness.cli" in imported)
    assert cli_users == ["harness.__main__"]
    # the floors, lowest first: server and service may not reach up into experiments or the article
    upward = sorted(f"{name} -> {target}" for name, imported in graph.items()
                    if name.startswith(("harness.server", "harness.service"))
                    for target in imported if target.startswith(("harness.experiments", "harness.article",
                                                                 "harness.report")))
    assert upward == []
    experiments_up = sorted(f"{name} -> {target}" for name, imported in graph.items()
                            if name.startswith("harness.experiments")
                            for target in imported if target.startswith(("harness.article", "harness.report")))
    assert experiments_up == []
    # a library's folder is read by the claims, the experiments and the article: it reaches none of them, nor the
    # server (what a library run needs of a server is experiments/library_runtime.py's)
    libraries_up = sorted(f"{name} -> {target}" for name, imported in graph.items()
                          if name.startswith("harness.libraries")
                          for target in imported if target.startswith(("harness.claims", "harness.experiments",
                                                                       "harness.article", "harness.report",
                                                                       "harness.server", "harness.service")))
    assert libraries_up == []


# What reads a run's files: the store's Run is the only caller of these outside harness/storage.py.
FILE_READERS = {"read_parquet", "read_table", "ParquetFile", "read_json", "read_manifest"}


def file_reads(source: str) -> list[str]:
    """Every call of a file reader in the source, and every path built from a run's file name
    (`folder / "manifest.json"`, `folder / "x.parquet"`)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in FILE_READERS:
                found.append(f"line {node.lineno}: {name}()")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.right, ast.Constant) \
                and isinstance(node.right.value, str) and node.right.value.endswith((".parquet", "manifest.json")):
            found.append(f"line {node.lineno}: / {node.right.value!r}")
    return found


def test_the_store_is_the_only_reader_of_a_runs_files():
    readers = {str(path.relative_to(HARNESS)): found for path in HARNESS.rglob("*.py")
               if path.name != "storage.py" and (found := file_reads(path.read_text()))}
    assert readers == {}


def test_the_file_read_check_finds_each_way_of_reading():
    source = ("import pandas as pd\nimport pyarrow.parquet as pq\nfrom harness.storage import read_manifest\n"
              "pd.read_parquet(folder / 'attempts.parquet')\npq.read_table(p)\nread_manifest(folder)\n"
              "open(folder / 'manifest.json')\nRun(folder).table('attempts')\n")
    assert sorted(file_reads(source)) == ["line 4: / 'attempts.parquet'", "line 4: read_parquet()",
                                          "line 5: read_table()", "line 6: read_manifest()",
                                          "line 7: / 'manifest.json'"]


def article_kind_imports(graph: dict[str, set[str]]) -> list[str]:
    """Imports from harness/article/ of harness/experiments/ modules other than the registry, which hands the
    article its runs, and a kind's outcomes (its vocabulary and per-run rule), reached through its empty package."""
    return sorted(f"{name} -> {target}" for name, imported in graph.items() if name.startswith("harness.article")
                  for target in imported
                  if target.startswith("harness.experiments.") and target != "harness.experiments.registry"
                  and not target.endswith(".outcomes") and target not in KIND_PACKAGES)


KIND_PACKAGES = {f"harness.experiments.{path.parent.name}" for path in HARNESS.glob("experiments/*/__init__.py")}


def test_nothing_in_the_article_imports_an_experiment_kinds_module():
    """A section is handed its requests and runs by the build and reads them through storage.Run; of a kind it
    imports the outcomes alone."""
    graph = import_graph()
    assert article_kind_imports(graph) == []
    assert article_kind_imports({"harness.article.sections.bench": {
        "harness.experiments.bench.measure", "harness.experiments.registry", "harness.experiments.soak",
        "harness.experiments.soak.outcomes"}}) == [
        "harness.article.sections.bench -> harness.experiments.bench.measure"], "the check sees an import that breaks it"


def test_a_kinds_package_is_empty_and_its_outcomes_load_no_writer():
    """Importing a kind's outcomes runs its folder's __init__.py: empty, so it loads nothing else of the kind; and
    an outcomes module imports no other module of experiments/."""
    assert KIND_PACKAGES >= {"harness.experiments.race", "harness.experiments.soak"}
    assert [p.parent.name for p in HARNESS.glob("experiments/*/__init__.py") if p.read_text().strip()] == []
    graph = import_graph()
    outcomes = {name: sorted(t for t in imported if t.startswith("harness.experiments"))
                for name, imported in graph.items() if name.endswith(".outcomes")}
    assert len(outcomes) >= 4 and all(targets == [] for targets in outcomes.values()), outcomes


def test_no_vocabulary_of_a_kind_stands_at_the_top_level():
    """harness/ itself holds infrastructure, the store, the shared statistics and the command line: a kind's
    vocabulary lives in its folder."""
    top = sorted(path.stem for path in HARNESS.glob("*.py"))
    assert [name for name in top if name.endswith(("_outcomes", "_states", "_conflicts"))] == []


def test_every_section_declares_the_params_sections_it_reads():
    from harness.article import contents
    from harness.experiments import registry

    for section in contents.SECTIONS:
        assert isinstance(section.READS, tuple) and set(section.READS) <= set(registry.SECTIONS), section.NAME
    read = {name for section in contents.SECTIONS for name in section.READS if section.NAME != "summary"}
    assert read == set(registry.SECTIONS), "every params-file section is read by a section of the page"


def tree_under_harness(markdown: Path) -> set[str]:
    """The paths a page's layout tree names under `harness/`, folders with a trailing slash."""
    lines = markdown.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("harness/ "))
    tree, folder = set(), []
    for line in lines[start + 1:]:
        if not line.startswith("  "):
            break
        depth = (len(line) - len(line.lstrip(" "))) // 2
        name = line.split()[0]
        folder = folder[:depth - 1]
        if name.endswith("/"):
            tree.add("/".join([*folder, name]))
            folder.append(name.rstrip("/"))
        else:
            tree.add("/".join([*folder, name]))
    return tree


def test_the_layout_tree_names_every_module_where_it_is():
    """Each module of harness/ appears in docs/layout.md's tree under its own folder."""
    tree = tree_under_harness(HARNESS.parent / "docs" / "layout.md")
    modules = {str(path.relative_to(HARNESS)) for path in HARNESS.rglob("*.py")
               if path.name != "__init__.py"}
    assert sorted(modules - tree) == [] and sorted(m for m in tree - modules if m.endswith(".py")) == []


def test_the_readme_tree_names_every_package_of_harness():
    """The README's short tree names each package directly under harness/, and no folder that is not one."""
    named = {entry for entry in tree_under_harness(HARNESS.parent / "README.md") if entry.count("/") == 1}
    packages = {f"{path.parent.name}/" for path in HARNESS.glob("*/__init__.py")}
    assert sorted(named) == sorted(packages)


def manifest_reads(source: str) -> list[str]:
    """Every read of a run's manifest as a dict: `.manifest` and `.asked` (the parameters as stored)."""
    return [f"line {node.lineno}: .{node.attr}" for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Attribute) and node.attr in ("manifest", "asked")]


def test_the_article_reads_a_run_through_its_parameters_and_summary_not_its_manifest():
    """A section takes run.parameters.<field> (a setting added later takes its default there, once) and
    run.summary, run.procedure, run.server; never the manifest dict with a default restated beside it."""
    readers = {str(path.relative_to(HARNESS)): found for path in (HARNESS / "article").rglob("*.py")
               if (found := manifest_reads(path.read_text()))}
    assert readers == {}
    assert sorted(manifest_reads("run.manifest['parameters'].get('storage', 'tmpfs')\nrun.asked['fault']\n"
                                 "run.parameters.storage\n")) == ["line 1: .manifest", "line 2: .asked"]


def section_imports(graph: dict[str, set[str]], sections: set[str]) -> list[str]:
    """Imports of a section module by another module of sections/: a section's data reaches another through its
    UPSTREAM, and what two sections share lives in a part (a module of sections/ that is not a section)."""
    prefix = "harness.article.sections."
    return sorted(f"{name} -> {target}" for name, imported in graph.items() if name.startswith(prefix)
                  for target in imported if target in sections and target != name)


def test_no_section_imports_another_section():
    from harness.article import contents

    sections = {section.__name__ for section in contents.SECTIONS}
    assert len(sections) > 15
    assert section_imports(import_graph(), sections) == []
    assert section_imports({"harness.article.sections.job_wait": {"harness.article.sections.races",
                                                                  "harness.article.sections.race_sweep"},
                            "harness.article.sections.soak_charts": {"harness.article.sections.soak"}},
                           {"harness.article.sections.races", "harness.article.sections.soak"}) == [
        "harness.article.sections.job_wait -> harness.article.sections.races",
        "harness.article.sections.soak_charts -> harness.article.sections.soak"], "the check sees both kinds"
