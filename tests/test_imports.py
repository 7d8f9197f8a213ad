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

