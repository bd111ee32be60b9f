"""The SSH side of a run in a second process, warm before the run needs it.

Why: before a run may contact a host it validates the recipe and the inventory (exit 2,
nothing contacted), ~0.1 s of imports and pydantic models; the SSH client (asyncssh and
cryptography) is ~0.05 s more of imports. In one process they cannot overlap (one
interpreter lock), so a fresh apply on one host waited ~0.15 s before its first byte, where
`ssh` starts in 0.01 s (bench/README.md).

How: `ssh_side()` forks the CLI's process right after its arguments are read (nothing heavy
imported yet, no thread running). The child imports the SSH transport while the parent
validates, then does what the parent asks over a Unix socket pair (one pickled message per
packet, SOCK_SEQPACKET), until the parent is gone:
- `open TID TARGET`: an SSHTransport for the host, connecting now (host/transport/early.py);
- `spawn TID SID ARGV` with two pipe ends (SCM_RIGHTS): the remote process; its stdin is
  read from the first pipe, its stdout written to the other;
- `stderr SID`: the process's stderr, read to its end (as SSHTransport reads it, when the
  agent failed or once it is gone: it needs no pipe of its own);
- `file SID AFTER OFFSET COUNT` with the file's fd: once the first AFTER bytes the parent
  wrote to the stdin pipe are relayed, COUNT bytes of the file from OFFSET go to the remote
  stdin, read by the child itself (a deploy's bytes never pass through a pipe: no copy more
  than SSH in the CLI's process makes); the answer is how many moved;
- `end SID`, `close TID`: as the streams' and the transport's close (a close is not waited
  for: the child finishes it, and the CLI waits for the child at its exit);
and it sends the parent its log events, which the parent logs as its own (its level,
format and redaction). Everything about SSH (~/.ssh/config, host keys, retries, the
failures and their words) is SSHTransport's, unchanged, in the child; a failure comes back
as the same class with the same message. The parent's side (`HelperTransport`) starts
processes whose streams are plain pipes.

For a few hosts only: once the run is valid and has more than MAX_HOSTS hosts, the helper is
let go (`keep_for`) and SSH runs in the CLI's process, as before: the relay's cost per host
would outweigh the one import it saves.

Lifetime: the child ignores Ctrl-C (the parent decides what an interrupt means and closes
what it must); when the parent's end of the socket closes (its exit, a crash, kill -9), the
child closes every connection and exits. `PATCHKIT_SSH_HELPER=0` keeps SSH in the CLI's own
process (`1`, the default, uses the helper; any other value is a usage error), as does a
platform other than Linux or a caller that runs threads (an in-process caller: forking it
could copy a lock another thread holds).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import pickle
import socket
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from patchkit.host.transport.ssh_common import SSHTarget

# The largest message: a spawn's argv holds at most ~64 KiB (host/agent/client.py START). Below
# malloc's mmap threshold, so a receive buffer costs no page faults.
MESSAGE_MAX = (127 << 10)
READ_CHUNK = 1 << 16
STDIN_CHUNK = 1 << 20
EXIT_WAIT_S = 2.0  # for the child to exit once the parent is done
SWITCH = "PATCHKIT_SSH_HELPER"
# The helper carries runs of up to this many hosts. It saves a run ~45 ms once (the import
# beside the validation) and costs ~1-3 ms of CPU a host (the relay: pipes, messages, a
# second event loop), measured at 1, 32 and 128 hosts (bench/README.md): a fleet is served
# in the CLI's own process.
MAX_HOSTS = 8

_helper: Helper | None = None


def current() -> Helper | None:
    """This process's helper, if one was started for the command."""
    return _helper


def keep_for(hosts: int) -> None:
    """The run is valid: a fleet (more than MAX_HOSTS hosts) does without the helper. It is let
    go at once (it exits when it sees its socket close) and reaped at the end."""
    global _helper
    if _helper is not None and hosts > MAX_HOSTS:
        _helper.channel.close()
        _dismissed.append(_helper)
        _helper = None


_dismissed: list[Helper] = []


