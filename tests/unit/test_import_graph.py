"""patchkit's modules import one another without a circle, so none can come back.

The graph is read with `ast` over every control-side file of patchkit/ (the host agent's
files are exec'd on hosts, not imported): every import counts, at the top, under
TYPE_CHECKING or inside a function, since each is a dependency a reader must follow and a
function-level import only hides a circle until the function runs. An edge goes to the
module named (`from a.b import c` -> a.b.c when c is a module, else a.b)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import REPO

PACKAGE = REPO / "patchkit"
HOST = PACKAGE / "agent" / "host"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PACKAGE.glob("**/*.py") if HOST not in p.parents}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            graph[name] |= {t for t in targets if t in files and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle per strongly connected part of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            part = []
            while True:
                top = stack.pop()
                part.append(top)
                if top == node:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_patchkit_s_import_graph_has_no_circle() -> None:
    graph = import_graph()
    assert len(graph) > 50 and "patchkit.runner" in graph["patchkit.cli"]
    assert cycles(graph) == []


def test_the_circle_finder_finds_a_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
