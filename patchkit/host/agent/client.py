"""Control side of the host agent: start it through a transport, send requests.

The host side is the folder host/ beside this file, read here as text and never imported:
its core is sent at every start, each extension with the first op it declares (see
AGENT_EXTENSIONS and host_ops). Requests name their op by its `Op` in protocol.py, which
types the request and the reply.

Two kinds of time limit, kept apart by name: an op's own (`timeout_s` and the like, fields of
its request, enforced on the host) and `reply_wait`, how long this side waits for the reply.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import importlib.util
import itertools
import json
import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Generic, Mapping, TypeVar, cast

from patchkit.host.agent.protocol import HELLO, HelloReply, Request
from patchkit.base.errors import HostError, HostUnreachable
from patchkit.base.logs import get_logger
from patchkit.host.transport.base import AgentStreams, Transport

log = get_logger("patchkit")

# Runs the agent's source: one process, one exec request per host, nothing installed on the
# host. Its first argument is the nonce of this start (see FRAMING). The source comes one of
# two ways (see START): on stdin, length-prefixed (argv: nonce), or in the command line with
# the first requests, each zlib + base64 (argv: nonce, source, requests); the requests are
# handed to the agent as START_REQUESTS. One line, no newline: any login shell runs it. An
# older interpreter says so plainly (the agent's source needs 3.8: it would fail to compile).
# First of all it drops the '' that `-c` put first on sys.path (the working folder: the user's
# cwd locally, the login's HOME over SSH), so the agent imports and locates what the target
# loads in a clean process, never a `vllm/` checkout that happens to sit there. Only that entry:
# none was added under -I, -P or PYTHONSAFEPATH (3.11+), and PYTHONPATH's are absolute by then.
BOOTSTRAP = (
    "import sys;p=sys.path;p[:1]==['']and not(getattr(sys.flags,'safe_path',0)or sys.flags.isolated)and p.pop(0);"
    "sys.version_info<(3,8)and sys.exit('patchkit needs Python >= 3.8 on the host; %s is %d.%d'"
    "%(sys.executable,sys.version_info[0],sys.version_info[1]));a=sys.argv;i=sys.stdin.buffer;"
    "u=lambda t:__import__('zlib').decompress(__import__('base64').b64decode(t));"
    "s,START_REQUESTS=(u(a[2]),u(a[3]))if len(a)>3 else(i.read(int(i.readline())),b'');"
    "exec(compile(s,'patchkit-hostagent','exec'))"
)

# FRAMING. The host's login shell runs before the agent and may print (a ~/.bashrc banner,
# a wrapper, a .pth of the target interpreter): on stdout that would be read as replies. So
# the agent's first line is START_MARK + a nonce the control side chose for this start (a
# fresh random one, passed as the agent's argument): nothing else on the host can print it.
# Everything on stdout before it is skipped and reported (log warning + the host's result),
# as is whatever stdout still holds when the agent is gone (a shell's EXIT trap,
# ~/.bash_logout) and everything on stderr. After the mark, a line that is not a reply is an
# error naming the host. The mark costs no round trip: it goes out with the first reply.
SKIP_LIMIT = 1 << 20  # bytes of other output before the mark beyond which the start fails
SHOWN_LINES = 3  # of skipped output, in the warning
SHOWN_CHARS = 160
LEFTOVER_WAIT_S = 2.0


from patchkit.host.agent.files import (  # noqa: E402 - re-exported: what the host runs
    AGENT_CORE,
    AGENT_EXTENSIONS,
    HOST,
    PART_SUFFIX,
    SENT_CONSTANTS,
    START_MARK,
    add_extension,
    agent_file,
    declared_ops,
    host_ops,
    mutating_ops,
)

@functools.cache
def agent_source() -> bytes:
    """What the agent runs at start: the shared constants, then the core."""
    constants = "".join(f"{name} = {value!r}\n" for name, value in SENT_CONSTANTS.items())
    return constants.encode() + agent_file(*AGENT_CORE)


def new_nonce() -> str:
    return os.urandom(8).hex()


@functools.cache
def packed_source() -> str:
    """The agent's source as the command line carries it (zlib + base64: ~17 KB), once per run."""
    return _packed(agent_source())


