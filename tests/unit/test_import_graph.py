"""patchkit's modules import one another without a circle, so none can come back.

The graph is read with `ast` over every control-side file of patchkit/ (the host agent's
files are exec'd on hosts, not imported): every import counts, at the top, under
TYPE_CHECKING or inside a function, since each is a dependency a reader must follow and a
function-level import only hides a circle until the function runs (the registries' lazy
dispatch edges, LAZY_DISPATCH, are the named exceptions). An edge goes to the
module named (`from a.b import c` -> a.b.c when c is a module, else a.b)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import REPO

PACKAGE = REPO / "patchkit"
HOST = PACKAGE / "host" / "remote"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


# The only edges allowed to close a circle, each an import inside a function that a registry
# makes on purpose, so that what it names loads only when it is used (the light start): a
# scheme reaching its transport's code (loaded only for a host of the scheme).
# The graph of imports that run at import time has no circle at all (tested below).
LAZY_DISPATCH: dict[str, tuple[str, ...]] = {
    # asyncssh here, asyncssh in the SSH helper process, or ssh(1)
    "patchkit.host.transport.ssh_scheme": ("patchkit.host.transport.ssh_common", "patchkit.host.transport.ssh",
                                           "patchkit.host.transport.sshhelper", "patchkit.host.transport.openssh"),
    "patchkit.host.transport.engine": ("patchkit.host.transport.container",),  # an engine's exec process
    "patchkit.host.transport.ray_scheme": ("patchkit.host.transport.raytransport",),  # the relay actor, Ray
}


def _lazy(edge: tuple[str, str]) -> bool:
    return any(edge[1] == dst or dst.endswith(".") and edge[1].startswith(dst)
               for dst in LAZY_DISPATCH.get(edge[0], ()))


def _function_level(tree: ast.AST) -> set[int]:
    """ids of the import nodes that sit inside a function body."""
    inside: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inside |= {id(n) for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))}
    return inside


def import_graph(eager_only: bool = False) -> dict[str, set[str]]:
    """Every import (eager_only: those that run or are read when the module is: not inside a function)."""
    files = {module_name(p): p for p in PACKAGE.glob("**/*.py") if HOST not in p.parents}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(), str(path))
        in_functions = _function_level(tree) if eager_only else set()
        for node in ast.walk(tree):
            if id(node) in in_functions:
                continue
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
    assert len(graph) > 50 and "patchkit.run.runner" in graph["patchkit.cli.commands"]
    without_dispatch = {name: {t for t in targets if not _lazy((name, t))} for name, targets in graph.items()}
    assert cycles(without_dispatch) == []


def test_the_registries_lazy_edges_are_lazy_and_the_only_ones_closing_a_circle() -> None:
    eager = import_graph(eager_only=True)
    assert cycles(eager) == []  # what runs (or is read) when a module is imported: no circle at all
    graph = import_graph()
    for src in LAZY_DISPATCH:  # each exception still closes a circle (else it must go)
        lazy = {t for t in graph[src] if _lazy((src, t))}
        assert lazy, src
        assert any(set(part) & lazy and src in part for part in cycles(graph)), src


def test_the_circle_finder_finds_a_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
