"""The SSH helper's file path (host/transport/sshhelper.py `_Relay.forward_file`): a deploy's file
bytes go to the remote stdin only after every byte the CLI wrote to the stdin pipe before
them, however late the pipe's bytes arrive. End to end (tests/ssh/test_ssh_helper.py) the pipe
is nearly always drained first, so the order is pinned here, where the pipe can be held back.

The SSH side is a stand-in (`RemoteStdin` records what would go into the SSH channel): the
relay between the pipe and it is the code under test, with real pipes and a real file."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from patchkit.host.transport.sshhelper import _Relay


class RemoteStdin:
    def __init__(self) -> None:
        self.data = bytearray()
        self.eof = False

    def write(self, data: bytes) -> None:
        self.data += data

    async def drain(self) -> None:
        await asyncio.sleep(0)

    def is_closing(self) -> bool:
        return self.eof

    def write_eof(self) -> None:
        self.eof = True


class RemoteStdout:
    def __init__(self) -> None:
        self.ended = asyncio.Event()

    async def read(self, n: int) -> bytes:
        await self.ended.wait()
        return b""


class RemoteProcess:
    """What the relay uses of SSHTransport's streams."""

    def __init__(self) -> None:
        self.stdin = RemoteStdin()
        self.proc = self
        self.stdout = RemoteStdout()

    def close(self) -> None:
        self.stdout.ended.set()


class Serve:
    def __init__(self) -> None:
        self.sent: list[Any] = []

    def _send(self, message: Any) -> None:
        self.sent.append(message)


async def relay_with_pipes() -> tuple[_Relay, RemoteProcess, int, int]:
    remote = RemoteProcess()
    relay = _Relay(Serve(), 1, 1, remote)  # type: ignore[arg-type]
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    await relay.start(in_r, out_w)
    return relay, remote, in_w, out_r


def test_file_bytes_wait_for_the_stdin_bytes_written_before_them(tmp_path: Path) -> None:
    payload = tmp_path / "shard.bin"
    payload.write_bytes(b"0123456789" * 1000)

    async def scenario() -> bytes:
        relay, remote, in_w, out_r = await relay_with_pipes()
        os.write(in_w, b'{"op": "receive_file", ')  # the request, its second half held back
        with open(payload, "rb") as f:
            sending = asyncio.ensure_future(relay.forward_file(f.fileno(), 38, 10, 5000))
            await asyncio.sleep(0.05)
            assert not sending.done()  # 23 of the 38 bytes before it are relayed: the file waits
            os.write(in_w, b'"n": 1234}\n\n\n\n\n')
            moved = await asyncio.wait_for(sending, 5)
            assert moved == 5000
            os.write(in_w, b'{"op": "end"}\n')
            os.close(in_w)
            await asyncio.wait_for(relay.pumps[0], 5)
        relay.abandon()
        os.close(out_r)
        return bytes(remote.stdin.data)

    sent = asyncio.run(scenario())
    request = b'{"op": "receive_file", "n": 1234}\n\n\n\n\n'
    assert sent == request + payload.read_bytes()[10:5010] + b'{"op": "end"}\n'


def test_a_file_after_the_stdin_closed_is_refused(tmp_path: Path) -> None:
    payload = tmp_path / "shard.bin"
    payload.write_bytes(b"x" * 100)

    async def scenario() -> None:
        relay, _remote, in_w, out_r = await relay_with_pipes()
        os.write(in_w, b"half")
        os.close(in_w)  # the CLI's side is gone before the 10 bytes the file was to follow
        with open(payload, "rb") as f:
            with pytest.raises(ConnectionResetError, match="stdin is closed"):
                await asyncio.wait_for(relay.forward_file(f.fileno(), 10, 0, 100), 5)
        relay.abandon()
        os.close(out_r)

    asyncio.run(scenario())
