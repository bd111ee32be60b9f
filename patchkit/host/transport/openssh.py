"""The OpenSSH transport (`ssh_client: openssh`): the system `ssh` binary, one process per spawn.

For users who want OpenSSH itself: its ssh_config (Match, ControlMaster, ...), its
authentication (FIDO keys, GSSAPI, certificates, ssh-agent) and its C data path, which
moves bulk deploys faster than asyncssh's channel.

What it guarantees (as the asyncssh transport does):
- every spawn is one `ssh` process, i.e. one exec request (counted in `exec_requests`); the
  remote command is ONE argument, `shlex.join(argv)`: the login shell never sees unquoted input;
- host keys are always checked: `StrictHostKeyChecking yes`, or `accept-new` with
  --accept-new-host-keys (an unknown key is recorded, a changed one is still refused),
  against the inventory's known_hosts, else OpenSSH's own (ssh_config or ~/.ssh/known_hosts);
- `BatchMode yes`: never a prompt. What the inventory sets (port, user, identity file) wins
  over ~/.ssh/config, which OpenSSH reads for everything else;
- `become: true` runs the process through `sudo -n` (never prompts) unless we log in as root.

OpenSSH connects inside the process, so a failed connection shows only as `ssh` exiting with
255 before the agent said a word. The streams notice it where the first answer is read:
they read ssh's stderr, retry a transient set-up failure (refused, reset or closed before the
key exchange, timed out) by starting ssh again and replaying what was written so far (the
remote command never ran), and turn anything else into the failure both transports raise
(`ssh_common`: HostKeyRefused, AuthRefused, ConnectFailed). A host-key or authentication
failure is never retried.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil

from typing import ClassVar

from tenacity import retry_if_exception_type

from patchkit.host.transport.pipes import PipedProcess, splice_into, start_piped
from patchkit.base.errors import HostError
from patchkit.base.logs import get_logger
from patchkit.host.transport.openssh_errors import PERMANENTLY_ADDED, classify, openssh_failure, resolve
from patchkit.host.transport.ssh_common import (
    CLOSE_TIMEOUT_S,
    KEEPALIVE_S,
    TRANSIENT,
    Endpoint,
    SSHFailure,
    SSHTarget,
    connect_retrying,
    error_tail,
    with_become,
)

REPLAY_LIMIT = 8 << 20  # what is kept for a retry until the agent first answers (its source + a few requests)
_splice = getattr(os, "splice", None)  # Linux, Python >= 3.10

log = get_logger("patchkit")

# Options that make `ssh` a plain command runner whatever ~/.ssh/config says (scp does the
# same): no X11 or agent forwarding into the host, no port forwardings that would collide
# between parallel sessions, no RemoteCommand or LocalCommand, no master left behind, and no
# escape character: `~.` after a newline in a deploy's binary data must not end the session.
_RUNNER_OPTIONS = ("-x", "-e", "none", "-o", "ForwardAgent=no", "-o", "ClearAllForwardings=yes",
                   "-o", "PermitLocalCommand=no", "-o", "RemoteCommand=none", "-o", "ControlPersist=no")


class _Transient(Exception):
    """ssh exited 255 with a set-up failure worth another attempt."""

    def __init__(self, kind: str, lines: list[str]) -> None:
        super().__init__(kind)
        self.kind = kind
        self.lines = lines


def config_value(path: str) -> str:
    """A path as an ssh option value: `%` is OpenSSH's token character, spaces need quotes."""
    path = os.path.expanduser(path).replace("%", "%%")
    return f'"{path}"' if any(c.isspace() for c in path) else path


