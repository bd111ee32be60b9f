"""asyncssh's bulk sends under AEAD ciphers without two costs that buy nothing there.

1. An SSH_MSG_IGNORE packet before every packet. `SSHConnection.send_packet` sends an empty
   IGNORE ahead of each non-key-exchange packet once encryption is on: the countermeasure of
   RFC 4251 section 9.3.1 against the chosen-plaintext attack on CBC mode, whose next IV is
   the last ciphertext block and so known to an eavesdropper. AEAD ciphers take no IV from
   the data: AES-GCM's nonce is a counter of the key exchange's IV (RFC 5647) and
   chacha20-poly1305@openssh.com's is the packet's sequence number, unique per packet and
   key, and an empty IGNORE hides no length either. OpenSSH sends none. In a deploy the IGNORE
   is every other packet (one per 32 KiB of data): a second packet's framing, random padding,
   encryption and log call, and one more packet for sshd to decrypt. Only under those
   ciphers (the exact classes asyncssh uses for them) is that IGNORE left out; under every
   other cipher, and every IGNORE asked for explicitly, asyncssh sends what it sent before.

2. An AES key set-up per packet. asyncssh's `GCMCipher` builds a fresh `AESGCM(key)` for
   every packet it seals or opens (a key schedule and an OpenSSL context each time). The
   key of a `GCMCipher` never changes (a rekey makes new ciphers), so one `AESGCM` per
   cipher object does the same work once; nonce, header and output are asyncssh's own.

asyncssh has no public hook for either: the class methods are wrapped once, and only when
asyncssh's layout is the one this was written for (else nothing changes and False is
returned; tests/ssh/test_asyncssh_aead.py then fails, so an asyncssh upgrade is noticed).
"""

from __future__ import annotations

from typing import Any

INSTALLED = "patchkit_aead"
OUTER = "_patchkit_sending"  # set on a connection while asyncssh's send_packet runs for one packet
AEAD = "_patchkit_aesgcm"  # a GCMCipher's one AESGCM object
EMPTY_STRING = b"\0\0\0\0"  # String(b""): the payload of asyncssh's inserted IGNORE


def leaner_aead_sends() -> bool:
    return _no_ignore_under_aead() and _one_aesgcm_per_key()


def _no_ignore_under_aead() -> bool:
    try:
        from asyncssh.connection import SSHConnection
        from asyncssh.constants import MSG_IGNORE
        from asyncssh.encryption import ChachaEncryption, GCMEncryption
    except ImportError:  # pragma: no cover - another asyncssh layout: leave it alone
        return False
    original = getattr(SSHConnection, "send_packet", None)
    if original is None:  # pragma: no cover
        return False
    if getattr(original, INSTALLED, False):
        return True
    aead_types = (GCMEncryption, ChachaEncryption)

    def send_packet(self: Any, pkttype: int, *args: bytes, handler: Any = None) -> None:
        if self.__dict__.get(OUTER):  # a packet asyncssh sends while sending another
            if pkttype == MSG_IGNORE and args == (EMPTY_STRING,) and type(self._send_encryption) in aead_types:
                return
            original(self, pkttype, *args, handler=handler)
            return
        self.__dict__[OUTER] = True
        try:
            original(self, pkttype, *args, handler=handler)
        finally:
            self.__dict__[OUTER] = False

    setattr(send_packet, INSTALLED, True)
    SSHConnection.send_packet = send_packet  # type: ignore[method-assign]
    return True


def _one_aesgcm_per_key() -> bool:
    try:
        from asyncssh.crypto.cipher import _GCM_MAC_SIZE, GCMCipher
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:  # pragma: no cover - another asyncssh layout: leave it alone
        return False
    if getattr(GCMCipher.encrypt_and_sign, INSTALLED, False):
        return True
    if not all(callable(getattr(GCMCipher, name, None)) for name in ("_update_iv", "verify_and_decrypt")):
        return False  # pragma: no cover

    def aead(self: Any) -> AESGCM:
        cipher: AESGCM | None = self.__dict__.get(AEAD)
        if cipher is None:
            cipher = self.__dict__[AEAD] = AESGCM(self._key)
        return cipher

    def encrypt_and_sign(self: Any, header: bytes, data: bytes) -> tuple[bytes, bytes]:
        sealed = aead(self).encrypt(self._iv, data, header)
        self._update_iv()
        return header + sealed[:-_GCM_MAC_SIZE], sealed[-_GCM_MAC_SIZE:]

    def verify_and_decrypt(self: Any, header: bytes, data: bytes, mac: bytes) -> bytes | None:
        try:
            opened: bytes | None = aead(self).decrypt(self._iv, data + mac, header)
        except InvalidTag:
            opened = None
        self._update_iv()
        return opened

    for function in (encrypt_and_sign, verify_and_decrypt):
        setattr(function, INSTALLED, True)
    GCMCipher.encrypt_and_sign = encrypt_and_sign  # type: ignore[method-assign]
    GCMCipher.verify_and_decrypt = verify_and_decrypt  # type: ignore[method-assign]
    return True
