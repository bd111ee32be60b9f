"""Control side of the host agent: start it through a transport, send requests."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from importlib import resources
from pathlib import Path
from typing import Any, Callable

from patchkit.errors import HostError
from patchkit.transport.base import AgentStreams, Transport

# Reads the agent's source (length-prefixed) from stdin, then runs it: one process,
# one exec request per host, nothing installed on the host.
BOOTSTRAP = (
    "import sys;n=int(sys.stdin.buffer.readline());"
    "exec(compile(sys.stdin.buffer.read(n),'patchkit-hostagent','exec'))"
)


# The agent is one program made of these stdlib-only files, in this order: later ones
# use what earlier ones define (hostagent.py registers everything as ops).
AGENT_BUNDLE = (("patchkit.checkpoint", "reader.py"), ("patchkit.agent", "transfer.py"),
                ("patchkit.agent", "processes.py"), ("patchkit.agent", "hostagent.py"))


def agent_source() -> bytes:
    parts = [resources.files(pkg).joinpath(name).read_bytes() for pkg, name in AGENT_BUNDLE]
    # Only the last file runs as the program: drop the others' `if __name__ == "__main__":` tails.
    parts = [re.split(rb"(?m)^if __name__ ==", part)[0] for part in parts[:-1]] + parts[-1:]
    return b"\n\n".join(parts)


def agent_argv(python: str) -> list[str]:
    return [python, "-c", BOOTSTRAP]


STREAM_CHUNK = 1 << 20


class AgentRefused(HostError):
    """The agent declined a request for a reason the user should read (drift, lock...)."""


class AgentClient:
    """One running agent on one host; requests are answered in order."""

    def __init__(self, streams: AgentStreams, host: str) -> None:
        self._streams = streams
        self._host = host
        self._ids = itertools.count(1)
        self._lock = asyncio.Lock()
        self.info: dict[str, Any] = {}
        self.bytes_sent = 0
        self.on_bytes: Callable[[int], None] | None = None  # progress: total bytes streamed so far

    @classmethod
    async def start(cls, transport: Transport, python: str, host: str) -> "AgentClient":
        streams = await transport.spawn(agent_argv(python))
        client = cls(streams, host)
        source = agent_source()
        try:
            streams.stdin.write(str(len(source)).encode() + b"\n" + source)
            await streams.stdin.drain()
        except (ConnectionError, OSError) as exc:  # the process is gone already (sudo refused, not python...)
            detail = await streams.error_tail()
            await streams.close()
            raise HostError(f"cannot start {python} on {host}: {detail or f'it exited at once ({exc})'}") from None
        try:
            client.info = await client.call("hello", timeout=60)
        except HostError as exc:
            raise HostError(f"cannot start {python} on {host}: {exc}") from None
        return client

    async def call(self, op: str, timeout: float | None = 600, **args: Any) -> Any:
        return await self._request(op, args, None, timeout)

    async def send_file(self, op: str, local: Path, start: int, count: int, timeout: float | None = None,
                        **args: Any) -> Any:
        """A request followed by `count` raw bytes of `local` from `start` (a streaming op)."""
        return await self._request(op, args, (local, start, count), timeout)

    async def _request(self, op: str, args: dict[str, Any], payload: tuple[Path, int, int] | None,
                       timeout: float | None) -> Any:
        async with self._lock:
            request = {"id": next(self._ids), "op": op, "args": args}
            try:
                self._streams.stdin.write(json.dumps(request).encode() + b"\n")
                await self._streams.stdin.drain()
                if payload is not None:
                    await self._stream(*payload)
                line = await asyncio.wait_for(self._streams.stdout.readline(), timeout)
            except asyncio.TimeoutError:
                raise HostError(f"{self._host}: no answer to {op} within {timeout}s") from None
            except (ConnectionError, BrokenPipeError, OSError) as exc:
                raise HostError(f"{self._host}: connection lost during {op}: {exc}") from None
            if not line:
                detail = await self._streams.error_tail()
                raise HostError(f"{self._host}: agent exited during {op}" + (f": {detail}" if detail else ""))
            reply = json.loads(line)
            if reply.get("ok"):
                return reply["result"]
            if reply.get("kind") == "refused":
                raise AgentRefused(reply["error"])
            raise HostError(f"{self._host}: {op} failed: {reply['error']}")

    async def _stream(self, local: Path, offset: int, length: int) -> None:
        with open(local, "rb") as f:
            f.seek(offset)
            remaining = length
            while remaining > 0:
                chunk = f.read(min(STREAM_CHUNK, remaining))
                if not chunk:
                    raise HostError(f"{local} shrank while it was being sent")
                self._streams.stdin.write(chunk)
                await self._streams.stdin.drain()
                remaining -= len(chunk)
                self.bytes_sent += len(chunk)
                if self.on_bytes:
                    self.on_bytes(self.bytes_sent)

    async def close(self) -> None:
        await self._streams.close()