class OpenSSHTransport:
    name = "openssh"

    def __init__(self, target: SSHTarget, ssh: str = "ssh") -> None:
        self.target = target
        self.connect_timeout = max(1, int(target.connect_timeout))  # OpenSSH's ConnectTimeout: whole seconds
        self.attempts = max(1, target.attempts)
        self.ssh = ssh
        self.exec_requests = 0
        # sshd opens a session's window only once its command runs, so stdin costs a round trip after
        # the exec: with `agent_start: command` the agent's start rides in the command line (base.py).
        self.start_in_command = target.start_in_command
        self._resolved: Endpoint | None = None
        self._live: set[_OpenSSHStreams] = set()

    # ------------------------------------------------------------------ the ssh command line

    def options(self) -> list[str]:
        target = self.target
        checking = "accept-new" if target.accept_new_host_keys else "yes"
        argv = ["-T", "-o", "BatchMode=yes", "-o", f"StrictHostKeyChecking={checking}"]
        if target.known_hosts:
            argv += ["-o", f"UserKnownHostsFile={config_value(target.known_hosts)}"]
        argv += ["-o", f"ConnectTimeout={self.connect_timeout}", "-o", f"ServerAliveInterval={KEEPALIVE_S}",
                 *_RUNNER_OPTIONS]
        if target.port:
            argv += ["-p", str(target.port)]
        if target.user:
            argv += ["-l", target.user]
        if target.identity_file:
            argv += ["-i", config_value(target.identity_file)]
        return argv

    def command(self, remote: list[str]) -> list[str]:
        """The whole `ssh` argv that runs `remote` on the host."""
        return [self.ssh, *self.options(), "--", self.target.address, shlex.join(remote)]

    async def resolved(self) -> Endpoint:
        """Where OpenSSH would connect, as whom, checking which known_hosts (`ssh -G`, no network)."""
        if self._resolved is None:
            self._resolved = await resolve(self.ssh, self.options(), self.target)
        return self._resolved

    async def unreachable(self, lines: list[str]) -> SSHFailure:
        """ssh exited 255 with these lines on stderr: the failure, in the words both transports use."""
        failure = openssh_failure(255, lines, await self.resolved(), timeout=self.connect_timeout,
                                  attempts=self.attempts)
        assert failure is not None
        return failure

    # ------------------------------------------------------------------ Transport

    async def spawn(self, argv: list[str]) -> _OpenSSHStreams:
        if shutil.which(self.ssh) is None:
            raise HostError(f"{self.target.name}: ssh_client: openssh needs the OpenSSH client `{self.ssh}` "
                            "on this machine, and it is not in PATH")
        login = None
        if self.target.become:  # who we log in as: the inventory's user, else the config's
            login = self.target.user or (await self.resolved()).user
        argv, sudo_user = with_become(argv, self.target.become, login)
        self.exec_requests += 1
        streams = _OpenSSHStreams(self, self.command(argv), sudo_user)
        await streams.start()
        self._live.add(streams)
        return streams

    async def close(self) -> None:
        for streams in list(self._live):
            await streams.close()