@contextmanager
def ssh_side() -> Iterator[None]:
    """Around a command that reaches hosts from an inventory (cli/startup.py): the helper, unless
    switched off (a value other than 0 or 1 is a usage error) or not possible here."""
    global _helper
    switch = os.environ.get(SWITCH, "1")
    if switch not in ("0", "1"):
        from patchkit.base.errors import UsageError

        raise UsageError(f"{SWITCH}={switch}: want 0 (SSH in the CLI's own process) or 1 (the SSH helper process, "
                         "the default)")
    started = switch == "1" and _wanted()
    if started:
        _helper = _fork()
    try:
        yield
    finally:
        if started:
            helpers = ([_helper] if _helper is not None else []) + _dismissed
            _helper = None
            _dismissed.clear()
            for helper in helpers:
                helper.stop()


def _wanted() -> bool:
    """Linux (fork early is safe there; macOS's system libraries are not fork-safe, and its Unix
    sockets have no SOCK_SEQPACKET), no thread running."""
    import threading

    return sys.platform.startswith("linux") and hasattr(socket, "send_fds") and threading.active_count() == 1


def _fork() -> Helper | None:
    try:
        parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    except OSError:
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        pid = os.fork()
    except OSError:
        parent_end.close()
        child_end.close()
        return None
    if pid == 0:  # pragma: no cover - the child: covered through every SSH test, never returns
        parent_end.close()
        _child(child_end)
    child_end.close()
    return Helper(pid, parent_end)


# ---------------------------------------------------------------------- both ends