def _packed(data: bytes) -> str:
    return base64.b64encode(zlib.compress(data, 6)).decode("ascii")


def agent_argv(python: str, nonce: str, first_requests: bytes | None = None) -> list[str]:
    """The agent's command line: its source on stdin (first_requests None), or the source and
    these request lines in the command line itself (see START)."""
    if first_requests is None:
        return [python, "-c", BOOTSTRAP, nonce]
    return [python, "-c", BOOTSTRAP, nonce, packed_source(), _packed(first_requests)]


STREAM_CHUNK = 1 << 20
# START. `hello` and the requests queued behind it before any reply is awaited (the
# lock, a run's first reads) are held back; the agent is started only when the first reply is
# awaited (or the held requests pass CORK_LIMIT, or one carries a payload), and they reach it
# at once:
# - in its command line, with the agent's source, when the transport says its stdin costs a
#   round trip of its own (`start_in_command`: SSH, whose server opens a session's window only
#   once the command has started, so stdin can follow the exec request no sooner than its
#   answer) and the command stays under COMMAND_BUDGET: the exec request itself carries the
#   start, as a hand-written `ssh host 'script'` does;
# - else in the one first write on its stdin, behind the source.
# Either way, from the exec request to the first useful reply is one round trip.
CORK_LIMIT = 1 << 20
COMMAND_BUDGET = 64 << 10  # of packed source + requests: far below one argument's limit (128 KiB on Linux)
# Ops a run may ask for early (`prefetch`), before it knows it needs them: they read the
# host and change nothing, so asking early is never wrong, only possibly stale once
# something is changed, which is why any other op drops what was prefetched.
PREFETCHABLE_OPS = frozenset({"hello", "locate", "read", "hash", "journal_list"})
DEFAULT_REPLY_WAIT = 600.0  # seconds this side waits for a reply unless the call says otherwise

Reply = TypeVar("Reply")


class AgentRefused(HostError):
    """The agent declined a request for a reason the user should read (drift, lock...)."""


class UntrustedState(AgentRefused):
    """The agent refused the state dir (or a folder or file in it) because another user owns it
    or may write it: the state dir given is wrong, so the run exits as for a usage error (2)."""


class AgentStartFailed(HostError):
    """The agent's process was gone before its start could be written: the message says why."""


@dataclass(frozen=True)
class _Spawn:
    """How the agent is started once its first requests are known (see START)."""

    transport: Transport
    python: str
    nonce: str


def _shown(data: bytes) -> str:
    text = data.decode("utf-8", "replace").rstrip("\r\n")
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "..."


@dataclass
class Skipped:
    """Output on the agent's pipes that is not the agent's: what is kept of it for the report."""

    lines: int = 0
    size: int = 0
    first: list[str] = field(default_factory=list)  # the first non-blank lines, shortened

    def add(self, data: bytes) -> None:
        self.size += len(data)
        for line in data.splitlines():
            self.lines += 1
            if line.strip() and len(self.first) < SHOWN_LINES:
                self.first.append(_shown(line))

    def quoted(self) -> str:
        more = self.lines - len(self.first)
        return " | ".join(repr(line) for line in self.first) + (f" (+{more} more)" if more > 0 else "")


