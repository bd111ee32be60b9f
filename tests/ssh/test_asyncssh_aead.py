"""asyncssh under AEAD ciphers: no SSH_MSG_IGNORE before each packet, one AESGCM per key.
Counted on a real sshd: the packets a 4 MiB stream takes under each cipher, and the bytes
sealed checked against AES-GCM as RFC 5647 defines it for SSH."""

from __future__ import annotations

import asyncio
import hashlib
import os
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

import patchkit.host.transport.ssh  # noqa: F401 - installs the adjustment, as every SSH run does
from patchkit.host.transport.asyncssh_aead import leaner_aead_sends
from patchkit.host.transport.asyncssh_import import asyncssh
from tests.sshd import Fleet, fleet, sshd_root  # noqa: F401 - pytest fixtures

DATA = bytes(range(256)) * (16 << 10)  # 4 MiB: 128 channel-data packets of sshd's 32 KiB maximum
DATA_PACKETS = len(DATA) // 32768


def test_installed_once_on_this_asyncssh() -> None:
    # False here means asyncssh's internals moved: the adjustment no longer applies
    assert leaner_aead_sends() and leaner_aead_sends()


def test_gcm_seals_and_opens_as_rfc_5647_says_with_one_key_setup_per_cipher() -> None:
    from asyncssh.crypto.cipher import GCMCipher

    key, iv = os.urandom(16), os.urandom(12)
    sender, receiver = GCMCipher("aes128-gcm", key, iv), GCMCipher("aes128-gcm", key, iv)
    fixed, counter = iv[:4], int.from_bytes(iv[4:], "big")
    for n, size in enumerate((16, 32768, 48, 32768)):
        header, body = (size + 4).to_bytes(4, "big"), os.urandom(size)
        packet, tag = sender.encrypt_and_sign(header, body)
        nonce = fixed + ((counter + n) & (2**64 - 1)).to_bytes(8, "big")  # the invocation counter, per packet
        assert packet + tag == header + AESGCM(key).encrypt(nonce, body, header)
        assert receiver.verify_and_decrypt(header, packet[4:], tag) == body
    header, body = b"\0\0\0\x14", os.urandom(16)
    packet, tag = sender.encrypt_and_sign(header, body)
    assert receiver.verify_and_decrypt(header, packet[4:], bytes(16)) is None  # a wrong tag is refused
    assert sender.__dict__["_patchkit_aesgcm"] is sender.__dict__["_patchkit_aesgcm"]  # built once, kept


def packets_for_stream(fleet: Fleet, known: Path, cipher: str) -> tuple[int, str]:
    """SSH packets the client sent while streaming DATA into a remote sha256, and the digest."""
    server = fleet.servers[0]

    async def go() -> tuple[int, str]:
        async with asyncssh.connect("127.0.0.1", server.port, username="root", client_keys=[str(fleet.client_key)],
                                    known_hosts=str(known), encryption_algs=[cipher], config=None) as conn:
            assert conn.get_extra_info("send_cipher") == cipher
            process = await conn.create_process(
                f"{sys.executable} -c 'import hashlib, sys; "
                f"print(hashlib.sha256(sys.stdin.buffer.read({len(DATA)})).hexdigest())'", encoding=None)
            await asyncio.sleep(0.2)  # the session's start-up packets are not counted
            before = conn._send_seq
            for start in range(0, len(DATA), 1 << 20):
                process.stdin.write(DATA[start:start + (1 << 20)])
                await process.stdin.drain()
            digest = (await process.stdout.readline()).decode().strip()
            sent = conn._send_seq - before
            process.close()
            return sent, digest

    return asyncio.run(go())


@pytest.mark.parametrize("cipher", ["aes128-gcm@openssh.com", "aes256-gcm@openssh.com",
                                    "chacha20-poly1305@openssh.com"])
def test_aead_streams_one_packet_per_32_kib_and_every_byte_arrives(fleet: Fleet, sshd_root: Path,
                                                                   cipher: str) -> None:
    known = fleet.write_known_hosts(sshd_root / "aead_known_hosts", fleet.servers[:1])
    sent, digest = packets_for_stream(fleet, known, cipher)
    assert digest == hashlib.sha256(DATA).hexdigest()
    assert DATA_PACKETS <= sent <= DATA_PACKETS + 4, f"{sent} packets for {DATA_PACKETS} of data under {cipher}"


def test_other_ciphers_keep_asyncssh_ignore_packets(fleet: Fleet, sshd_root: Path) -> None:
    known = fleet.write_known_hosts(sshd_root / "aead_known_hosts", fleet.servers[:1])
    sent, digest = packets_for_stream(fleet, known, "aes128-ctr")
    assert digest == hashlib.sha256(DATA).hexdigest()
    assert sent >= 2 * DATA_PACKETS  # an IGNORE before each data packet, as asyncssh does
