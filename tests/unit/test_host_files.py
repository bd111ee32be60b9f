"""The host side of the agent, patchkit/host/remote/: what runs on a host is stdlib-only
Python 3.8, the control side never imports it, and the ops the control side routes to each
file are exactly those that file registers on the host."""

from __future__ import annotations

import ast
import builtins
import symtable
import sys
from pathlib import Path

from patchkit.host.agent.client import (
    AGENT_CORE,
    AGENT_EXTENSIONS,
    HOST,
    SENT_CONSTANTS,
    agent_file,
    host_ops,
    mutating_ops,
)
from patchkit.host.agent.files import BUNDLE_RUNNER
from tests.helpers import REPO, host_agent

PACKAGE = REPO / "patchkit"
HOST_DIR = PACKAGE / "host" / "remote"
HOST_FILES = sorted(HOST_DIR.glob("**/*.py"))
SHIPPED = [AGENT_CORE] + [f for files in AGENT_EXTENSIONS.values() for f in files] + [BUNDLE_RUNNER]


def shipped_path(pkg: str, name: str) -> Path:
    return REPO.joinpath(*pkg.split(".")) / name


def test_every_host_file_parses_as_python38_and_imports_only_the_standard_library() -> None:
    files = sorted(set(HOST_FILES) | {shipped_path(*f) for f in SHIPPED})  # the reader too: it is shipped
    assert HOST_DIR / "core.py" in files and len(files) >= 5
    for path in files:
        tree = ast.parse(path.read_text(), str(path), feature_version=(3, 8))
        imported = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0 and node.module != "__future__", f"{path}:{node.lineno}"
                imported.add(node.module.split(".")[0])
            # 3.8 evaluates annotations at run time (list[str] fails there): none at all
            assert not isinstance(node, ast.AnnAssign), f"{path}:{node.lineno}: an annotation"
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
                assert node.returns is None and all(a.annotation is None for a in args), f"{path}:{node.lineno}"
        assert imported <= set(sys.stdlib_module_names), (path, imported - set(sys.stdlib_module_names))


def test_every_file_in_the_host_folder_is_shipped_and_nothing_else_from_it() -> None:
    shipped_here = {name for pkg, name in SHIPPED if pkg == HOST}
    assert {p.name for p in HOST_FILES} - {"__init__.py"} == shipped_here


def test_control_code_imports_nothing_that_is_shipped_to_hosts() -> None:
    """The reader is the one file both sides run: a library, its one copy in checkpoint/."""
    host_modules = {"patchkit.host.remote"} | {f"{pkg}.{name[:-3]}" for pkg, name in SHIPPED}
    host_modules.discard("patchkit.host.checkpoint.reader")
    for path in sorted(PACKAGE.glob("**/*.py")):
        if HOST_DIR in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names] \
                if isinstance(node, ast.ImportFrom) else []
            for name in names:
                assert not any(name == m or name.startswith(m + ".") for m in host_modules), \
                    f"{path.relative_to(REPO)}:{node.lineno} imports {name}, a file shipped to hosts"


def free_globals(source: str, name: str) -> set[str]:
    """Global names a file reads but neither defines nor imports, nor finds among builtins."""
    top = symtable.symtable(source, name, "exec")
    defined = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported() or s.is_namespace()}
    used: set[str] = set()

    def walk(table: symtable.SymbolTable) -> None:
        for sym in table.get_symbols():
            if sym.is_referenced() and (table is top or sym.is_global()):
                used.add(sym.get_name())
        for child in table.get_children():
            walk(child)

    walk(top)
    return used - defined - set(dir(builtins)) - {"__name__", "__file__"}


def top_level_names(source: str) -> set[str]:
    return {s.get_name() for s in symtable.symtable(source, "x", "exec").get_symbols()
            if s.is_assigned() or s.is_imported() or s.is_namespace()}


