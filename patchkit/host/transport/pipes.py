"""A local process with its three pipes: how every subprocess-based transport (local, the
OpenSSH client, the container engines) starts what runs the agent, reads its stderr and ends
it. The transports differ only in what they make of a failure (their streams classes)."""

from __future__ import annotations

import asyncio
import fcntl
import os
from collections import deque
from collections.abc import Sequence

READ_LIMIT = 1 << 26  # a reply line may carry a whole file
STDERR_LINES = 200  # what is kept of a process's stderr for messages
CLOSE_TIMEOUT_S = 10.0  # after stdin is closed, how long the process has to exit before it is killed
SETTLE_S = 5.0  # how long an exited process's stderr is waited for (a child may hold it open)
PIPE_SIZE = 1 << 20  # a stdin pipe while a file is spliced into it
_splice = getattr(os, "splice", None)  # Linux, Python >= 3.10


async def start_piped(argv: Sequence[str], own_session: bool = True) -> asyncio.subprocess.Process:
    """`argv` with stdin, stdout and stderr piped (OSError when it cannot start). In its own
    session, Ctrl-C reaches patchkit only, which finishes the request in progress."""
    return await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        limit=READ_LIMIT,
        start_new_session=own_session,
    )


class PipedProcess:
    """One started process: its stderr read as it comes (a pipe nobody reads fills up and
    stalls the process) into its last `keep` lines (None: all), and the one way to end it."""

    def __init__(self, proc: asyncio.subprocess.Process, keep: int | None = STDERR_LINES) -> None:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        self.proc = proc
        self.stderr: deque[str] = deque(maxlen=keep)
        self._pump: asyncio.Task[None] = asyncio.create_task(self._read_stderr())

    async def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        while True:
            try:
                line = await self.proc.stderr.readline()
            except ValueError:  # a line over the limit: dropped
                continue
            if not line:
                return
            self.stderr.append(line.decode("utf-8", "replace").rstrip("\r\n"))

    async def stderr_lines(self) -> list[str]:
        """Its stderr, once it has exited (or what there is after SETTLE_S: a ProxyCommand or a
        child holding stderr open)."""
        try:
            await asyncio.wait_for(self.proc.wait(), SETTLE_S)
            await asyncio.wait_for(asyncio.shield(self._pump), SETTLE_S)
        except (TimeoutError, ValueError):
            pass
        return list(self.stderr)

    async def end(self, timeout: float = CLOSE_TIMEOUT_S) -> None:
        """Close its stdin (the agent's cue to exit), wait `timeout`, then kill it."""
        proc = self.proc
        if proc.returncode is None:
            try:
                assert proc.stdin is not None
                proc.stdin.close()
                await asyncio.wait_for(proc.wait(), timeout)
            except (TimeoutError, OSError):
                proc.kill()
                await proc.wait()
        if not self._pump.done():
            try:
                await asyncio.wait_for(self._pump, SETTLE_S)
            except (TimeoutError, ValueError):
                pass


async def splice_into(writer: asyncio.StreamWriter, fd: int, offset: int, count: int, gone: str) -> int | None:
    """Move up to `count` bytes of the file `fd`, from `offset`, into the pipe behind `writer`
    with `splice`: the kernel hands page-cache pages to the pipe, the bytes never pass through
    Python. How many moved (0: the file ends at `offset`); None when this path cannot be used
    (no splice, not a pipe): then write the bytes instead. ConnectionResetError(`gone`) when
    the pipe's reader is gone."""
    transport = writer.transport
    if _splice is None:
        return None
    if transport.is_closing():
        raise ConnectionResetError(gone)
    pipe = transport.get_extra_info("pipe")
    if pipe is None:
        return None
    if transport.get_write_buffer_size():  # earlier write()s go first: wait until asyncio sent them all
        low, high = transport.get_write_buffer_limits()
        transport.set_write_buffer_limits(high=0, low=0)
        try:
            await writer.drain()
        finally:
            transport.set_write_buffer_limits(high=high, low=low)
    pipe_fd = pipe.fileno()
    if not getattr(transport, "_patchkit_sized", False):  # fewer wake-ups per MiB; best effort (pipe-max-size)
        transport._patchkit_sized = True  # type: ignore[attr-defined]
        try:
            fcntl.fcntl(pipe_fd, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
        except (AttributeError, OSError):
            pass
    moved = 0
    while moved < count:
        try:  # the pipe is non-blocking (asyncio's): a full pipe is EAGAIN, never a stalled loop
            n = _splice(fd, pipe_fd, count - moved, offset_src=offset + moved)
        except BlockingIOError:
            if moved:
                break
            await _writable(pipe_fd)
            if transport.is_closing():  # the reader is gone and asyncio closes pipe_fd: never splice into a reused fd
                raise ConnectionResetError(gone) from None
            continue
        if n == 0:
            break
        moved += n
    return moved


async def _writable(fd: int) -> None:
    """Until the pipe has room (or its reader is gone: the next splice says EPIPE)."""
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    loop.add_writer(fd, lambda: None if ready.done() else ready.set_result(None))
    try:
        await ready
    finally:
        loop.remove_writer(fd)