class _Channel:
    """Pickled messages over one end of the socket pair, sent in order, read as they come."""

    def __init__(self, sock: socket.socket, on_message: Callable[[Any, list[int]], None],
                 on_eof: Callable[[], None]) -> None:
        sock.setblocking(False)
        self.sock = sock
        self._on_message = on_message
        self._on_eof = on_eof
        self._queue: list[tuple[bytes, list[int]]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self.closed = False

    def attach(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop and not self.closed:
            self._loop = loop
            loop.add_reader(self.sock.fileno(), self._readable)
            if self._queue:
                loop.add_writer(self.sock.fileno(), self._writable)

    def post(self, message: Any, fds: tuple[int, ...] = ()) -> None:
        """Queued in order; the fds are duplicated into the message when it is sent."""
        if self.closed:
            raise ConnectionResetError("the SSH helper's channel is closed")
        data = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
        if len(data) > MESSAGE_MAX:
            raise ValueError(f"a message of {len(data)} bytes to the SSH helper (at most {MESSAGE_MAX})")
        self._queue.append((data, list(fds)))
        if len(self._queue) == 1:
            self._writable()

    def _writable(self) -> None:
        while self._queue:
            data, fds = self._queue[0]
            try:
                socket.send_fds(self.sock, [data], fds) if fds else self.sock.sendmsg([data])
            except BlockingIOError:
                if self._loop is not None:
                    self._loop.add_writer(self.sock.fileno(), self._writable)
                return
            except OSError:  # the other end is gone: the reader says so
                self._queue.clear()
                break
            self._queue.pop(0)
        if self._loop is not None:
            self._loop.remove_writer(self.sock.fileno())

    def _readable(self) -> None:
        while not self.closed:
            try:
                data, fds, _flags, _addr = socket.recv_fds(self.sock, MESSAGE_MAX, 3)
            except BlockingIOError:
                return
            except OSError:
                data, fds = b"", []
            if not data:
                self.close()
                self._on_eof()
                return
            self._on_message(pickle.loads(data), fds)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self.sock.fileno())
            self._loop.remove_writer(self.sock.fileno())
        self.sock.close()


def _failure(exc: BaseException) -> tuple[Any, ...]:
    """An exception as the parent rebuilds it (`_rebuilt`)."""
    from patchkit.base.errors import HostError
    from patchkit.host.transport.ssh_common import SSHFailure

    if isinstance(exc, SSHFailure):
        return ("ssh", type(exc).__name__, str(exc), exc.kind)
    if isinstance(exc, HostError):
        return ("host", type(exc).__name__, str(exc))
    if isinstance(exc, ConnectionError):
        return ("connection", str(exc))
    return ("bug", f"{type(exc).__name__}: {exc}")


def _rebuilt(failure: tuple[Any, ...]) -> BaseException:
    from patchkit.base import errors
    from patchkit.host.transport import ssh_common

    kind = failure[0]
    if kind == "ssh":
        cls = getattr(ssh_common, failure[1], ssh_common.SSHFailure)
        return cls(failure[2], failure[3])
    if kind == "host":
        return getattr(errors, failure[1], errors.HostError)(failure[2])
    if kind == "connection":
        return ConnectionError(failure[1])
    return RuntimeError(f"in the SSH helper: {failure[1]}")


# ---------------------------------------------------------------------- the parent's side


class Helper:
    """The parent's handle on its helper process."""

    def __init__(self, pid: int, sock: socket.socket) -> None:
        self.pid = pid
        self.channel = _Channel(sock, self._message, self._gone)
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self.streams: dict[int, HelperStreams] = {}
        self.gone = False

    def new_id(self) -> int:
        return next(self._ids)

    def tell(self, *message: Any) -> None:
        self.channel.attach()
        self.channel.post(message)

    async def ask(self, kind: str, *args: Any, fds: tuple[int, ...] = ()) -> Any:
        from patchkit.base.errors import HostError

        if self.gone:
            raise HostError("the SSH helper process is gone")
        self.channel.attach()
        rid = self.new_id()
        answer = asyncio.get_running_loop().create_future()
        self._waiting[rid] = answer
        self.channel.post((kind, rid, *args), fds)
        try:
            return await answer
        finally:
            self._waiting.pop(rid, None)

    def _message(self, message: Any, fds: list[int]) -> None:
        for fd in fds:  # the child sends none
            os.close(fd)
        kind = message[0]
        if kind in ("ok", "err"):
            answer = self._waiting.get(message[1])
            if answer is not None and not answer.done():
                if kind == "ok":
                    answer.set_result(message[2])
                else:
                    answer.set_exception(_rebuilt(message[2]))
        elif kind == "out_end":
            streams = self.streams.get(message[1])
            if streams is not None:
                streams.out_ended(message[2])
        elif kind == "log":
            from patchkit.base.logs import get_logger

            _, name, level, method, event, fields = message
            get_logger(name)._emit(level, method, event, **fields)

    def _gone(self) -> None:
        from patchkit.base.errors import HostError

        self.gone = True
        for answer in self._waiting.values():
            if not answer.done():
                answer.set_exception(HostError("the SSH helper process exited"))
        for streams in list(self.streams.values()):
            streams.out_ended("the SSH helper process exited")

    async def exited(self) -> bool:
        """Whether the child is gone: asked when a pipe to it broke (its socket may say so later)."""
        for _ in range(20):
            if self.gone:
                return True
            try:
                done, _ = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                done = self.pid
            if done:
                self._gone()
                return True
            await asyncio.sleep(0.01)
        return False

    def stop(self) -> None:
        """The command is done: the child sees the socket close, closes what is left and exits."""
        import signal
        import time

        self.channel.close()
        deadline = time.monotonic() + EXIT_WAIT_S
        while True:
            try:
                done, _ = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return
            if done:
                return
            if time.monotonic() > deadline:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
                return
            time.sleep(0.005)


class HelperTransport:
    """An SSH host reached through the helper: what SSHTransport is, its processes' pipes here."""

    name = "ssh"

    def __init__(self, target: SSHTarget, helper: Helper) -> None:
        self.target = target
        self.helper = helper
        self.exec_requests = 0
        # sshd opens a session's window only once its command runs (host/transport/ssh.py)
        self.start_in_command = target.start_in_command
        self._tid = helper.new_id()
        self._opened = False

    def open(self) -> None:
        if not self._opened:
            self._opened = True
            self.helper.tell("open", self._tid, self.target)

    async def spawn(self, argv: list[str]) -> HelperStreams:
        self.open()
        self.exec_requests += 1
        return await HelperStreams.start(self.helper, self._tid, argv)

    async def close(self) -> None:
        if self._opened and not self.helper.gone:
            self._opened = False
            self.helper.tell("close", self._tid)  # the child closes it; the CLI waits for the child at exit


class _Stdin:
    """The stdin pipe's writer; broken because the helper died: says so."""

    def __init__(self, writer: asyncio.StreamWriter, helper: Helper) -> None:
        self.writer = writer
        self._helper = helper
        self.written = 0  # bytes: where in the stream a file's bytes go (HelperStreams.write_file)

    def write(self, data: bytes) -> None:
        self.writer.write(data)
        self.written += len(data)

    async def drain(self) -> None:
        try:
            await self.writer.drain()
        except ConnectionError:
            if await self._helper.exited():
                raise ConnectionError("the SSH helper process exited") from None
            raise

    def close(self) -> None:
        self.writer.close()


class HelperStreams:
    """One remote process's streams: pipes to the helper, which relays them over SSH. A file's
    bytes do not go through the stdin pipe: the helper is handed the file and reads them."""

    supports_file_splice: ClassVar[bool] = True

    def __init__(self, helper: Helper, sid: int) -> None:
        self.helper = helper
        self.sid = sid
        self._ended: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._stderr: str | None = None
        self._sudo_user: str | None = None
        self._closed = False
        self._stdout_pipe: asyncio.BaseTransport | None = None
        self.stdin: _Stdin
        self._stdout: asyncio.StreamReader
        self.stdout = self  # readline

    @classmethod
    async def start(cls, helper: Helper, tid: int, argv: list[str]) -> HelperStreams:
        from patchkit.host.transport.pipes import READ_LIMIT

        streams = cls(helper, helper.new_id())
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        helper.streams[streams.sid] = streams
        try:
            streams._sudo_user = await helper.ask("spawn", tid, streams.sid, argv, fds=(in_r, out_w))
        except BaseException:
            helper.streams.pop(streams.sid, None)
            for fd in (in_w, out_r):
                os.close(fd)
            raise
        finally:
            for fd in (in_r, out_w):
                os.close(fd)
        loop = asyncio.get_running_loop()
        streams._stdout = asyncio.StreamReader(limit=READ_LIMIT, loop=loop)
        streams._stdout_pipe, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(streams._stdout, loop=loop), os.fdopen(out_r, "rb", buffering=0))
        transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin,
                                                             os.fdopen(in_w, "wb", buffering=0))
        streams.stdin = _Stdin(asyncio.StreamWriter(transport, protocol, None, loop), helper)
        return streams

    async def write_file(self, fd: int, offset: int, count: int) -> int | None:
        """The helper sends them after everything written to stdin so far (nothing more is
        written until this returns: the agent client's write lock)."""
        moved = await self.helper.ask("file", self.sid, self.stdin.written, offset, count, fds=(fd,))
        return int(moved)

    def out_ended(self, lost: str | None) -> None:
        if not self._ended.done():
            self._ended.set_result(lost)

    async def readline(self) -> bytes:
        from patchkit.host.transport.pipes import SETTLE_S

        line = await self._stdout.readline()
        if not line:  # the remote process's stdout ended: lost with the connection?
            try:
                lost = await asyncio.wait_for(asyncio.shield(self._ended), SETTLE_S)
            except TimeoutError:
                lost = None
            if lost:
                raise ConnectionError(lost)
        return line

    async def stderr_text(self) -> str:
        from patchkit.base.errors import HostError

        if self._stderr is None:
            try:
                self._stderr = str(await self.helper.ask("stderr", self.sid))
            except (HostError, ConnectionError):
                return ""
        return self._stderr

    async def error_tail(self) -> str:
        from patchkit.host.transport.ssh_common import error_tail

        return error_tail((await self.stderr_text()).splitlines(), self._sudo_user)

    async def close(self) -> None:
        from patchkit.base.errors import HostError
        from patchkit.host.transport.pipes import CLOSE_TIMEOUT_S, SETTLE_S

        if self._closed:
            return
        self._closed = True
        self.stdin.close()  # the remote stdin's end: the agent's cue to exit
        try:
            await asyncio.wait_for(self.helper.ask("end", self.sid), CLOSE_TIMEOUT_S + SETTLE_S)
        except (TimeoutError, HostError, ConnectionError):
            pass
        self.helper.streams.pop(self.sid, None)
        if self._stdout_pipe is not None:
            self._stdout_pipe.close()


