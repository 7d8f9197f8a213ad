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


def test_the_readme_tree_names_every_module_where_it_is():
    """Each module of harness/ appears in the README's tree under its own folder."""
    lines = (HARNESS.parent / "README.md").read_text().splitlines()
    start = lines.index("harness/           the package")
    tree, folder = set(), []
    for line in lines[start + 1:]:
        if not line.startswith("  "):
            break
        depth = (len(line) - len(line.lstrip(" "))) // 2
        name = line.split()[0]
        folder = folder[:depth - 1]
        if name.endswith("/"):
            folder.append(name.rstrip("/"))
        else:
            tree.add("/".join([*folder, name]))
    modules = {str(path.relative_to(HARNESS)) for path in HARNESS.rglob("*.py")
               if path.name != "__init__.py"}
    assert sorted(modules - tree) == [] and sorted(m for m in tree - modules if m.endswith(".py")) == []
