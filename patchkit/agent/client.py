"""Control side of the host agent: start it through a transport, send requests."""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable

from patchkit.errors import HostError, HostUnreachable
from patchkit.transport.base import AgentStreams, Transport

# Reads the agent's source (length-prefixed) from stdin, then runs it: one process,
# one exec request per host, nothing installed on the host.
# An older interpreter says so plainly (the agent's source needs 3.8: it would fail to compile).
BOOTSTRAP = (
    "import sys;sys.version_info<(3,8)and sys.exit('patchkit needs Python >= 3.8 on the host; %s is %d.%d'"
    "%(sys.executable,sys.version_info[0],sys.version_info[1]));n=int(sys.stdin.buffer.readline());"
    "exec(compile(sys.stdin.buffer.read(n),'patchkit-hostagent','exec'))"
)


# The agent's core, sent at start, and its optional files, sent (in this order: later ones
# use what earlier ones define) the first time a run asks for an op one of them defines.
AGENT_CORE = ("patchkit.agent", "hostagent.py")
AGENT_EXTENSIONS = (("patchkit.checkpoint", "reader.py"), ("patchkit.agent", "transfer.py"),
                    ("patchkit.agent", "processes.py"))


@functools.cache
def agent_file(pkg: str, name: str) -> bytes:
    data = resources.files(pkg).joinpath(name).read_bytes()
    if (pkg, name) != AGENT_CORE:  # only the core runs as the program: drop the others' __main__ tails
        data = re.split(rb"(?m)^if __name__ ==", data)[0]
    return data


def agent_source() -> bytes:
    return agent_file(*AGENT_CORE)