# ---------------------------------------------------------------------- the child


def _child(sock: socket.socket) -> None:  # pragma: no cover - runs in the forked child
    """Never returns: the process ends with os._exit (the parent's exit hooks are not ours)."""
    code = 0
    try:
        import signal

        signal.signal(signal.SIGINT, signal.SIG_IGN)
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)  # stdout is the parent's report
        os.close(devnull)
        from patchkit.base import logs

        channel_box: list[_Channel] = []

        def forward(name: str, level: int, method: str, event: str, fields: dict[str, Any]) -> None:
            if channel_box and not channel_box[0].closed:
                plain = {k: v if isinstance(v, (str, int, float, bool, type(None))) else repr(v) for k, v in fields.items()}
                channel_box[0].post(("log", name, level, method, event, plain))

        logs.forward_to(forward)
        import patchkit.host.transport.ssh  # noqa: F401 - asyncssh, imported while the parent validates

        import gc

        gc.freeze()
        gc.enable()  # the parent held it off for its start (cli/startup.py); this process may live for hours
        asyncio.run(_Serve(sock, channel_box).serve())
    except BaseException:  # noqa: BLE001 - nothing to report to: the parent sees the socket close
        code = 1
    finally:
        os._exit(code)


class _Serve:  # pragma: no cover - runs in the forked child, tested through the CLI
    def __init__(self, sock: socket.socket, box: list[_Channel]) -> None:
        self.transports: dict[int, Any] = {}
        self.relays: dict[int, _Relay] = {}
        self.channel = _Channel(sock, self._message, self._eof)
        box.append(self.channel)
        self.done: asyncio.Future[None] | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    async def serve(self) -> None:
        self.done = asyncio.get_running_loop().create_future()
        self.channel.attach()
        await self.done
        for relay in list(self.relays.values()):
            relay.abandon()
        await asyncio.gather(*(t.close() for t in self.transports.values()), return_exceptions=True)

    def _eof(self) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_result(None)

    def _message(self, message: Any, fds: list[int]) -> None:
        kind = message[0]
        if kind == "open":
            from patchkit.host.transport.ssh import SSHTransport

            _, tid, target = message
            transport = SSHTransport(target)
            self.transports[tid] = transport
            transport.open()
            return
        if kind == "close":
            task = asyncio.ensure_future(self._close(message[1]))
        else:
            works: dict[str, Callable[..., Awaitable[Any]]] = {"spawn": self._spawn, "end": self._end,
                                                                 "stderr": self._stderr, "file": self._file}
            work = works[kind]
            task = asyncio.ensure_future(self._answer(message[1], work(*message[2:], fds=fds)))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _answer(self, rid: int, work: Any) -> None:
        try:
            value = await work
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the parent
            self._send(("err", rid, _failure(exc)))
        else:
            self._send(("ok", rid, value))

    def _send(self, message: Any) -> None:
        if not self.channel.closed:
            self.channel.post(message)

    async def _spawn(self, tid: int, sid: int, argv: list[str], fds: list[int]) -> str | None:
        try:
            streams = await self.transports[tid].spawn(argv)
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        relay = _Relay(self, tid, sid, streams)
        self.relays[sid] = relay
        await relay.start(*fds)
        return streams._sudo_user  # type: ignore[no-any-return]

    async def _end(self, sid: int, fds: list[int]) -> None:
        relay = self.relays.get(sid)
        if relay is not None:
            await relay.end()

    async def _file(self, sid: int, after: int, offset: int, count: int, fds: list[int]) -> int:
        try:
            relay = self.relays.get(sid)
            if relay is None:
                raise ConnectionResetError("the remote process is gone")
            return await relay.forward_file(fds[0], after, offset, count)
        finally:
            for fd in fds:
                os.close(fd)

    async def _stderr(self, sid: int, fds: list[int]) -> str:
        relay = self.relays.get(sid)
        return await relay.streams.stderr_text() if relay is not None else ""

    async def _close(self, tid: int) -> None:
        transport = self.transports.pop(tid, None)
        for sid, relay in list(self.relays.items()):
            if relay.tid == tid:
                self.relays.pop(sid, None)
                relay.abandon()
        if transport is not None:
            await transport.close()


