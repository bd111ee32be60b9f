"""Both SSH transports speak one vocabulary: the same failure is the same class and message.

No sshd: each transport's error mapping is fed the raw error it would see, an asyncssh
exception for the embedded client, ssh's exit status and stderr lines for OpenSSH.
"""

from __future__ import annotations

import socket
from typing import Any

import pytest

from patchkit.base.errors import HostUnreachable
from patchkit.fleet.inventory import HostSpec
from patchkit.host.transport.asyncssh_import import asyncssh
from patchkit.host.transport.openssh_errors import openssh_failure
from patchkit.host.transport.ssh import asyncssh_failure
from patchkit.host.transport.ssh_common import (
    MESSAGES,
    TRANSIENT,
    AuthRefused,
    ConnectFailed,
    Endpoint,
    HostKeyRefused,
    SSHTarget,
    error_tail,
    with_become,
)

WHERE = Endpoint("gpu-1", "127.0.0.1", 2222, "root", "/k/known_hosts")
TIMEOUT, ATTEMPTS = 10, 3

CHANGED = ["@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @",
           "The fingerprint for the ED25519 key sent by the remote host is",
           "SHA256:abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG.",
           "Host key for [127.0.0.1]:2222 has changed and you have requested strict checking.",
           "Host key verification failed."]
UNKNOWN = ["No ED25519 host key is known for [127.0.0.1]:2222 and you have requested strict checking.",
           "Host key verification failed."]

# kind, class, (asyncssh's raw error, its known_hosts entries), ssh's stderr, and the message
# both give (`{key}`: the key the host presented, as each client describes it).
CASES: list[tuple[str, type[HostUnreachable], tuple[BaseException, int], list[str], str]] = [
    ("unknown_key", HostKeyRefused, (asyncssh.HostKeyNotVerifiable("Host key is not trusted"), 0), UNKNOWN,
     "gpu-1 (127.0.0.1:2222): host key unknown: no entry for [127.0.0.1]:2222 in /k/known_hosts (the host "
     "presented {key}); refusing to connect. Check the fingerprint, then add it with `ssh-keyscan -p 2222 "
     "127.0.0.1 >> /k/known_hosts`, or rerun with --accept-new-host-keys to record the keys of hosts seen for "
     "the first time"),
    ("changed_key", HostKeyRefused, (asyncssh.HostKeyNotVerifiable("Host key is not trusted"), 1), CHANGED,
     "gpu-1 (127.0.0.1:2222): HOST KEY CHANGED: the host presented {key}, which is not the key recorded for "
     "[127.0.0.1]:2222 in /k/known_hosts; refusing to connect (the host may have been reinstalled, or someone "
     "is in the middle). If the change is expected, remove the old entry with `ssh-keygen -R '[127.0.0.1]:2222' "
     "-f /k/known_hosts` and add the new one with `ssh-keyscan -p 2222 127.0.0.1 >> /k/known_hosts` "
     "(--accept-new-host-keys never replaces a changed key)"),
    ("auth", AuthRefused, (asyncssh.PermissionDenied("Permission denied (publickey)"), 0),
     ["root@127.0.0.1: Permission denied (publickey)."],
     "gpu-1 (127.0.0.1:2222): authentication failed as root: Permission denied (publickey) (keys tried: "
     "ssh-agent, identity_file / ~/.ssh/config IdentityFile, ~/.ssh/id_*)"),
    ("refused", ConnectFailed, (ConnectionRefusedError(111, "Connection refused"), 0),
     ["ssh: connect to host 127.0.0.1 port 2222: Connection refused"],
     "gpu-1 (127.0.0.1:2222): connection refused"),
    ("reset", ConnectFailed, (ConnectionResetError(104, "Connection reset by peer"), 0),
     ["kex_exchange_identification: read: Connection reset by peer"],
     "gpu-1 (127.0.0.1:2222): connection reset"),
    ("timeout", ConnectFailed, (TimeoutError(), 0),
     ["ssh: connect to host 127.0.0.1 port 2222: Connection timed out"],
     "gpu-1 (127.0.0.1:2222): no SSH connection within 10s (3 attempts)"),
    ("resolve", ConnectFailed, (socket.gaierror(-2, "Name or service not known"), 0),
     ["ssh: Could not resolve hostname 127.0.0.1: Name or service not known"],
     "gpu-1 (127.0.0.1:2222): cannot resolve 127.0.0.1: Name or service not known"),
    ("failed", ConnectFailed, (asyncssh.ProtocolError("Bad packet length 1349676916."), 0),
     ["Bad packet length 1349676916."],
     "gpu-1 (127.0.0.1:2222): SSH connection failed: Bad packet length 1349676916."),
]

