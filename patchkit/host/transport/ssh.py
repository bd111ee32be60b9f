"""The SSH transport (asyncssh): one connection per host per run, one exec per agent.

What it guarantees:
- one TCP/SSH connection per host, opened on the first spawn and reused;
- every spawn is exactly one exec request (counted in `exec_requests`), built with
  `shlex.join(argv)`: the remote login shell never sees unquoted input;
- host keys are always verified against a known_hosts file (the inventory's, else the
  UserKnownHostsFile ~/.ssh/config names for the host, else ~/.ssh/known_hosts). An unknown or changed key is refused with a message that says how
  to accept it. `accept_new_host_keys` is OpenSSH's `StrictHostKeyChecking accept-new`:
  an unknown key is recorded, a changed key is still refused;
- ~/.ssh/config (HostName, Port, User, IdentityFile, ProxyJump, ...) is read by asyncssh;
  what the inventory sets wins over it. ssh-agent keys (SSH_AUTH_SOCK) are offered first;
- connection set-up is retried (refused, reset, lost, timeout) a few times with backoff;
  host-key and authentication failures never are;
- `become: true` runs the process through `sudo -n` (never prompts) unless we log in as root.

What it shares with the OpenSSH transport lives in ssh_common.py: the SSHTarget it is given,
the `become` wrapper, and the failure kinds: `asyncssh_failure` only says which kind an
asyncssh exception is, so both raise one class with one message for the same failure.

Jump hosts (ProxyJump) are opened by asyncssh itself and verified against the default
known_hosts (~/.ssh/known_hosts or the config's UserKnownHostsFile), as OpenSSH would.
"""

from __future__ import annotations

import asyncio
import getpass
import os
import re
import shlex
import socket
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from patchkit.host.transport.asyncssh_import import asyncssh  # isort: skip - first: see its docstring
from asyncssh.public_key import get_default_public_key_algs
from tenacity import retry_if_exception

from patchkit.base.errors import HostError
from patchkit.base.logs import get_logger
from patchkit.host.transport.asyncssh_aead import leaner_aead_sends
from patchkit.host.transport.asyncssh_auth import local_keys_sign_first, prefer_public_key
from patchkit.host.transport.asyncssh_quiet import quiet_log_calls, quiet_packet_logging
from patchkit.host.transport.base import NoFileSplice
from patchkit.host.transport.coalesce import coalesce_writes
from patchkit.host.transport.ssh_common import (
    CLOSE_TIMEOUT_S,
    KEEPALIVE_S,
    Endpoint,
    SSHFailure,
    SSHTarget,
    connect_error,
    connect_retrying,
    error_tail,
    known_hosts_pattern,
    with_become,
)

log = get_logger("patchkit")
quiet_packet_logging()
quiet_log_calls()
leaner_aead_sends()
local_keys_sign_first()

# Connection set-up failures worth another attempt. Everything else (host key, auth,
# name resolution, a bad identity file) fails at once.
_TRANSIENT = (ConnectionRefusedError, ConnectionResetError, ConnectionAbortedError, TimeoutError,
              asyncssh.ConnectionLost)


def _is_transient(exc: BaseException) -> bool:
    return isinstance(exc, _TRANSIENT)


