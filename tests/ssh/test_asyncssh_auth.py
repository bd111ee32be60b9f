"""asyncssh's public-key login in one request (host/transport/asyncssh_auth.py), against a real sshd.

The client waits for the server's answer to each login request before it sends the next,
so every request is a round trip: recorded here as asyncssh sends them (method, signed or
not). asyncssh alone sends three for a key from a file (`none`, a query, the signed key);
patchkit's transport sends one. The latency proxy of bench/run_bench.py shows the same on
the wire (bench/README.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import patchkit.host.transport.ssh as ssh_module
from patchkit.base.errors import HostError
from patchkit.host.transport.asyncssh_auth import local_keys_sign_first, signs_in_process
from patchkit.host.transport.asyncssh_import import asyncssh
from patchkit.host.transport.ssh import SSHTransport
from patchkit.host.transport.ssh_common import SSHTarget
from tests.sshd import Fleet, Testbed, fleet, ssh_agent, sshd_root, testbed  # noqa: F401 - pytest fixtures

pytestmark = pytest.mark.timeout(60)

SIGNED, QUERY, NONE = ("publickey", True), ("publickey", False), ("none", False)


@pytest.fixture
def requests(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, bool]]]:
    """The login requests asyncssh sends, in order: (method, signed)."""
    from asyncssh.connection import SSHClientConnection

    sent: list[tuple[str, bool]] = []
    real = SSHClientConnection.send_userauth_request

    async def recorded(self: Any, method: bytes, *args: bytes, key: Any = None, trivial: bool = True) -> None:
        sent.append((method.decode(), key is not None))
        await real(self, method, *args, key=key, trivial=trivial)

    monkeypatch.setattr(SSHClientConnection, "send_userauth_request", recorded)
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    yield sent


def log_in(fleet: Fleet, known: Path, **target: Any) -> None:
    """patchkit's SSH transport, logged in to gpu-1 (then closed)."""
    async def go() -> None:
        transport = SSHTransport(SSHTarget(name="gpu-1", address="127.0.0.1", port=fleet.servers[0].port,
                                           user="root", known_hosts=str(known), attempts=1, **target))
        try:
            await transport._connection()
        finally:
            await transport.close()

    asyncio.run(go())


@pytest.fixture
def known(fleet: Fleet, sshd_root: Path) -> Path:
    return fleet.write_known_hosts(sshd_root / "auth_known_hosts", fleet.servers[:1])


def test_installed_once_on_this_asyncssh() -> None:
    # False here means asyncssh's internals moved: the login is asyncssh's own again
    assert local_keys_sign_first() and local_keys_sign_first()


def test_a_key_from_a_file_logs_in_with_one_request_where_asyncssh_sends_three(
        fleet: Fleet, known: Path, requests: list[tuple[str, bool]]) -> None:
    log_in(fleet, known, identity_file=str(fleet.client_key))
    assert requests == [SIGNED]
    requests.clear()
    with pytest.MonkeyPatch.context() as asyncssh_alone:
        from asyncssh.auth import _ClientPublicKeyAuth

        asyncssh_alone.setattr(_ClientPublicKeyAuth, "_start", _ClientPublicKeyAuth._start.__wrapped__)
        asyncssh_alone.setattr(ssh_module, "prefer_public_key", lambda conn: None)
        log_in(fleet, known, identity_file=str(fleet.client_key))
    assert requests == [NONE, QUERY, SIGNED]


def test_a_refused_key_then_the_accepted_one(fleet: Fleet, known: Path, requests: list[tuple[str, bool]],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The refused key's signed request is answered as its query would have been; the next is tried."""
    stranger = asyncssh.load_keypairs([asyncssh.generate_private_key("ssh-ed25519")])
    keys = [*stranger, *asyncssh.load_keypairs([str(fleet.client_key)])]
    monkeypatch.setattr(ssh_module, "_identity_keys", lambda path: keys)
    log_in(fleet, known, identity_file="both-keys")
    assert requests == [SIGNED, SIGNED]


def test_only_refused_keys_fail_as_before(fleet: Fleet, known: Path, requests: list[tuple[str, bool]],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    stranger = asyncssh.load_keypairs([asyncssh.generate_private_key("ssh-ed25519")])
    monkeypatch.setattr(ssh_module, "_identity_keys", lambda path: stranger)
    with pytest.raises(HostError, match=r"authentication failed as root: .*keys tried"):
        log_in(fleet, known, identity_file="a-stranger")
    assert requests == [SIGNED]  # the failure's list of methods replaces `none`, as `none`'s answer would


def test_an_agents_key_is_queried_before_it_is_asked_to_sign(fleet: Fleet, known: Path, ssh_agent: str,
                                                              requests: list[tuple[str, bool]],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """An ssh-agent may ask its user before it signs: its key is never asked in vain."""
    monkeypatch.setenv("SSH_AUTH_SOCK", ssh_agent)
    log_in(fleet, known)
    assert requests == [QUERY, SIGNED]


def test_preferred_authentications_in_the_config_keep_asyncssh_s_order(
        fleet: Fleet, known: Path, requests: list[tuple[str, bool]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text("PreferredAuthentications publickey,password\n")
    monkeypatch.setenv("HOME", str(home))
    log_in(fleet, known, identity_file=str(fleet.client_key))
    assert requests == [NONE, SIGNED]


def test_which_keys_sign_at_once() -> None:
    from asyncssh.public_key import SSHLocalKeyPair

    local = asyncssh.load_keypairs([asyncssh.generate_private_key("ssh-ed25519")])[0]
    assert signs_in_process(local, SSHLocalKeyPair)

    class Agentish(SSHLocalKeyPair):  # any other holder of a key: queried first
        pass

    assert not signs_in_process(Agentish.__new__(Agentish), SSHLocalKeyPair)

    class Security:
        algorithm = b"sk-ssh-ed25519@openssh.com"

    assert not signs_in_process(Security(), Security)