# The key each client says the host presented (asyncssh: algorithm and fingerprint of the key
# object; OpenSSH: what its stderr says).
PRESENTED = {"unknown_key": ("ssh-ed25519 ", "an ED25519 key"),
             "changed_key": ("ssh-ed25519 ", "an ED25519 key SHA256:abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG")}


def _asyncssh(exc: BaseException, known_entries: int, presented: Any = None) -> Exception:
    return asyncssh_failure(exc, WHERE, known_entries=known_entries, presented=presented, timeout=float(TIMEOUT),
                            attempts=ATTEMPTS)


def _openssh(lines: list[str], returncode: int = 255) -> Exception | None:
    return openssh_failure(returncode, lines, WHERE, timeout=TIMEOUT, attempts=ATTEMPTS)


@pytest.mark.parametrize("kind, cls, raw, lines, message", CASES, ids=[case[0] for case in CASES])
def test_the_same_failure_is_the_same_class_and_message_on_both_transports(
        kind: str, cls: type[HostUnreachable], raw: tuple[BaseException, int], lines: list[str], message: str) -> None:
    key = asyncssh.generate_private_key("ssh-ed25519")
    embedded, system = _asyncssh(*raw, presented=key), _openssh(lines)
    assert type(embedded) is cls and type(system) is cls
    assert embedded.kind == system.kind == kind  # type: ignore[union-attr]
    if kind in PRESENTED:
        by_asyncssh, by_openssh = PRESENTED[kind]
        by_asyncssh += key.get_fingerprint()
        assert str(embedded) == message.format(key=by_asyncssh)
        assert str(system) == message.format(key=by_openssh)
    else:
        assert str(embedded) == str(system) == message
    if kind in PRESENTED:  # a key the client cannot describe: "a key"
        assert "presented a key" in str(_asyncssh(*raw, presented=None))


def test_every_kind_has_one_class_and_the_retried_ones_are_connect_failures() -> None:
    assert {cls for cls, _ in MESSAGES.values()} == {HostKeyRefused, AuthRefused, ConnectFailed}
    assert all(issubclass(cls, HostUnreachable) for cls, _ in MESSAGES.values())
    assert TRANSIENT <= set(MESSAGES) and all(MESSAGES[kind][0] is ConnectFailed for kind in TRANSIENT)


def test_openssh_only_facts() -> None:
    offending = _openssh(CHANGED[:-2] + ["Offending ED25519 key in /other/known_hosts:3"] + CHANGED[-2:])
    assert "recorded for [127.0.0.1]:2222 in /other/known_hosts (line 3)" in str(offending)
    assert "-f /other/known_hosts`" in str(offending)
    hop = _openssh(["ssh: connect to host 10.0.0.7 port 22: Connection refused"])
    assert type(hop) is ConnectFailed and str(hop) == (
        "gpu-1 (127.0.0.1:2222): connection refused by 10.0.0.7:22 (a ProxyJump or ProxyCommand hop)")
    assert _openssh(["python3: not found"], returncode=127) is None  # ssh worked; the remote command did not


def test_one_become_wrapper_and_hint() -> None:
    assert with_become(["python3", "-"], True, "deploy") == (["sudo", "-n", "-H", "--", "python3", "-"], "deploy")
    assert with_become(["python3", "-"], True, "root") == (["python3", "-"], None)
    assert with_become(["python3", "-"], True, None) == (["sudo", "-n", "-H", "--", "python3", "-"], "?")
    assert with_become(["python3", "-"], False, "deploy") == (["python3", "-"], None)
    assert error_tail(["", "sudo: a password is required", ""], "deploy") == (
        "sudo: a password is required (become: true runs `sudo -n` as deploy, which needs passwordless sudo for "
        "the target interpreter on this host)")
    assert error_tail(["sudo: a password is required"], None) == "sudo: a password is required"


def test_the_target_is_built_from_the_inventory_entry_in_one_place() -> None:
    host = HostSpec(name="gpu-1", address="gpu-node-1.internal", port=2222, user="deploy", python="/p",
                    identity_file="~/.ssh/id", known_hosts="~/kh", become=True, ssh_client="openssh")
    target = SSHTarget.from_host(host, accept_new_host_keys=True)
    assert target == SSHTarget(name="gpu-1", address="gpu-node-1.internal", port=2222, user="deploy",
                               identity_file="~/.ssh/id", known_hosts="~/kh", become=True, accept_new_host_keys=True)
    with pytest.raises(AttributeError):
        target.port = 22  # type: ignore[misc]  # frozen
