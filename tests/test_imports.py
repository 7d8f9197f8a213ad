"""The import graph of harness/ has no circles, imports inside functions included."""

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