def asyncssh_failure(exc: BaseException, where: Endpoint, *, known_entries: int, presented: asyncssh.SSHKey | None,
                     timeout: float, attempts: int) -> SSHFailure:
    """What asyncssh raised while connecting, as a failure kind both transports share.
    `known_entries`: how many keys known_hosts holds for the host; `presented`: the key it showed."""
    if isinstance(exc, asyncssh.HostKeyNotVerifiable):
        shown = f"{presented.get_algorithm()} {presented.get_fingerprint()}" if presented is not None else "a key"
        return connect_error("changed_key" if known_entries else "unknown_key", where, presented=shown)
    if isinstance(exc, asyncssh.PermissionDenied):
        return connect_error("auth", where, reason=exc.reason)
    if isinstance(exc, ConnectionRefusedError):
        return connect_error("refused", where)
    if isinstance(exc, ConnectionResetError):
        return connect_error("reset", where)
    if isinstance(exc, TimeoutError):
        return connect_error("timeout", where, timeout=timeout, attempts=attempts)
    if isinstance(exc, socket.gaierror):
        return connect_error("resolve", where, reason=exc.strerror)
    if isinstance(exc, asyncssh.DisconnectError):
        return connect_error("failed", where, detail=exc.reason)
    if isinstance(exc, OSError):
        return connect_error("network", where, detail=exc.strerror or exc)
    return connect_error("failed", where, detail=f"{type(exc).__name__}: {exc}")


def _lost(exc: asyncssh.Error) -> ConnectionError:
    """asyncssh's errors on a dropped connection, as the ConnectionError the agent client expects."""
    return ConnectionError(f"SSH connection lost ({exc.reason})" if getattr(exc, "reason", "") else str(exc))


_KNOWN_HOSTS: dict[str, tuple[tuple[int, int], asyncssh.SSHKnownHosts]] = {}


def _known_hosts_path(path: str, login: str | None) -> str:
    """A UserKnownHostsFile value as OpenSSH reads it: `~`, `%d` (home), `%u` (local user), `%r`
    (remote user), `%%`."""
    home = os.path.expanduser("~")
    tokens = {"d": home, "u": getpass.getuser(), "r": login or "", "%": "%"}
    expanded = re.sub(r"%(.)", lambda m: tokens.get(m.group(1), m.group()), path)
    return os.path.expanduser(expanded)


def _parsed_known_hosts(path: str) -> asyncssh.SSHKnownHosts:
    """A fleet's hosts share one known_hosts file: parse it once per version of the file
    (size + mtime), not twice per host. A key recorded during the run changes both."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return asyncssh.import_known_hosts("")
    version = (st.st_size, st.st_mtime_ns)
    cached = _KNOWN_HOSTS.get(path)
    if cached is None or cached[0] != version:
        cached = (version, asyncssh.import_known_hosts(Path(path).read_bytes().decode("utf-8", "replace")))
        _KNOWN_HOSTS[path] = cached
    return cached[1]


_CONFIG_MENTIONS: dict[str, tuple[tuple[int, int], bool]] = {}


def _config_may_set_ciphers() -> bool:
    """Can ~/.ssh/config (what asyncssh reads with config=()) set Ciphers for some host? Only
    if it says `Ciphers`, or `Include`s another file; read once per version of the file."""
    path = os.path.expanduser("~/.ssh/config")
    try:
        st = os.stat(path)
    except OSError:
        return False  # no config: asyncssh reads none either
    version = (st.st_size, st.st_mtime_ns)
    cached = _CONFIG_MENTIONS.get(path)
    if cached is None or cached[0] != version:
        try:
            text = Path(path).read_bytes().decode("utf-8", "replace").lower()
        except OSError:
            return True  # unreadable here: let asyncssh decide, as before
        cached = (version, "ciphers" in text or "include" in text)
        _CONFIG_MENTIONS[path] = cached
    return cached[1]


_IDENTITIES: dict[str, tuple[tuple[tuple[int, int] | None, ...], Sequence[asyncssh.SSHKeyPair]]] = {}


def _identity_keys(path: str) -> Sequence[asyncssh.SSHKeyPair]:
    """An inventory's identity file, loaded once per version of it (and of its certificate)
    for all the hosts that name it, not once per host: ~0.8 ms of CPU each (bench/README.md).
    Errors (missing, unreadable, needs a passphrase) are asyncssh's own, as before."""
    def version(p: str) -> tuple[int, int] | None:
        try:
            st = os.stat(p)
        except OSError:
            return None
        return (st.st_size, st.st_mtime_ns)

    versions = (version(path), version(path + "-cert.pub"), version(path + ".pub"))
    cached = _IDENTITIES.get(path)
    if cached is not None and cached[0] == versions and versions[0] is not None:
        return cached[1]
    keys = asyncssh.load_keypairs([path])
    _IDENTITIES[path] = (versions, keys)
    return keys


