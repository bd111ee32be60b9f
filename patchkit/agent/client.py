"""Control side of the host agent: start it through a transport, send requests."""

from __future__ import annotations

import asyncio
import itertools
import json
from importlib import resources
from typing import Any

from patchkit.errors import HostError
from patchkit.transport.base import AgentStreams, Transport

# Reads the agent's source (length-prefixed) from stdin, then runs it: one process,
# one exec request per host, nothing installed on the host.
BOOTSTRAP = (
    "import sys;n=int(sys.stdin.buffer.readline());"
    "exec(compile(sys.stdin.buffer.read(n),'patchkit-hostagent','exec'))"
)


def agent_source() -> bytes:
    return resources.files("patchkit.agent").joinpath("hostagent.py").read_bytes()


def agent_argv(python: str) -> list[str]:
    return [python, "-c", BOOTSTRAP]


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
        async with self._lock:
            request = {"id": next(self._ids), "op": op, "args": args}
            try:
                self._streams.stdin.write(json.dumps(request).encode() + b"\n")
                await self._streams.stdin.drain()
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

    async def close(self) -> None:
        await self._streams.close()
