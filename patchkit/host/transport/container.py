"""Containers and pods: one `ENGINE exec -i` process per spawn, whatever the engine.

The same one-agent-process model as SSH: the agent's bootstrap is the exec'd command, its
source and every request go to its stdin, replies come on its stdout. One exec per
container per run (counted in `exec_requests`), nothing installed in the container. Each
engine's scheme (podman.py, docker.py, k8s.py) builds the exec's argv (an `EngineTarget`,
engine.py), never through a shell; this module starts it and talks to it.

An exec that fails before the agent's first line (no such container, not running, no such
interpreter in the image, no engine service) is read from the engine's stderr where the first
answer is awaited and raised as one `ContainerFailure` (container_errors.py) naming the host.

A container's files live as long as the container: `CHANGES_NOTE` is what `apply` tells the
user once per container host it changed (a recreated container starts from its image again).
"""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import replace
from typing import TYPE_CHECKING

from patchkit.host.transport.base import NoFileSplice
from patchkit.host.transport.container_errors import (
    ContainerFailure,
    Where,
    container_failure,
    failure_from,
    is_engine_note,
)
from patchkit.host.transport.pipes import PipedProcess, start_piped

if TYPE_CHECKING:
    from patchkit.host.transport.engine import EngineTarget

CLOSE_TIMEOUT_S = 10.0
ERROR_TAIL_LINES = 5

CHANGES_NOTE = ("changes made inside a running container are lost when the container is recreated from its "
                "image: bake them into the image (`patchkit bake RECIPE --from IMAGE -t TAG`)")


class ContainerTransport:
    name = "container"
    changes_note: str | None = CHANGES_NOTE  # apply says it once per host it changed

    def __init__(self, target: EngineTarget, changes_note: str | None = CHANGES_NOTE) -> None:
        self.target = target
        self.exec_requests = 0
        self.changes_note = changes_note
        self._live: set[_ContainerStreams] = set()

    async def spawn(self, argv: list[str]) -> _ContainerStreams:
        target = self.target
        if shutil.which(target.engine) is None:
            raise container_failure("engine_missing", replace(target.where, engine=target.engine), detail="")
        if argv:  # what the messages call the interpreter: the one actually started
            target = replace(target, python=argv[0])
        self.exec_requests += 1
        command = target.command(argv)
        try:
            proc = await start_piped(command)
        except OSError as exc:
            raise container_failure("engine_missing", replace(target.where, engine=target.engine),
                                    detail=exc.strerror or str(exc)) from None
        streams = _ContainerStreams(self, proc, target.where)
        self._live.add(streams)
        return streams

    async def close(self) -> None:
        for streams in list(self._live):
            await streams.close()


class _Stdin:
    """The exec's stdin; a broken pipe says how the exec ended (the container stopped...)."""

    def __init__(self, streams: _ContainerStreams) -> None:
        assert streams.proc.stdin is not None
        self._streams = streams
        self._writer = streams.proc.stdin

    def write(self, data: bytes) -> None:
        if not self._writer.is_closing():  # closing: the exec is gone, drain() says why
            self._writer.write(data)

    async def drain(self) -> None:
        """Before the agent's first line a broken pipe is not an error yet: the exec failed (no
        such container...) and the reader says why, from the engine's stderr."""
        try:
            if self._writer.is_closing():
                raise ConnectionResetError("closed")
            await self._writer.drain()
        except (ConnectionError, OSError):
            if not self._streams.answered:
                return
            raise ConnectionResetError(await self._streams.ended()) from None

    def close(self) -> None:
        self._writer.close()


class _ContainerStreams(NoFileSplice):
    """The pipes of one exec process; its first empty read asks the engine's stderr why."""

    def __init__(self, transport: ContainerTransport, proc: asyncio.subprocess.Process, where: Where) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.transport = transport
        self.proc = proc
        self.where = where
        self.piped = PipedProcess(proc)  # stderr read as it comes; how the exec is ended
        self.stdin = _Stdin(self)  # write/drain
        self.stdout = self  # readline
        self.answered = False  # a line of stdout arrived: the exec started the interpreter

    async def ended(self) -> str:
        """Why the exec is gone, for a broken pipe: its exit status, and what that usually means."""
        try:
            code = await asyncio.wait_for(self.proc.wait(), 2)
        except TimeoutError:
            return f"{self.where.engine} exec stopped reading"
        meaning = " (the container was stopped or removed?)" if code in (137, 143, 255) or code < 0 else ""
        return f"{self.where.engine} exec exited with {code}{meaning}"

    async def _stderr_lines(self) -> list[str]:
        return await self.piped.stderr_lines()

    async def readline(self) -> bytes:
        assert self.proc.stdout is not None
        line = await self.proc.stdout.readline()
        if line:
            self.answered = True
            return line
        if not self.answered:  # the exec itself failed: the engine says why on stderr
            failure = failure_from(await self._stderr_lines(), self.where)
            if failure is not None:
                raise failure
        return b""

    async def stderr_text(self) -> str:
        """The exec's stderr without the engine's own notes (kubectl's `Defaulted container ...`)."""
        return "\n".join(line for line in await self._stderr_lines() if not is_engine_note(line))

    async def error_tail(self) -> str:
        lines = await self._stderr_lines()
        if not self.answered:
            failure = failure_from(lines, self.where)
            if failure is not None:  # the client prefixes the host's name itself
                return str(failure).removeprefix(f"{self.where.host}: ")
        tail = "; ".join([line.strip() for line in lines if line.strip()][-ERROR_TAIL_LINES:])  # one line
        if self.proc.returncode not in (None, 0):  # how the exec ended, then what it said
            return await self.ended() + (f": {tail}" if tail else "")
        return tail

    async def close(self) -> None:
        self.transport._live.discard(self)
        await self.piped.end(CLOSE_TIMEOUT_S)


__all__ = ["CHANGES_NOTE", "ContainerFailure", "ContainerTransport"]
