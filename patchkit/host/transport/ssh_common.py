"""What both SSH transports (asyncssh in ssh.py, OpenSSH in openssh.py) share.

- `SSHTarget`: what a transport needs to know about a host, built from the inventory entry
  (its ssh scheme's options, ssh_scheme.py) in one place (`SSHTarget.from_host`);
- `Endpoint`: where the client really connects once ~/.ssh/config is applied: the label,
  known_hosts pattern and commands that messages quote;
- the failure kinds, each with ONE class and ONE message (`connect_error`): a transport only
  maps the raw error it sees (an asyncssh exception, ssh's stderr and exit code) to a kind
  and its facts;
- the `become` wrapper (`sudo -n`) and the hint when sudo refuses;
- timeouts and the retry policy of connection set-up.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tenacity import AsyncRetrying, stop_after_attempt, wait_exponential
from tenacity.retry import retry_base

from patchkit.base.errors import HostUnreachable

if TYPE_CHECKING:  # not imported: the SSH helper process (sshhelper.py) builds no inventory models
    from patchkit.fleet.inventory import HostSpec

DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
CONNECT_TIMEOUT_S = 10.0  # TCP + handshake (+ authentication for asyncssh), per attempt
CONNECT_ATTEMPTS = 3
CLOSE_TIMEOUT_S = 10.0
KEEPALIVE_S = 30  # long steps (a server launch) keep the connection through NATs and firewalls
ERROR_TAIL_LINES = 5


def connect_retrying(retry: retry_base, attempts: int) -> AsyncRetrying:
    """Connection set-up attempts: a few, with a short exponential backoff."""
    return AsyncRetrying(retry=retry, stop=stop_after_attempt(attempts),
                         wait=wait_exponential(multiplier=0.25, max=2.0), reraise=True)


# ---------------------------------------------------------------------- the target


@dataclass(frozen=True)
class SSHTarget:
    """One host as an SSH transport sees it. Unset fields (None) are left to ~/.ssh/config."""

    name: str  # the inventory's name, for messages
    address: str
    port: int | None = None
    user: str | None = None
    identity_file: str | None = None
    known_hosts: str | None = None  # as the inventory says; None: the client's default
    become: bool = False  # run through `sudo -n` unless we log in as root
    agent_start: str = "stdin"  # the inventory's: "command" puts the agent's start in the exec's argv
    accept_new_host_keys: bool = False  # StrictHostKeyChecking accept-new: never a changed key
    connect_timeout: float = CONNECT_TIMEOUT_S
    attempts: int = CONNECT_ATTEMPTS

    @classmethod
    def from_host(cls, host: HostSpec, accept_new_host_keys: bool = False) -> SSHTarget:
        from patchkit.host.transport.ssh_scheme import SSHOptions  # here only: the helper reads no inventory

        options = host.options_as(SSHOptions)
        return cls(name=host.name, address=host.address or host.name, port=options.port, user=host.user,
                   identity_file=options.identity_file, known_hosts=options.known_hosts, become=options.become,
                   agent_start=options.agent_start, accept_new_host_keys=accept_new_host_keys)

    @property
    def start_in_command(self) -> bool:
        """The agent's start rides in the exec's command line (host/transport/base.py): only when the
        inventory asks (`agent_start: command`) and never through sudo, which logs every command
        line in full."""
        return self.agent_start == "command" and not self.become

    @property
    def known_hosts_path(self) -> str:
        """The inventory's known_hosts, else ~/.ssh/known_hosts (expanded)."""
        return os.path.expanduser(self.known_hosts or DEFAULT_KNOWN_HOSTS)


@dataclass(frozen=True)
class Endpoint:
    """Where the client connects after ~/.ssh/config, as whom, checking which known_hosts."""

    name: str
    hostname: str
    port: int | None
    user: str | None
    known_hosts: str

    @classmethod
    def of(cls, target: SSHTarget) -> Endpoint:
        """What the inventory alone says (before the config is applied)."""
        return cls(target.name, target.address, target.port, target.user, target.known_hosts_path)

    @property
    def label(self) -> str:
        return f"{self.name} ({self.hostname}:{self.port or 22})"

    @property
    def pattern(self) -> str:
        """The host as known_hosts names it."""
        return known_hosts_pattern(self.hostname, self.port)

    def keyscan(self) -> str:
        return keyscan_command(self.hostname, self.port, self.known_hosts)


def known_hosts_pattern(host: str, port: int | None) -> str:
    return host if port in (None, 22) else f"[{host}]:{port}"


def keyscan_command(host: str, port: int | None, known_hosts: str) -> str:
    port_opt = "" if port in (None, 22) else f"-p {port} "
    return f"ssh-keyscan {port_opt}{shlex.quote(host)} >> {shlex.quote(known_hosts)}"