def _gcm_first() -> list[str]:
    from asyncssh.encryption import get_default_encryption_algs

    default = [alg.decode() for alg in get_default_encryption_algs()]
    gcm = [alg for alg in ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com") if alg in default]
    return gcm + [alg for alg in default if alg not in gcm]


class _Writer:
    def __init__(self, writer: asyncssh.SSHWriter[bytes]) -> None:
        self._writer = writer

    def write(self, data: bytes) -> None:
        try:
            self._writer.write(data)
        except asyncssh.Error as exc:
            raise _lost(exc) from None

    async def drain(self) -> None:
        try:
            await self._writer.drain()
        except asyncssh.Error as exc:
            raise _lost(exc) from None


class _Reader:
    def __init__(self, reader: asyncssh.SSHReader[bytes]) -> None:
        self._reader = reader

    async def readline(self) -> bytes:
        try:
            line: bytes = await self._reader.readline()
            return line
        except asyncssh.Error as exc:
            raise _lost(exc) from None


class _SSHStreams(NoFileSplice):
    """The pipes of one remote process (binary)."""

    def __init__(self, proc: asyncssh.SSHClientProcess[bytes], sudo_user: str | None) -> None:
        self.proc = proc
        self.stdin = _Writer(proc.stdin)
        self.stdout = _Reader(proc.stdout)
        self._sudo_user = sudo_user
        self._stderr: str | None = None

    async def stderr_text(self) -> str:
        if self._stderr is None:
            try:
                data = await asyncio.wait_for(self.proc.stderr.read(), 5)
            except (TimeoutError, asyncssh.Error, OSError):
                return ""
            self._stderr = data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)
        return self._stderr

    async def error_tail(self) -> str:
        return error_tail((await self.stderr_text()).splitlines(), self._sudo_user)

    async def close(self) -> None:
        try:
            if not self.proc.stdin.is_closing():
                self.proc.stdin.write_eof()
            await asyncio.wait_for(self.proc.wait_closed(), CLOSE_TIMEOUT_S)
        except (TimeoutError, asyncssh.Error, OSError, BrokenPipeError):
            self.proc.close()


