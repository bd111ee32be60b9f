"""The host agent's files and the ops they declare: pure, no asyncio, so that what only
needs to know them (the step kinds' registry adding a kind's host file, a recipe being
validated) does not load the running client (host/agent/client.py).

The host side is the folder host/remote/, read here as text and never imported: its core is
sent at every start, each extension with the first op it declares (AGENT_EXTENSIONS, host_ops).
"""

from __future__ import annotations

import functools
import importlib.util
import re
from pathlib import Path

# What the control side and the host must agree on. The host files never define these:
# they are sent as assignments ahead of the core's source (see agent_source).
START_MARK = b"patchkit-agent-start "  # + the nonce: the agent's first line (see FRAMING)
PART_SUFFIX = ".patchkit-part"  # a deploy's file arrives in .NAME + this, then is renamed
SENT_CONSTANTS = {"START_MARK": START_MARK, "PART_SUFFIX": PART_SUFFIX}

# The agent's core, sent at start, and its extensions: each one's files are sent (in this
# order, one op_load each) the first time a run asks for an op one of them declares. The
# checkpoint reader is a library the control side runs too (local validation): its one copy
# lives in patchkit/host/checkpoint/ and goes ahead of the host file that calls it.
HOST = "patchkit.host.remote"
AGENT_CORE = (HOST, "core.py")
AGENT_EXTENSIONS: dict[str, tuple[tuple[str, str], ...]] = {
    "checkpoint": (("patchkit.host.checkpoint", "reader.py"), (HOST, "checkpoint.py")),
    "transfer": ((HOST, "transfer.py"),),
    "processes": ((HOST, "processes.py"),),
    "installed": ((HOST, "installed.py"),),
}
# Host files that run beside the core but never in the agent: a start-up bundle's run (`patchkit
# bundle` puts the core and this file in the bundle; its __main__ runs both, in that order).
BUNDLE_RUNNER = (HOST, "bundle.py")


def add_extension(name: str, files: tuple[tuple[str, str], ...]) -> None:
    """A step kind's own host files, declaring its ops (run/steps/registry.py): known before
    the first request asks which file declares an op."""
    if host_ops.cache_info().currsize:
        raise RuntimeError(f"agent extension {name!r} added after the host files were read")
    if name in AGENT_EXTENSIONS:
        raise RuntimeError(f"agent extension {name!r} added twice")
    AGENT_EXTENSIONS[name] = files


@functools.cache
def agent_file(pkg: str, name: str) -> bytes:
    data = _package_file(pkg, name)
    if (pkg, name) != AGENT_CORE:  # only the core runs as the program: drop the others' __main__ tails
        data = re.split(rb"(?m)^if __name__ ==", data)[0]
    return data


def _package_file(pkg: str, name: str) -> bytes:
    """A file of one of patchkit's packages. Read from the package's folder (found without
    running the package) when it is installed as files, as it always is by pip; else through
    importlib.resources (a zip), whose readers import zipfile, a cost on every run's start."""
    spec = importlib.util.find_spec(pkg)
    folders = list(spec.submodule_search_locations or []) if spec else []
    for folder in folders:
        try:
            return Path(folder, name).read_bytes()
        except OSError:
            continue
    from importlib import resources

    return resources.files(pkg).joinpath(name).read_bytes()


# A top-level `@op` or `@op(...)` decorator line, and a top-level `def op_<name>(` line.
_OP_DECORATOR = re.compile(rb"@op(?:\(.*)?\s*$")
_OP_MUTATING = re.compile(rb"@op\(.*\bmutating=True\b")
_OP_DEF = re.compile(rb"def op_(\w+)\s*\(")


def declared_ops(source: bytes, mutating: bool = False) -> list[str]:
    """The ops a host file declares: its top-level functions op_<name> decorated @op or @op(...);
    with `mutating`, only those declared @op(mutating=True) (they may change the host).

    Read line by line, not with `ast`, to keep the start of every run fast (bench/README.md).
    The host files keep to the form this reads (test_host_files checks it against `ast`)."""
    found, decorated, mutates = [], False, False
    for line in source.splitlines():
        if line.startswith(b"@"):
            decorated = decorated or bool(_OP_DECORATOR.match(line))
            mutates = mutates or bool(_OP_MUTATING.match(line))
            continue
        match = _OP_DEF.match(line)
        if match and decorated and (mutates or not mutating):
            found.append(match.group(1).decode())
        if line and not line[:1].isspace() and not line.startswith(b"#"):
            decorated = mutates = False
    return found


def mutating_ops() -> set[str]:
    """The ops that may change the host, as the host files declare them (@op(mutating=True)):
    the agent refuses them once a journal write failed."""
    every = [AGENT_CORE] + [f for files in AGENT_EXTENSIONS.values() for f in files]
    return {op for pkg, name in every for op in declared_ops(agent_file(pkg, name), mutating=True)}


@functools.cache
def host_ops() -> dict[str, str | None]:
    """op name -> the extension that declares it (None: the core's), read from the host files."""
    found: dict[str, str | None] = {op: None for op in declared_ops(agent_file(*AGENT_CORE))}
    for extension, files in AGENT_EXTENSIONS.items():
        for pkg, name in files:
            for op in declared_ops(agent_file(pkg, name)):
                if op in found:
                    raise RuntimeError(f"op {op!r} is declared twice in the host files ({name})")
                found[op] = extension
    return found
