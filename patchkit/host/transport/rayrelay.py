"""The actor that runs on a Ray node: it starts the host agent there and relays its pipes.

This class is sent to the node by value (raytransport.py registers the module with Ray's
pickler), so a node needs Ray and Python, not patchkit: stdlib only (Python >= 3.9, as Ray), no patchkit imports.
One actor per node per run; each `start` is one process (the agent: the host's python, the
bootstrap and nonce, exactly as SSH runs it), named by a key the control side chooses.

Ray runs an async actor's calls concurrently, so stdin writes carry a sequence number and are
written in that order, whatever order they arrive in. A write may be an ObjectRef (a chunk of a
file in the object store, put once for every node): Ray fetches it to this node first.
"""

from __future__ import annotations

import asyncio
import collections
import os
import signal
from typing import Any

READ_LIMIT = 1 << 26
STDERR_LINES = 200


class _Process:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.next_seq = 0
        self.turn = asyncio.Condition()
        self.stderr: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self.broken: str | None = None  # why stdin takes no more (the process is gone)
        self.pump = asyncio.ensure_future(self._read_stderr())

    async def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        while True:
            try:
                line = await self.proc.stderr.readline()
            except ValueError:
                continue
            if not line:
                return
            self.stderr.append(line.decode("utf-8", "replace").rstrip("\r\n"))


class AgentRelay:
    def __init__(self) -> None:
        self._procs: dict[int, _Process] = {}

    def node(self) -> dict[str, Any]:
        """Where this actor runs (the control side checks its pinning)."""
        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}

    async def start(self, key: int, argv: list[str]) -> str | None:
        """Start argv with its pipes, in its own session; None, or why it cannot start."""
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, limit=READ_LIMIT, start_new_session=True)
        except FileNotFoundError:
            return f"interpreter {argv[0]} not found"
        except PermissionError:
            return f"interpreter {argv[0]} is not executable"
        except OSError as exc:
            return f"interpreter {argv[0]} cannot be run: {exc.strerror or exc}"
        self._procs[key] = _Process(proc)
        return None

    async def write(self, key: int, seq: int, data: bytes) -> str | None:
        """Write `data` (bytes, or an ObjectRef Ray resolved to them) as write number `seq`;
        None, or why the process takes no more input."""
        p = self._procs[key]
        async with p.turn:
            await p.turn.wait_for(lambda: p.next_seq == seq)
            try:
                if p.broken is None:
                    assert p.proc.stdin is not None
                    p.proc.stdin.write(data)
                    await p.proc.stdin.drain()
            except (ConnectionError, OSError) as exc:
                p.broken = f"the agent's stdin is closed ({exc.__class__.__name__})"
            p.next_seq += 1
            p.turn.notify_all()
            return p.broken

    async def read(self, key: int, size: int) -> bytes:
        """Up to `size` bytes of stdout, as soon as there are some; b"" at its end (or once ended)."""
        p = self._procs.get(key)
        if p is None or p.proc.stdout is None:
            return b""
        return await p.proc.stdout.read(size)

    async def stderr(self, key: int, settle: float) -> dict[str, Any]:
        """The lines of stderr kept, waiting up to `settle` s for the process to end first."""
        p = self._procs.get(key)
        if p is None:
            return {"lines": [], "returncode": None}
        try:
            await asyncio.wait_for(p.proc.wait(), settle)
            await asyncio.wait_for(asyncio.shield(p.pump), settle)
        except asyncio.TimeoutError:  # noqa: UP041 - not TimeoutError before Python 3.11 (a node's)
            pass
        return {"lines": list(p.stderr), "returncode": p.proc.returncode}

    async def end(self, key: int, timeout: float, settle: float) -> dict[str, Any]:
        """Close stdin (the agent's cue to exit), wait `timeout`, then kill it; its stderr and
        exit status. Its stdout stays readable to its end (the control side reads what is left)."""
        p = self._procs.get(key)
        if p is None:
            return {"lines": [], "returncode": None}
        proc = p.proc
        if proc.returncode is None:
            try:
                assert proc.stdin is not None
                proc.stdin.close()
                await asyncio.wait_for(proc.wait(), timeout)
            except (asyncio.TimeoutError, OSError):  # noqa: UP041
                _kill(proc)
                await proc.wait()
        try:
            await asyncio.wait_for(asyncio.shield(p.pump), settle)
        except asyncio.TimeoutError:  # noqa: UP041 - not TimeoutError before Python 3.11 (a node's)
            pass
        return {"lines": list(p.stderr), "returncode": proc.returncode}

    async def end_all(self) -> None:
        for key in list(self._procs):
            await self.end(key, 2.0, 1.0)


def _kill(proc: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # its own session: the agent and what it started in it
    except OSError:
        proc.kill()
