"""asyncssh's public-key login in one round trip instead of three.

asyncssh logs in as OpenSSH's client does: a `none` request first (its answer lists the
methods the server takes), then for each key a query without a signature (does the server
take this key?) and, once the server says yes, the same request signed. Through a 50 ms
link those are 150 ms of every run's start (bench/README.md).

1. Public key first. A connection whose methods are asyncssh's defaults (no
   PreferredAuthentications in ~/.ssh/config or the options) starts with `publickey`, then
   `none`: a server that refuses the key answers with its list of methods, as it would
   have answered `none`, and asyncssh goes on from there as before. A host where no key is
   offered goes straight to `none`, as before.
2. A key held in this process is signed at once. The query exists so that a key whose
   signature costs something is not asked to sign in vain: an ssh-agent's key (the agent
   may ask its user to confirm), a security key (`sk-*`: a touch), a PKCS#11 token. A
   private key loaded from a file (an inventory's identity_file, ~/.ssh/id_*) signs in
   microseconds, so its request goes out signed; the server accepts it or answers
   "failure" as it answers a refused query, and the next key is tried. Every other key is
   queried first, as before.

The server checks exactly what it checked before (a signed request is what a query
leads to). asyncssh has no public hook for either: `prefer_public_key` is called from the
connection's owner (host/transport/ssh.py `_Client.connection_made`), and the public-key method's
start is replaced once, only when asyncssh's layout is the one this was written for (else
nothing changes and False is returned; tests/ssh/test_asyncssh_auth.py then fails, so an
asyncssh upgrade is noticed).
"""

from __future__ import annotations

from typing import Any

INSTALLED = "patchkit_signed_first"


def prefer_public_key(conn: Any) -> None:
    """Before the login starts: `publickey` first, then `none` (asyncssh's defaults only)."""
    methods = getattr(conn, "_auth_methods", None)
    preferred = getattr(conn, "_preferred_auth", None)
    if methods != [b"none"] or not preferred or b"publickey" not in preferred:
        return
    from asyncssh.auth import get_supported_client_auth_methods

    if list(preferred) == list(get_supported_client_auth_methods()):  # nothing configured
        conn._auth_methods = [b"publickey", b"none"]


def local_keys_sign_first() -> bool:
    try:
        from asyncssh.auth import _ClientPublicKeyAuth
        from asyncssh.packet import Boolean, String
        from asyncssh.public_key import SSHLocalKeyPair
    except ImportError:  # pragma: no cover - another asyncssh layout: leave it alone
        return False
    original = getattr(_ClientPublicKeyAuth, "_start", None)
    if original is None or not callable(getattr(_ClientPublicKeyAuth, "_send_signed_request", None)):
        return False  # pragma: no cover
    if getattr(original, INSTALLED, False):
        return True

    async def _start(self: Any) -> None:
        self._keypair = await self._conn.public_key_auth_requested()
        if self._keypair is None:
            self._conn.try_next_auth(next_method=True)
            return
        if signs_in_process(self._keypair, SSHLocalKeyPair):
            await self._send_signed_request()
            return
        await self.send_request(Boolean(False), String(self._keypair.algorithm), String(self._keypair.public_data))

    setattr(_start, INSTALLED, True)
    _start.__wrapped__ = original  # type: ignore[attr-defined]
    _ClientPublicKeyAuth._start = _start  # type: ignore[method-assign]
    return True


def signs_in_process(keypair: Any, local_type: type) -> bool:
    """A private key this process holds (not an agent's, a token's or a security key)."""
    algorithm = bytes(getattr(keypair, "algorithm", b""))
    return type(keypair) is local_type and not algorithm.startswith(b"sk-")