class AgentClient:
    """One running agent on one host; requests are answered in order."""

    def __init__(self, streams: AgentStreams | None, host: str, nonce: str) -> None:
        self._stream_pair = streams  # None until the agent is started (see START and `_io`)
        self._spawn: _Spawn | None = None
        self._spawn_error: HostError | None = None  # the transport's own failure to start it, raised as it is
        self._host = host
        self._mark = START_MARK + nonce.encode() + b"\n"
        self._started = False  # the start mark has been read
        self._before = Skipped()  # stdout before the start mark
        self._unread: set[int] = set()  # ids of requests sent whose reply has not been read
        self._broken: HostError | None = None  # why no more replies can be read (no start, a line that is no reply)
        self._quoted_stderr = False  # an error message quoted stderr already: not reported again
        self.warnings: list[str] = []  # skipped output, for the host's result
        self._ids = itertools.count(1)
        self._write_lock = asyncio.Lock()
        self._read_lock = asyncio.Lock()
        self._replies: dict[Any, dict[str, Any]] = {}
        self._hello: Pending[HelloReply] | None = None
        self._extensions: dict[str, list[Pending[Any]]] = {}  # extension -> the op_load requests of its files
        self.info: dict[str, Any] = {}
        self.bytes_sent = 0
        self.on_bytes: Callable[[int], None] | None = None  # progress: total bytes streamed so far
        self.on_notice: Callable[[str], None] | None = None  # what an op says while it waits (core.notice)
        self._python = "python"  # what was started, for the start's error messages
        self._corked: bytearray | None = None  # what waits for the start's one write (see START)
        self._prefetched: dict[str, Pending[Any]] = {}  # request key -> its early read (see prefetch)
        self._ended = False  # `end` was sent: the agent takes no more requests
        self._stdout_ended = False  # stdout was read to its end (see close)

    @classmethod
    async def start(cls, transport: Transport, python: str, host: str) -> "AgentClient":
        """Queue the agent's `hello`; the agent is started with what is queued behind it when
        the first reply is awaited (see START and `started`). A transport's failure to start it
        (connection, host key, session) is raised there, as the transport words it."""
        nonce = new_nonce()
        client = cls(None, host, nonce)
        client._python = python
        client._spawn = _Spawn(transport, python, nonce)
        client._corked = bytearray()  # hello and what follows: held back (see START)
        request = HELLO({})
        client._hello = cast(Pending[HelloReply], await client._send(request.op, request.args, None))
        return client

    @property
    def _streams(self) -> AgentStreams:
        assert self._stream_pair is not None, "the agent is not started yet (see START)"
        return self._stream_pair

    async def flush(self) -> None:
        """Start the agent with what the start holds back (see START); a no-op once it went out."""
        async with self._write_lock:
            await self._uncork()

    async def _uncork(self) -> None:
        if self._corked is None:
            return
        data, self._corked = bytes(self._corked), None
        if self._stream_pair is None:
            data = await self._start_process(data)
        if not data:
            return
        try:
            self._streams.stdin.write(data)
            await self._streams.stdin.drain()
        except (ConnectionError, BrokenPipeError, OSError):  # the process is gone already (sudo refused, not python...)
            detail = await self._error_tail()
            self._broken = AgentStartFailed(
                f"cannot start {self._python} on {self._host}: {detail or 'it exited at once'}")
            raise self._broken from None

    async def _start_process(self, requests: bytes) -> bytes:
        """Start the agent with `requests` first (see START); what is left to write on its stdin."""
        spawn = self._spawn
        assert spawn is not None, "an AgentClient made from streams is started already"
        argv = agent_argv(spawn.python, spawn.nonce, requests)
        if not getattr(spawn.transport, "start_in_command", False) or sum(map(len, argv[-2:])) > COMMAND_BUDGET:
            source = agent_source()
            argv, requests = agent_argv(spawn.python, spawn.nonce), str(len(source)).encode() + b"\n" + source + requests
        else:
            requests = b""
        try:
            self._stream_pair = await spawn.transport.spawn(argv)
        except HostError as exc:
            self._broken = self._spawn_error = exc
            raise
        return requests

    async def prefetch(self, request: Request[Reply]) -> Pending[Reply]:
        """Ask for a read now, before the run knows it needs it: pipelined with the start (one
        round trip for hello, lock and the first reads). Send it after the lock: the agent
        answers in order, so the read sees the host as the lock holder does. The same request
        sent later (`send`, `call`) gets this one's answer instead of a second request, unless
        a request that may change the host was sent in between (then the early read is stale
        and is asked again)."""
        if request.op not in PREFETCHABLE_OPS:
            raise ValueError(f"{request.op} is not a read-only op: it cannot be prefetched")
        pending = cast(Pending[Reply], await self._send(request.op, request.args, None))
        self._prefetched[_request_key(request.op, request.args)] = pending
        return pending

    async def started(self, python: str) -> dict[str, Any]:
        """Wait for the agent's `hello` (requests may be queued behind it already)."""
        assert self._hello is not None
        try:
            self.info = dict(await self._hello.result(60))
        except (HostUnreachable, AgentStartFailed):
            raise  # found while waiting for the first answer (the OpenSSH transport), or says so already
        except HostError as exc:
            if exc is self._spawn_error:
                raise  # the transport's own words (cannot open a session, ...)
            raise HostError(f"cannot start {python} on {self._host}: {exc}") from None
        return self.info

    async def call(self, request: Request[Reply], reply_wait: float | None = DEFAULT_REPLY_WAIT) -> Reply:
        """Send a request (`READ({"path": p})`) and wait up to `reply_wait` seconds (None: for
        ever) for its reply."""
        return await (await self.send(request)).result(reply_wait)

    async def send(self, request: Request[Reply]) -> Pending[Reply]:
        """Queue a request without waiting for its answer (pipelining: the agent answers in
        order, so on a slow link several requests cost one round trip). Await `.result()`."""
        early = self._prefetched.pop(_request_key(request.op, request.args), None)
        if early is not None:
            return cast(Pending[Reply], early)
        return cast(Pending[Reply], await self._send(request.op, request.args, None))

    async def send_file(self, request: Request[Reply], local: Path, start: int, count: int) -> Pending[Reply]:
        """A request followed by `count` raw bytes of `local` from `start` (a streaming op).
        Returns once the bytes are out, not when the agent has answered: the next file can
        follow at once, so a deploy of many files costs no round trip per file."""
        return cast(Pending[Reply], await self._send(request.op, request.args, (local, start, count)))

    async def _send(self, op: str, args: Mapping[str, Any], payload: tuple[Path, int, int] | None,
                    preamble: bytes = b"") -> Pending[Any]:
        async with self._write_lock:
            if self._ended:
                raise RuntimeError(f"{op} after end: the agent of {self._host} takes no more requests")
            self._ended = op == "end"
            if op not in PREFETCHABLE_OPS:
                self._prefetched.clear()  # this may change the host: an early read may be stale
            extension = host_ops().get(op)
            if extension is not None and extension not in self._extensions:  # its files go first, same write
                loads: list[Pending[Any]] = []
                self._extensions[extension] = loads
                for pkg, name in AGENT_EXTENSIONS[extension]:
                    load_id = next(self._ids)
                    load = {"id": load_id, "op": "load", "args": {"name": name, "source": agent_file(pkg, name).decode()}}
                    preamble += json.dumps(load).encode() + b"\n"
                    loads.append(Pending(self, load_id, f"load {name}"))
                    self._unread.add(load_id)
            request_id = next(self._ids)
            self._unread.add(request_id)
            request = {"id": request_id, "op": op, "args": args}
            data = preamble + json.dumps(request).encode() + b"\n"
            if self._corked is not None:  # the start's one write (see START)
                self._corked += data
                if payload is None and len(self._corked) < CORK_LIMIT:
                    return Pending(self, request_id, op, self._extensions.get(extension or "", []))
                data = b""
                await self._uncork()
            try:
                if data:
                    self._streams.stdin.write(data)
                    await self._streams.stdin.drain()
                if payload is not None:
                    await self._stream(*payload)
            except (ConnectionError, BrokenPipeError, OSError) as exc:
                raise HostError(f"{self._host}: connection lost during {op}: {exc}") from None
        return Pending(self, request_id, op, self._extensions.get(extension or "", []))

    async def _reply(self, request_id: int, op: str, reply_wait: float | None) -> Any:
        if self._corked is not None:
            await self.flush()  # a reply is awaited: the start's write goes out (see START)
        async with self._read_lock:  # replies arrive in request order; keep the ones read early
            while request_id not in self._replies:
                if self._broken:
                    raise self._broken
                if not self._started:
                    try:
                        await self._await_start(op, reply_wait)
                    except HostError as exc:  # never read on: a second start would be read as the first
                        self._broken = exc
                        raise
                    continue
                line = await self._line(op, reply_wait)
                reply = _as_reply(line)
                if reply is None and (text := _as_notice(line)) is not None:
                    if self.on_notice:
                        self.on_notice(text)
                    continue
                if reply is None:
                    self._broken = HostError(f"{self._host}: the agent's output is not a reply (during {op}): "
                                             f"{_shown(line)!r}; something on the host writes into the agent's stdout")
                    raise self._broken
                self._replies[reply["id"]] = reply
                self._unread.discard(reply["id"])
            reply = self._replies.pop(request_id)
        if reply["ok"]:
            return reply.get("result")
        if reply.get("kind") == "untrusted_state":
            raise UntrustedState(reply.get("error", "refused"))
        if reply.get("kind") == "refused":
            raise AgentRefused(reply.get("error", "refused"))
        raise HostError(f"{self._host}: {op} failed: {reply.get('error', 'no reason given')}")

    async def _line(self, op: str, reply_wait: float | None, within: float | None = None) -> bytes:
        """The next line of the agent's stdout; its end (EOF), a timeout or a lost connection
        as a HostError that says so (with stderr's tail, and what was skipped before the mark).
        `within`: the whole wait this read is the rest of, for the message (default `reply_wait`)."""
        try:
            async with asyncio.timeout(reply_wait):  # not wait_for: no task per line read
                line = await self._streams.stdout.readline()
        except TimeoutError:
            raise HostError(f"{self._host}: no answer to {op} within {within or reply_wait}s"
                            f"{self._printed_instead()}") from None
        except (ConnectionError, BrokenPipeError, OSError) as exc:
            raise HostError(f"{self._host}: connection lost during {op}: {exc}") from None
        if not line:
            detail = await self._error_tail()
            raise HostError(f"{self._host}: agent exited during {op}" + (f": {detail}" if detail else "")
                            + self._printed_instead())
        return line

    async def _await_start(self, op: str, reply_wait: float | None) -> None:
        """Read up to the agent's start mark; what comes before it is not the agent's."""
        loop = asyncio.get_running_loop()
        deadline = None if reply_wait is None else loop.time() + reply_wait
        try:
            while True:
                left = None if deadline is None else max(0.0, deadline - loop.time())
                line = await self._line(op, left, within=reply_wait)
                if line.endswith(self._mark):  # a banner without a final newline shares the mark's line
                    self._started = True
                    if len(line) > len(self._mark):
                        self._before.add(line[:-len(self._mark)])
                    return
                self._before.add(line)
                if self._before.size > SKIP_LIMIT:
                    raise HostError(f"{self._host}: no start mark from the agent after {self._before.size} bytes of "
                                    f"other output on stdout: {self._before.quoted()}")
        finally:
            self._report(self._before, "stdout", "before the agent started",
                         "not the agent's: a login shell, ~/.bashrc, a wrapper or a .pth printing?")

    def _printed_instead(self) -> str:
        if self._started or not self._before.size:
            return ""
        return f" (the host printed only this on stdout: {self._before.quoted()})"

    async def _error_tail(self) -> str:
        self._quoted_stderr = True
        return await self._streams.error_tail()

    def _report(self, skipped: Skipped, stream: str, when: str, why: str) -> None:
        """A warning naming the host and the first lines (log and the host's result), once."""
        if not skipped.size:
            return
        text = f"skipped {skipped.lines} line(s) on {stream} {when} ({why}): {skipped.quoted()}"
        if text not in self.warnings:
            self.warnings.append(text)
            log.warning("agent.output_skipped", host=self._host, stream=stream, when=when, lines=skipped.lines,
                        bytes=skipped.size, first=skipped.first)

    async def _report_leftovers(self) -> None:
        """Once the agent is gone: what is left on stdout (a shell's EXIT trap, ~/.bash_logout)
        and everything on stderr, reported as skipped."""
        await self._report_stdout_leftovers()
        if self._started and not self._quoted_stderr:  # else the error that ended the start says why
            errors = Skipped()
            errors.add((await self._streams.stderr_text()).encode())
            self._report(errors, "stderr", "of the agent's session", "stderr is never read as replies")

    async def _report_stdout_leftovers(self) -> None:
        """What stdout holds up to its end, reported as skipped (a no-op once it ended)."""
        if self._started and not self._read_lock.locked() and not self._stdout_ended:
            self._stdout_ended = True
            after = Skipped()
            while after.size <= SKIP_LIMIT:
                try:
                    line = await asyncio.wait_for(self._streams.stdout.readline(), LEFTOVER_WAIT_S)
                except (asyncio.TimeoutError, ConnectionError, OSError, ValueError, HostError):
                    break
                if not line:
                    break
                reply = _as_reply(line)
                if reply is None or reply["id"] not in self._unread:  # an unread reply is no stray output
                    after.add(line)
            self._report(after, "stdout", "after the agent's last reply",
                         "not the agent's: a shell's EXIT trap, ~/.bash_logout or a wrapper printing?")

    async def _stream(self, local: Path, offset: int, length: int) -> None:
        # Streams that can move file bytes themselves (the OpenSSH transport: splice into ssh's
        # stdin) skip the copy through Python; others get a fresh bytes object per chunk.
        write_file = self._streams.write_file if self._streams.supports_file_splice else None
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
        if self._stream_pair is None:
            self._corked = None  # never started: no reply was awaited, so nothing was asked of the host
            return
        if self._corked is not None:
            try:
                await self.flush()  # requests nobody waited for still reach the agent before its stdin closes
            except HostError:
                pass  # the start failed; whoever awaited it reported why
        if self._ended:
            # After `end` the agent exits by itself: wait for its stdout to end before closing, so
            # the close sends nothing while its exit is on the way (not even stdin's EOF).
            await self._report_stdout_leftovers()
        await self._streams.close()
        await self._report_leftovers()