@functools.cache
def extension_of_op() -> dict[str, int]:
    """op name -> index in AGENT_EXTENSIONS of the file that defines op_<name>."""
    found: dict[str, int] = {}
    for index, (pkg, name) in enumerate(AGENT_EXTENSIONS):
        for op in re.findall(rb"(?m)^def op_(\w+)\(", agent_file(pkg, name)):
            found[op.decode()] = index
    return found


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
        self._write_lock = asyncio.Lock()
        self._read_lock = asyncio.Lock()
        self._replies: dict[Any, dict[str, Any]] = {}
        self._hello: Pending | None = None
        self._extensions: list[Pending] = []  # op_load requests sent so far, in AGENT_EXTENSIONS order
        self.info: dict[str, Any] = {}
        self.bytes_sent = 0
        self.on_bytes: Callable[[int], None] | None = None  # progress: total bytes streamed so far

    @classmethod
    async def start(cls, transport: Transport, python: str, host: str) -> "AgentClient":
        """Start the agent; its `hello` is on the way but not awaited (see `started`)."""
        streams = await transport.spawn(agent_argv(python))
        client = cls(streams, host)
        source = agent_source()
        client._hello = await client._send_or_explain(
            "hello", {}, python, preamble=str(len(source)).encode() + b"\n" + source)
        return client

    async def started(self, python: str) -> dict[str, Any]:
        """Wait for the agent's `hello` (requests may be queued behind it already)."""
        assert self._hello is not None
        try:
            self.info = await self._hello.result(60)
        except HostUnreachable:
            raise  # found while waiting for the first answer (the OpenSSH transport): not about python
        except HostError as exc:
            raise HostError(f"cannot start {python} on {self._host}: {exc}") from None
        return self.info

    async def _send_or_explain(self, op: str, args: dict[str, Any], python: str, preamble: bytes = b"") -> "Pending":
        try:
            return await self._send(op, args, None, preamble)
        except HostError:  # the process is gone already (sudo refused, not python...)
            detail = await self._streams.error_tail()
            await self._streams.close()
            raise HostError(f"cannot start {python} on {self._host}: {detail or 'it exited at once'}") from None

    async def call(self, op: str, timeout: float | None = 600, **args: Any) -> Any:
        return await self._request(op, args, None, timeout)

    async def send(self, op: str, **args: Any) -> "Pending":
        """Queue a request without waiting for its answer (pipelining: the agent answers in
        order, so on a slow link several requests cost one round trip). Await `.result()`."""
        return await self._send(op, args, None)

    async def send_file(self, op: str, local: Path, start: int, count: int, **args: Any) -> "Pending":
        """A request followed by `count` raw bytes of `local` from `start` (a streaming op).
        Returns once the bytes are out, not when the agent has answered: the next file can
        follow at once, so a deploy of many files costs no round trip per file."""
        return await self._send(op, args, (local, start, count))

    async def _request(self, op: str, args: dict[str, Any], payload: tuple[Path, int, int] | None,
                       timeout: float | None) -> Any:
        return await (await self._send(op, args, payload)).result(timeout)

    async def _send(self, op: str, args: dict[str, Any], payload: tuple[Path, int, int] | None,
                    preamble: bytes = b"") -> "Pending":
        async with self._write_lock:
            needed = extension_of_op().get(op, -1)
            while len(self._extensions) <= needed:  # the files this op needs go first, same write
                pkg, name = AGENT_EXTENSIONS[len(self._extensions)]
                load_id = next(self._ids)
                load = {"id": load_id, "op": "load", "args": {"name": name, "source": agent_file(pkg, name).decode()}}
                preamble += json.dumps(load).encode() + b"\n"
                self._extensions.append(Pending(self, load_id, f"load {name}"))
            request_id = next(self._ids)
            request = {"id": request_id, "op": op, "args": args}
            try:
                self._streams.stdin.write(preamble + json.dumps(request).encode() + b"\n")
                await self._streams.stdin.drain()
                if payload is not None:
                    await self._stream(*payload)
            except (ConnectionError, BrokenPipeError, OSError) as exc:
                raise HostError(f"{self._host}: connection lost during {op}: {exc}") from None
        return Pending(self, request_id, op, self._extensions[:needed + 1])

    async def _reply(self, request_id: int, op: str, timeout: float | None) -> Any:
        async with self._read_lock:  # replies arrive in request order; keep the ones read early
            while request_id not in self._replies:
                try:
                    line = await asyncio.wait_for(self._streams.stdout.readline(), timeout)
                except asyncio.TimeoutError:
                    raise HostError(f"{self._host}: no answer to {op} within {timeout}s") from None
                except (ConnectionError, BrokenPipeError, OSError) as exc:
                    raise HostError(f"{self._host}: connection lost during {op}: {exc}") from None
                if not line:
                    detail = await self._streams.error_tail()
                    raise HostError(f"{self._host}: agent exited during {op}" + (f": {detail}" if detail else ""))
                reply = json.loads(line)
                self._replies[reply.get("id")] = reply
            reply = self._replies.pop(request_id)
        if reply.get("ok"):
            return reply["result"]
        if reply.get("kind") == "refused":
            raise AgentRefused(reply["error"])
        raise HostError(f"{self._host}: {op} failed: {reply['error']}")

    async def _stream(self, local: Path, offset: int, length: int) -> None:
        # Streams that can move file bytes themselves (the OpenSSH transport: splice into ssh's
        # stdin) skip the copy through Python; others get a fresh bytes object per chunk.
        write_file = getattr(self._streams.stdin, "write_file", None)
        with open(local, "rb") as f:
            f.seek(offset)
            remaining = length
            while remaining > 0:
                size = min(STREAM_CHUNK, remaining)
                sent = None
                if write_file is not None:
                    sent = await write_file(f.fileno(), offset + length - remaining, size)
                    if sent is None:
                        write_file = None
                        f.seek(offset + length - remaining)
                if sent is None:
                    chunk = f.read(size)
                    if chunk:
                        self._streams.stdin.write(chunk)
                        await self._streams.stdin.drain()
                    sent = len(chunk)
                if not sent:
                    raise HostError(f"{local} shrank while it was being sent")
                remaining -= sent
                self.bytes_sent += sent
                if self.on_bytes:
                    self.on_bytes(self.bytes_sent)

    async def close(self) -> None:
        await self._streams.close()


@dataclass
class Pending:
    """A request sent to the agent whose answer has not been read yet."""

    client: AgentClient
    request_id: int
    op: str
    needs: list["Pending"] = field(default_factory=list)  # the agent files this op's code came in

    _outcome: tuple[bool, Any] | None = None  # (ok, value or exception) once read

    async def result(self, timeout: float | None = 600) -> Any:
        if self._outcome is None:
            try:
                for load in self.needs:
                    await load.result(timeout)  # a file that failed to load explains itself
                self._outcome = (True, await self.client._reply(self.request_id, self.op, timeout))
            except HostError as exc:
                self._outcome = (False, exc)
        ok, value = self._outcome
        if not ok:
            raise value
        return value