class _Relay:  # pragma: no cover - runs in the forked child
    """One remote process: the parent's pipes to and from its SSH channel."""

    def __init__(self, serve: _Serve, tid: int, sid: int, streams: Any) -> None:
        self.serve = serve
        self.tid = tid
        self.sid = sid
        self.streams = streams
        self.pumps: list[asyncio.Task[None]] = []
        self.relayed = 0  # bytes of the stdin pipe sent on
        self._relayed_more: asyncio.Future[None] | None = None

    async def start(self, in_r: int, out_w: int) -> None:
        loop = asyncio.get_running_loop()
        stdin = asyncio.StreamReader(limit=STDIN_CHUNK, loop=loop)
        self._in, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin, loop=loop),
                                                   os.fdopen(in_r, "rb", buffering=0))
        out = await self._writer(out_w)
        self.pumps = [asyncio.create_task(self._stdin(stdin)), asyncio.create_task(self._stdout(out))]

    @staticmethod
    async def _writer(fd: int) -> asyncio.StreamWriter:
        loop = asyncio.get_running_loop()
        transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin,
                                                             os.fdopen(fd, "wb", buffering=0))
        return asyncio.StreamWriter(transport, protocol, None, loop)

    async def _stdin(self, stdin: asyncio.StreamReader) -> None:
        proc = self.streams.proc
        try:
            while data := await stdin.read(STDIN_CHUNK):
                self.streams.stdin.write(data)
                await self.streams.stdin.drain()
                self.relayed += len(data)
                self._wake_file()
            if not proc.stdin.is_closing():
                proc.stdin.write_eof()
        except Exception:  # noqa: BLE001 - the connection is lost: the stdout side says so
            pass
        finally:
            self._in.close()
            self._wake_file()

    def _wake_file(self) -> None:
        if self._relayed_more is not None and not self._relayed_more.done():
            self._relayed_more.set_result(None)

    async def forward_file(self, fd: int, after: int, offset: int, count: int) -> int:
        """Once the stdin pipe's first `after` bytes are sent on, `count` bytes of the file from
        `offset` (fewer where it ends). The parent writes nothing to the pipe meanwhile."""
        while self.relayed < after:
            if self.pumps[0].done():
                raise ConnectionResetError("the remote process's stdin is closed")
            self._relayed_more = asyncio.get_running_loop().create_future()
            await self._relayed_more
        if self.relayed != after:
            raise RuntimeError(f"stdin relayed {self.relayed} bytes, the file was to follow byte {after}")
        data = os.pread(fd, count, offset)
        if data:
            self.streams.stdin.write(data)
            await self.streams.stdin.drain()
        return len(data)

    async def _stdout(self, out: asyncio.StreamWriter) -> None:
        lost = None
        try:
            await self._copy(self.streams.proc.stdout, out)
        except ConnectionError as exc:
            lost = str(exc)
        finally:
            self.serve._send(("out_end", self.sid, lost))  # before the pipe's end: the parent waits for it
            out.close()

    @staticmethod
    async def _copy(source: Any, out: asyncio.StreamWriter) -> None:
        """source's bytes into the parent's pipe until either ends; ConnectionError: SSH is lost."""
        from patchkit.host.transport.asyncssh_import import asyncssh
        from patchkit.host.transport.ssh import _lost

        while True:
            try:
                data = await source.read(READ_CHUNK)
            except asyncssh.Error as exc:
                raise _lost(exc) from None
            if not data or out.transport.is_closing():
                return
            out.write(data)
            try:
                await out.drain()
            except (BrokenPipeError, ConnectionResetError):  # the parent closed its end
                return

    async def end(self) -> None:
        """The parent closed the process's stdin: what was written goes out, then as SSHTransport's
        streams close (the remote exits, or is closed after CLOSE_TIMEOUT_S), then the pipes."""
        from patchkit.host.transport.pipes import CLOSE_TIMEOUT_S, SETTLE_S

        try:
            await asyncio.wait_for(asyncio.shield(self.pumps[0]), CLOSE_TIMEOUT_S)
        except TimeoutError:
            pass
        await self.streams.close()
        try:
            await asyncio.wait_for(asyncio.gather(*self.pumps, return_exceptions=True), SETTLE_S)
        except TimeoutError:
            self.abandon()

    def abandon(self) -> None:
        for pump in self.pumps:
            pump.cancel()
        self.streams.proc.close()