def _request_key(op: str, args: Mapping[str, Any]) -> str:
    return op + "\0" + json.dumps(args, sort_keys=True)


def _as_reply(line: bytes) -> dict[str, Any] | None:
    """The agent's reply on this line, or None if the line is not one."""
    try:
        reply = json.loads(line)
    except ValueError:
        return None
    if isinstance(reply, dict) and isinstance(reply.get("id"), int) and isinstance(reply.get("ok"), bool):
        return reply
    return None


def _as_notice(line: bytes) -> str | None:
    """The text of the agent's notice on this line (core.notice), or None if the line is not one."""
    try:
        notice = json.loads(line)
    except ValueError:
        return None
    if isinstance(notice, dict) and isinstance(notice.get("notice"), str) and "ok" not in notice:
        return cast(str, notice["notice"])
    return None


@dataclass
class Pending(Generic[Reply]):
    """A request sent to the agent whose answer has not been read yet."""

    client: AgentClient
    request_id: int
    op: str
    needs: list[Pending[Any]] = field(default_factory=list)  # the agent files this op's code came in

    _outcome: tuple[bool, Any] | None = None  # (ok, value or exception) once read

    async def result(self, reply_wait: float | None = DEFAULT_REPLY_WAIT) -> Reply:
        """The reply, waiting up to `reply_wait` seconds for it (None: for ever)."""
        if self._outcome is None:
            try:
                for load in self.needs:
                    await load.result(reply_wait)  # a file that failed to load explains itself
                self._outcome = (True, await self.client._reply(self.request_id, self.op, reply_wait))
            except HostError as exc:
                self._outcome = (False, exc)
        ok, value = self._outcome
        if not ok:
            raise value
        return cast(Reply, value)
