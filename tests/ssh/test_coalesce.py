"""SSH packets written in one event-loop turn reach the socket in one write (asyncssh transport)."""

from __future__ import annotations

import asyncio
import hashlib
import socket
import sys
from asyncio import selector_events
from pathlib import Path
from typing import Any

import pytest

from patchkit.host.transport.coalesce import CoalescingTransport, coalesce_writes
from tests.sshd import Fleet, fleet, sshd_root  # noqa: F401 - pytest fixtures


class Collect(asyncio.Protocol):
    def __init__(self) -> None:
        self.data = bytearray()
        self.closed = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        self.data += data

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set_result(None)


def test_writes_of_one_turn_arrive_once_in_order_and_close_sends_what_is_pending() -> None:
    async def main() -> tuple[bytes, bytes, list[int]]:
        loop = asyncio.get_running_loop()
        left, right = socket.socketpair()
        transport, _ = await loop.create_connection(asyncio.Protocol, sock=left)
        _, receiver = await loop.create_connection(Collect, sock=right)
        sizes: list[int] = []
        real_write = transport.write

        def counted(data: bytes) -> None:
            sizes.append(len(data))
            real_write(data)

        transport.write = counted  # type: ignore[method-assign]
        wrapped = CoalescingTransport(transport, loop)
        parts = [bytes([i]) * 1000 for i in range(10)]
        for part in parts:
            wrapped.write(part)
        assert sizes == [] and wrapped.get_write_buffer_size() == 10_000  # nothing written yet in this turn
        await asyncio.sleep(0)
        first_turn = list(sizes)
        wrapped.write(b"last words")
        wrapped.close()  # in the same turn: handed to the socket's transport at once, before it closes
        assert sizes[-1] == len(b"last words")
        await asyncio.wait_for(receiver.closed, 5)
        return bytes(receiver.data), b"".join(parts) + b"last words", first_turn

    got, want, first_turn = asyncio.run(main())
    assert got == want
    assert first_turn == [10_000]


def test_an_asyncssh_connection_writes_far_fewer_times_than_it_sends_packets(fleet: Fleet, sshd_root: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from patchkit.host.transport.ssh import SSHTransport
    from patchkit.host.transport.ssh_common import SSHTarget

    server = fleet.servers[0]
    known = sshd_root / "coalesce_known_hosts"
    fleet.write_known_hosts(known, [server])
    spec = SSHTarget(name="gpu-1", address="127.0.0.1", port=server.port, user="root",
                     identity_file=str(fleet.client_key), known_hosts=str(known))
    data = bytes(range(256)) * (16 << 12)  # 16 MiB: 512 packets of sshd's 32 KiB maximum
    writes: list[int] = []
    real_write = selector_events._SelectorSocketTransport.write

    def counted(self: Any, chunk: bytes) -> None:
        writes.append(len(chunk))
        real_write(self, chunk)

    async def go() -> tuple[str, bool]:
        transport = SSHTransport(spec)
        try:
            streams = await transport.spawn(
                [sys.executable, "-c", "import hashlib, sys; "
                 f"print(hashlib.sha256(sys.stdin.buffer.read({len(data)})).hexdigest())"])
            monkeypatch.setattr(selector_events._SelectorSocketTransport, "write", counted)
            for start in range(0, len(data), 1 << 20):
                streams.stdin.write(data[start:start + (1 << 20)])
                await streams.stdin.drain()
            digest = (await streams.stdout.readline()).decode().strip()
            monkeypatch.undo()
            again = coalesce_writes(transport._conn)  # installed once, not wrapped twice
            await streams.close()
            return digest, again
        finally:
            await transport.close()

    digest, again = asyncio.run(go())
    assert digest == hashlib.sha256(data).hexdigest()
    assert sum(writes) >= len(data)
    assert len(writes) <= 512 // 4, f"{len(writes)} socket writes for 512 packets"
    assert not again