# ---------------------------------------------------------------------- failures


class SSHFailure(HostUnreachable):
    """No SSH session with the host; `kind` names the failure (a key of MESSAGES)."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


class HostKeyRefused(SSHFailure):
    """The host's key is unknown, changed or cannot be checked (never retried)."""


class AuthRefused(SSHFailure):
    """The host refused every key we offered (never retried)."""


class ConnectFailed(SSHFailure):
    """No SSH session: refused, reset, closed, timed out, unknown name, lost (the message says which)."""


KEYS_TRIED = "keys tried: ssh-agent, identity_file / ~/.ssh/config IdentityFile, ~/.ssh/id_*"

# kind -> (class, message). Facts a kind needs come from the transport's raw error; `label`,
# `pattern`, `keyscan`, `hostname`, `user` and `known_hosts` from the Endpoint.
MESSAGES: dict[str, tuple[type[SSHFailure], str]] = {
    "unknown_key": (HostKeyRefused,
                    "{label}: host key unknown: no entry for {pattern} in {known_hosts} (the host presented "
                    "{presented}); refusing to connect. Check the fingerprint, then add it with `{keyscan}`, or "
                    "rerun with --accept-new-host-keys to record the keys of hosts seen for the first time"),
    "changed_key": (HostKeyRefused,
                    "{label}: HOST KEY CHANGED: the host presented {presented}, which is not the key recorded "
                    "for {pattern} in {recorded_in}{at_line}; refusing to connect (the host may have been "
                    "reinstalled, or someone is in the middle). If the change is expected, remove the old entry "
                    "with `ssh-keygen -R {pattern_q} -f {recorded_in_q}` and add the new one with `{keyscan}` "
                    "(--accept-new-host-keys never replaces a changed key)"),
    "host_key": (HostKeyRefused, "{label}: host key verification failed: {detail}"),
    "known_hosts_unreadable": (HostKeyRefused, "{label}: cannot read known_hosts {known_hosts}: {detail}"),
    "auth": (AuthRefused, "{label}: authentication failed as {user}: {reason} (" + KEYS_TRIED + ")"),
    "resolve": (ConnectFailed, "{label}: cannot resolve {hostname}: {reason}"),
    "refused": (ConnectFailed, "{label}: connection refused"),
    "refused_by_hop": (ConnectFailed, "{label}: connection refused by {hop} (a ProxyJump or ProxyCommand hop)"),
    "reset": (ConnectFailed, "{label}: connection reset"),
    "closed": (ConnectFailed, "{label}: connection closed by the host before the SSH handshake"),
    "timeout": (ConnectFailed, "{label}: no SSH connection within {timeout:g}s ({attempts} attempts)"),
    "network": (ConnectFailed, "{label}: {detail}"),
    "failed": (ConnectFailed, "{label}: SSH connection failed: {detail}"),
}

# Set-up failures worth another attempt: the remote command cannot have started.
TRANSIENT = frozenset({"refused", "reset", "closed", "timeout"})


def connect_error(kind: str, where: Endpoint, **facts: Any) -> SSHFailure:
    """The error for a failure of this kind, in the same class and words on every transport."""
    cls, template = MESSAGES[kind]
    facts.setdefault("presented", "a key")
    recorded_in = facts.pop("recorded_in", None) or where.known_hosts
    message = template.format(
        label=where.label, pattern=where.pattern, pattern_q=shlex.quote(where.pattern),
        keyscan=where.keyscan(), hostname=where.hostname, user=where.user or "?", known_hosts=where.known_hosts,
        recorded_in=recorded_in, recorded_in_q=shlex.quote(recorded_in), at_line=facts.pop("at_line", ""),
        **facts)
    return cls(message, kind)


# ---------------------------------------------------------------------- become


SUDO = ("sudo", "-n", "-H", "--")  # -n: never a password prompt


def with_become(argv: list[str], become: bool, login: str | None) -> tuple[list[str], str | None]:
    """argv as the host runs it: through `sudo -n` when `become` and we do not log in as root.
    Also who sudo runs for (for `error_tail`), None when sudo is not used."""
    if not become or login == "root":
        return list(argv), None
    return [*SUDO, *argv], login or "?"


def error_tail(lines: list[str], sudo_user: str | None) -> str:
    """The last lines of a remote process's stderr, with what to do when sudo refused."""
    tail = "\n".join([line for line in lines if line.strip()][-ERROR_TAIL_LINES:])
    if sudo_user is not None and "sudo" in tail:
        tail += (f" (become: true runs `sudo -n` as {sudo_user}, which needs passwordless sudo"
                 " for the target interpreter on this host)")
    return tail