def test_host_files_use_only_the_core_the_sent_constants_and_what_ships_before_them() -> None:
    """The extensions run in the core's namespace: every name they take from it exists there
    (no globals().get, no noqa), and the constants both sides agree on are sent, never defined."""
    core = agent_file(*AGENT_CORE).decode()
    sent = set(SENT_CONSTANTS)
    assert free_globals(core, "core.py") <= sent, free_globals(core, "core.py") - sent
    assert not top_level_names(core) & sent
    for extension, files in AGENT_EXTENSIONS.items():
        available = top_level_names(core) | sent
        for pkg, name in files:
            source = agent_file(pkg, name).decode()
            missing = free_globals(source, name) - available
            assert not missing, f"{extension}/{name} uses {sorted(missing)}, defined nowhere it runs"
            assert not top_level_names(source) & sent, f"{name} defines a constant the control side sends"
            available |= top_level_names(source)


def test_the_ops_the_control_side_routes_are_the_ops_each_host_file_registers() -> None:
    known = host_ops()
    core = host_agent()
    assert set(core.HANDLERS) == {op for op, ext in known.items() if ext is None}
    every = host_agent(*AGENT_EXTENSIONS)
    for extension in AGENT_EXTENSIONS:
        added = set(host_agent(extension).HANDLERS) - set(core.HANDLERS)
        assert added == {op for op, ext in known.items() if ext == extension}, extension
        assert added, f"{extension} declares no op"
    # every op_ function is declared (an undeclared one would be unreachable), and only those
    assert {n[len("op_"):] for n in vars(every) if n.startswith("op_")} == set(every.HANDLERS) == set(known)


def test_every_op_the_control_code_sends_is_declared_by_a_host_file() -> None:
    """The control side names an op only by its constant in host/agent/protocol.py (typed by its
    request and reply), and protocol.py types exactly the ops the host files declare."""
    from patchkit.host.agent import protocol

    assert set(protocol.OPS) == set(host_ops()), set(protocol.OPS) ^ set(host_ops())
    from patchkit.run.steps.registry import KINDS

    homes = [protocol] + [sys.modules[type(kind).__module__] for kind in KINDS.values()]  # a kind types its own ops
    constants = {name for home in homes for name, value in vars(home).items() if isinstance(value, protocol.Op)}
    sent = set()
    for path in sorted(PACKAGE.glob("**/*.py")):
        if HOST_DIR in path.parents or path in (PACKAGE / "host" / "agent" / "client.py", PACKAGE / "host" / "testing.py"):
            # the client relays requests, and so does FakeAgent (patchkit.host.testing)
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ("call", "send", "send_file") and node.args:
                first = node.args[0]
                assert isinstance(first, ast.Call) and isinstance(first.func, ast.Name), \
                    f"{path.relative_to(REPO)}:{node.lineno}: a request not made by an op of protocol.py"
                sent.add(first.func.id)
    assert len(sent) > 20 and "RECEIVE_FILE" in sent and "READ_CHECKPOINT" in sent
    assert sent <= constants, sent - constants


def test_the_journal_guard_covers_every_op_that_changes_the_host() -> None:
    every = host_agent(*AGENT_EXTENSIONS)
    assert {"apply_files", "restore", "receive_file", "remove_file", "launch_start", "launch_stop",
            "journal_prune"} <= every.MUTATING_OPS
    assert mutating_ops() == every.MUTATING_OPS  # what the control side (and FakeAgent) read from the host files
    assert every.STREAMING_OPS == {"receive_file"}


def test_the_bundle_runner_uses_only_the_core_and_the_sent_constants_and_declares_no_op() -> None:
    """A start-up bundle runs core.py, then this file, in one namespace (commands/bundle.py MAIN)."""
    core = agent_file(*AGENT_CORE).decode()
    source = agent_file(*BUNDLE_RUNNER).decode()
    missing = free_globals(source, "bundle.py") - top_level_names(core) - set(SENT_CONSTANTS)
    assert not missing, f"bundle.py uses {sorted(missing)}, defined nowhere it runs"
    assert not top_level_names(source) & (top_level_names(core) | set(SENT_CONSTANTS))
    assert "\n@op" not in source