class _OpenSSHStreams:
    """The pipes of one `ssh` process (binary), started again if its connection set-up fails.

    Until the first line of stdout arrives, everything written is also kept (up to
    REPLAY_LIMIT), so a retry can replay it to a fresh `ssh`; and a broken pipe is not an
    error yet: the reader finds out why ssh exited.
    """

    supports_file_splice: ClassVar[bool] = _splice is not None  # write_file: splice into ssh's stdin

    def __init__(self, transport: OpenSSHTransport, argv: list[str], sudo_user: str | None) -> None:
        self._transport = transport
        self._argv = argv
        self._sudo_user = sudo_user
        self.proc: asyncio.subprocess.Process | None = None
        self.piped: PipedProcess | None = None  # the current ssh: its stderr, and how it is ended
        self._replay: bytearray | None = bytearray()
        self._answered = False  # a byte of stdout arrived: the remote command runs
        self._broken = False  # the pipe to this ssh broke before the first answer
        self.stdin = self  # write/drain
        self.stdout = self  # readline

    async def start(self) -> None:
        try:
            proc = await start_piped(self._argv)
        except OSError as exc:
            raise HostError(f"{self._transport.target.name}: cannot run {self._argv[0]}: {exc.strerror or exc}") from None
        self.proc, self._broken = proc, False
        self.piped = PipedProcess(proc)

    async def _stderr_lines(self) -> list[str]:
        """ssh's stderr (its own messages and the remote's), once the process has exited."""
        assert self.piped is not None
        return await self.piped.stderr_lines()

    # ------------------------------------------------------------------ stdin

    def write(self, data: bytes) -> None:
        if self._replay is not None:
            if len(self._replay) + len(data) > REPLAY_LIMIT:
                self._replay = None  # too much to keep: no retry for this process
            else:
                self._replay += data
        assert self.proc is not None and self.proc.stdin is not None
        if not self._broken and not self.proc.stdin.is_closing():  # closing: ssh is gone, the reader says why
            self.proc.stdin.write(data)

    async def drain(self) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        if self._broken:
            if self._replay is None:
                raise ConnectionResetError("ssh exited")
            return
        try:
            await self.proc.stdin.drain()
        except (ConnectionError, OSError):
            if self._answered or self._replay is None:
                raise
            self._broken = True  # ssh exited: the reader says why, and may start it again

    async def write_file(self, fd: int, offset: int, count: int) -> int | None:
        """Move up to `count` bytes of the file `fd`, from `offset`, into ssh's stdin with
        `splice`: the kernel hands page-cache pages to the pipe, the bytes never pass through
        Python. How many moved (0: the file ends at `offset`); None when this path cannot be
        used (no splice, or ssh has not answered yet, so what is written is kept for a
        retry): then `write` the bytes instead.
        """
        assert self.proc is not None and self.proc.stdin is not None
        if _splice is None or not self._answered or self._broken:
            return None
        return await splice_into(self.proc.stdin, fd, offset, count, "ssh exited")


    # ------------------------------------------------------------------ stdout

    async def readline(self) -> bytes:
        assert self.proc is not None and self.proc.stdout is not None
        if self._answered:
            return await self.proc.stdout.readline()
        try:
            async for attempt in connect_retrying(retry_if_exception_type(_Transient), self._transport.attempts):
                with attempt:
                    if attempt.retry_state.attempt_number > 1:
                        await self._restart()
                    return await self._first_line()
        except _Transient as exc:
            raise await self._transport.unreachable(exc.lines) from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def _first_line(self) -> bytes:
        assert self.proc is not None and self.proc.stdout is not None
        line = await self.proc.stdout.readline()
        if line:
            self._on_answer()
            return line
        lines = await self._stderr_lines()
        if self.proc.returncode != 255:
            return b""  # the remote command itself failed (no python, sudo refused...): error_tail says why
        kind = classify(lines)
        if kind in TRANSIENT and self._replay is not None:
            raise _Transient(kind, lines)
        raise await self._transport.unreachable(lines)

    def _on_answer(self) -> None:
        self._answered, self._replay = True, None
        assert self.piped is not None
        for line in self.piped.stderr:
            if line.startswith(PERMANENTLY_ADDED):
                log.warning("ssh.host_key_recorded", host=self._transport.target.name, message=line,
                            known_hosts=self._transport.target.known_hosts or "OpenSSH's default")

    async def _restart(self) -> None:
        """A fresh ssh, fed everything written so far (in one go: nothing can slip in between)."""
        await self.start()
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(bytes(self._replay or b""))  # after start(): includes what came in meanwhile
        await self.drain()

    # ------------------------------------------------------------------ AgentStreams

    async def stderr_text(self) -> str:
        if self.piped is None:
            return ""
        return "\n".join(line for line in await self._stderr_lines() if not line.startswith(PERMANENTLY_ADDED))

    async def error_tail(self) -> str:
        if self.proc is None or self.piped is None:
            return ""
        lines = await self._stderr_lines()
        if self.proc.returncode == 255 and not self._answered and classify(lines) is not None:
            return str(await self._transport.unreachable(lines))
        return error_tail([line for line in lines if not line.startswith(PERMANENTLY_ADDED)], self._sudo_user)

    async def close(self) -> None:
        self._transport._live.discard(self)
        if self.piped is not None:
            await self.piped.end(CLOSE_TIMEOUT_S)