class SSHTransport:
    name = "ssh"

    def __init__(self, target: SSHTarget) -> None:
        self.target = target
        self.attempts = max(1, target.attempts)
        self.exec_requests = 0
        # sshd opens a session's window only once its command runs, so stdin costs a round trip after
        # the exec: with `agent_start: command` the agent's start rides in the command line (base.py).
        self.start_in_command = target.start_in_command
        self.known_hosts = target.known_hosts_path  # where keys are recorded (accept-new), and messages say
        self._known_files = [self.known_hosts]  # every file whose keys are trusted
        self._conn: asyncssh.SSHClientConnection | None = None
        self._connecting: asyncio.Task[asyncssh.SSHClientConnection] | None = None
        # Filled while connecting (~/.ssh/config applied), for messages and `become`.
        self._where = Endpoint.of(target)
        self._known_entries = 0
        self._presented: asyncssh.SSHKey | None = None
        self._host_key_algs: list[str] | None = None

    @property
    def label(self) -> str:
        return self._where.label

    # ------------------------------------------------------------------ connection

    def open(self) -> None:
        """Start reaching the host now, before the first spawn asks (host/transport/early.py). The
        spawn awaits this same connection, so its failure is the session's, as without it."""
        self._connect_task()

    def _connect_task(self) -> asyncio.Task[asyncssh.SSHClientConnection]:
        if self._connecting is None:
            self._connecting = asyncio.ensure_future(self._connect_with_retries())
            # a host whose session never starts (interrupted, skipped): its failure is not news
            self._connecting.add_done_callback(lambda task: task.cancelled() or task.exception())
        return self._connecting

    async def _connection(self) -> asyncssh.SSHClientConnection:
        if self._conn is None:
            self._conn = await self._connect_task()
        return self._conn

    async def _connect_with_retries(self) -> asyncssh.SSHClientConnection:
        try:
            options = await self._options()
            async for attempt in connect_retrying(retry_if_exception(_is_transient), self.attempts):
                with attempt:
                    # the inventory's address and port again: connect() re-reads them over `options`
                    conn = await asyncssh.connect(self.target.address, self.target.port or (), options=options,
                                                  server_host_key_algs=self._host_key_algs or ())
                    coalesce_writes(conn)
                    return conn
        except HostError:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure becomes a readable HostError
            raise asyncssh_failure(exc, self._where, known_entries=self._known_entries, presented=self._presented,
                                   timeout=self.target.connect_timeout, attempts=self.attempts) from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def _options(self) -> asyncssh.SSHClientConnectionOptions:
        target = self.target
        kwargs: dict[str, Any] = {
            "known_hosts": self._match_known_hosts,
            "client_factory": lambda: _Client(self),
            "connect_timeout": target.connect_timeout,
            "keepalive_interval": KEEPALIVE_S,
            "request_pty": False,
        }
        # Set in the inventory: wins over ~/.ssh/config. Unset: asyncssh takes the config's.
        if target.port:
            kwargs["port"] = target.port
        if target.user:
            kwargs["username"] = target.user
        identity = os.path.expanduser(target.identity_file) if target.identity_file else None
        # asyncssh's default puts chacha20-poly1305 first, which costs it about twice the CPU
        # of AES-GCM (AES-NI): a 2 GB deploy took 14.5 s instead of 10.1 s. A `Ciphers` of
        # ~/.ssh/config still wins: when the config may set one, the options are built twice
        # (once to read it); when it cannot, once, with AES-GCM first (a fleet pays it per host).
        may_set_ciphers = _config_may_set_ciphers()
        if not may_set_ciphers:
            kwargs["encryption_algs"] = _gcm_first()
        try:
            if identity:
                kwargs["client_keys"] = _identity_keys(identity)
            options: asyncssh.SSHClientConnectionOptions = await asyncssh.SSHClientConnectionOptions.construct(
                None, config=(), host=target.address, **kwargs)  # config=(): ~/.ssh/config, as connect() does
            if may_set_ciphers and not options.config.get("Ciphers"):
                # Through construct(): connect() rebuilds the options from their kwargs.
                options = await asyncssh.SSHClientConnectionOptions.construct(options, encryption_algs=_gcm_first())
        except (OSError, asyncssh.KeyImportError, ValueError) as exc:
            raise HostError(f"{target.name}: bad SSH settings: {exc}") from None
        if not target.known_hosts:  # the inventory names none: ~/.ssh/config's, as OpenSSH reads it
            files: list[str] = list(options.config.get("UserKnownHostsFile") or [])  # type: ignore[call-overload]
            configured = [_known_hosts_path(f, options.username) for f in files]
            if configured:
                self.known_hosts, self._known_files = configured[0], configured
        self._where = Endpoint(target.name, options.host, options.port, options.username, self.known_hosts)
        self._host_key_algs = self._preferred_host_key_algs(options)
        return options

    def _known(self, host: str, addr: str, port: int | None) -> tuple[list[Any], list[Any], list[Any]]:
        keys: list[Any] = []
        ca_keys: list[Any] = []
        revoked: list[Any] = []
        for path in self._known_files:
            try:
                parsed = _parsed_known_hosts(path)
            except OSError as exc:
                raise connect_error("known_hosts_unreadable", replace(self._where, known_hosts=path),
                                    detail=exc) from None
            found = asyncssh.match_known_hosts(parsed, host, addr, port)[:3]
            keys += found[0]
            ca_keys += found[1]
            revoked += found[2]
        return keys, ca_keys, revoked

    def _match_known_hosts(self, host: str, addr: str, port: int | None) -> tuple[list[Any], list[Any], list[Any]]:
        """asyncssh asks (with the resolved name, address and port) which keys to trust."""
        keys, ca_keys, revoked = self._known(host, addr, port)
        self._known_entries = len(keys) + len(ca_keys)
        return keys, ca_keys, revoked

    def _preferred_host_key_algs(self, options: asyncssh.SSHClientConnectionOptions) -> list[str] | None:
        """As OpenSSH does: the key types known_hosts holds for the host first, then every other.

        asyncssh alone offers only the known types, so a host that now has a key of another
        type fails the handshake ("connection lost", retried); this way it presents that key
        and is refused as a changed key, with the message that says what to do.
        """
        if options.config.get("HostKeyAlgorithms"):
            return None
        port = options.port if options.port != 22 else None
        keys, ca_keys, _ = self._known(options.host, "", port)  # no address yet: by name (or IP literal)
        if not keys or ca_keys:
            return None
        first: list[bytes] = []
        for key in keys:
            first.extend(alg for alg in key.sig_algorithms if alg not in first)
        return [alg.decode() for alg in first + [a for a in get_default_public_key_algs() if a not in first]]

    def _validate_unknown_key(self, host: str, port: int, key: asyncssh.SSHKey) -> bool:
        """Called by asyncssh for a key that no known_hosts entry trusts."""
        self._presented = key
        if self._known_entries or not self.target.accept_new_host_keys:
            return False
        kind, blob = key.export_public_key("openssh").decode().split()[:2]
        line = f"{known_hosts_pattern(host, port)} {kind} {blob}\n"
        folder = os.path.dirname(self.known_hosts) or "."
        os.makedirs(folder, mode=0o700, exist_ok=True)
        fd = os.open(self.known_hosts, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())  # one write with O_APPEND: parallel hosts never interleave
        finally:
            os.close(fd)
        log.warning("ssh.host_key_recorded", host=self.target.name, entry=f"{known_hosts_pattern(host, port)} {kind}",
                    fingerprint=key.get_fingerprint(), known_hosts=self.known_hosts)
        return True

    # ------------------------------------------------------------------ Transport

    async def spawn(self, argv: list[str]) -> _SSHStreams:
        conn = await self._connection()
        argv, sudo_user = with_become(argv, self.target.become, self._where.user)
        command = shlex.join(argv)
        self.exec_requests += 1
        try:
            proc = await conn.create_process(command, encoding=None, request_pty=False)
        except asyncssh.ChannelOpenError as exc:
            raise HostError(f"{self.label}: cannot open a session: {exc.reason}") from None
        except (asyncssh.Error, OSError) as exc:
            raise HostError(f"{self.label}: cannot start {argv[0]}: {exc}") from None
        return _SSHStreams(proc, sudo_user)

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        task, self._connecting = self._connecting, None
        if conn is None and task is not None:  # opened early, no spawn took it
            if not task.done():
                task.cancel()
                await asyncio.wait([task])
            if not task.cancelled() and task.exception() is None:
                conn = task.result()
        if conn is not None:
            conn.close()
            try:
                await asyncio.wait_for(conn.wait_closed(), CLOSE_TIMEOUT_S)
            except (TimeoutError, asyncssh.Error, OSError):
                pass


class _Client(asyncssh.SSHClient):
    def __init__(self, transport: SSHTransport) -> None:
        self._transport = transport

    def connection_made(self, conn: asyncssh.SSHClientConnection) -> None:
        prefer_public_key(conn)  # the login's first request is the key's, signed (asyncssh_auth.py)

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        return self._transport._validate_unknown_key(host, port, key)
