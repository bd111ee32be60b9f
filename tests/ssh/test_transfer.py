"""The host side of a deploy refuses bytes that do not hash to what was sent."""

from __future__ import annotations

import asyncio
import errno
import hashlib
import io
import os
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from patchkit.host.agent.client import AgentClient
from patchkit.host.agent.protocol import RECEIVE_FILE
from patchkit.base.errors import HostError
from patchkit.host.transport.local import LocalTransport
from patchkit.host.transport.openssh import _OpenSSHStreams
from tests.helpers import host_agent

transfer = host_agent("transfer")  # the deploy extension in the agent's namespace, as on a host


def receive(tmp_path: Path, data: bytes, expected: str) -> dict:
    backup = tmp_path / "state" / "backups" / "run" / "step" / "w.bin"  # the product's shape: STATE/backups/RUN/STEP/rel
    return transfer.op_receive_file(io.BytesIO(data), str(tmp_path / "dest"), "w.bin", 0, len(data), expected,
                                    0o644, str(backup), str(tmp_path / "cache.json"))


def test_bytes_that_arrive_damaged_are_discarded(tmp_path: Path) -> None:
    good = b"weights" * 1000
    with pytest.raises(transfer.Refused, match="arrived with sha256"):
        receive(tmp_path, good[:-1] + b"X", hashlib.sha256(good).hexdigest())
    assert not (tmp_path / "dest" / "w.bin").exists()
    assert not (tmp_path / "dest" / ".w.bin.patchkit-part").exists()


def test_intact_bytes_land_under_the_final_name(tmp_path: Path) -> None:
    good = b"weights" * 1000
    done = receive(tmp_path, good, hashlib.sha256(good).hexdigest())
    assert (tmp_path / "dest" / "w.bin").read_bytes() == good and done["sha256"] == hashlib.sha256(good).hexdigest()


def test_a_path_that_leaves_dest_is_refused(tmp_path: Path) -> None:
    with pytest.raises(transfer.Refused, match="leaves the destination"):
        transfer.op_receive_file(io.BytesIO(b""), str(tmp_path / "dest"), "../escape", 0, 0, "x", 0o644,
                                 str(tmp_path / "b"), str(tmp_path / "c.json"))


class Trickle(io.BytesIO):
    """stdin that records how much of the stream the agent had read, for the flusher's fake fdatasync."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.delivered = 0

    def read(self, n: int = -1) -> bytes:
        chunk = super().read(n)
        self.delivered += len(chunk)
        return chunk


def test_data_is_written_back_while_the_rest_still_arrives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    chunk = 64 << 10
    monkeypatch.setattr(transfer, "CHUNK", chunk)
    monkeypatch.setattr(transfer, "FLUSH_EVERY", 2 * chunk)
    data = os.urandom(32 * chunk)
    flushed = threading.Event()

    class HeldBack(Trickle):
        """Delivers the second half only once a write-back has run (or after 10 s without one):
        the check below cannot depend on how the threads happen to be scheduled."""

        held = False

        def read(self, n: int = -1) -> bytes:
            if self.delivered >= len(data) // 2 and not self.held:
                self.held = True
                flushed.wait(10)
            return super().read(n)

    stdin = HeldBack(data)
    flushed_at = []
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        flushed_at.append((stdin.delivered, os.fstat(fd).st_size))
        real(fd)
        flushed.set()

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    done = transfer.op_receive_file(stdin, str(tmp_path / "dest"), "w.bin", 0, len(data),
                                    hashlib.sha256(data).hexdigest(), 0o644, str(tmp_path / "b"),
                                    str(tmp_path / "c.json"))
    assert (tmp_path / "dest" / "w.bin").read_bytes() == data and done["sha256"] == hashlib.sha256(data).hexdigest()
    assert flushed_at, "no write-back before the end of the stream"
    assert flushed_at[0][0] < len(data), flushed_at  # the first write-back ran while data still arrived
    assert all(size >= 2 * chunk for _, size in flushed_at), flushed_at


def test_a_failed_write_back_keeps_the_file_from_its_final_name(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transfer, "FLUSH_EVERY", 1 << 20)
    data = os.urandom(4 << 20)

    def fdatasync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    with pytest.raises(OSError, match="Input/output error"):
        receive(tmp_path, data, hashlib.sha256(data).hexdigest())
    assert not (tmp_path / "dest" / "w.bin").exists()


def test_a_write_back_in_flight_when_the_stream_breaks_finishes_on_its_own_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transfer, "FLUSH_EVERY", 1 << 20)
    data = os.urandom(3 << 20)
    seen = []
    real = os.fdatasync

    def slow_fdatasync(fd: int) -> None:
        time.sleep(0.3)  # still running when the short stream has ended
        seen.append(os.fstat(fd).st_ino)  # the part file's fd is still open
        real(fd)

    monkeypatch.setattr(os, "fdatasync", slow_fdatasync)
    with pytest.raises(transfer.Refused, match="stream ended after"):
        transfer.op_receive_file(io.BytesIO(data), str(tmp_path / "dest"), "w.bin", 0, len(data) + 1,
                                 "0" * 64, 0o644, str(tmp_path / "b"), str(tmp_path / "c.json"))
    part = tmp_path / "dest" / ".w.bin.patchkit-part"
    assert seen and set(seen) == {part.stat().st_ino}
    assert part.read_bytes() == data and not (tmp_path / "dest" / "w.bin").exists()


# ---------------------------------------------------------------- the hasher thread


def hasher_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "patchkit-hasher"]


def test_the_hash_covers_every_chunk_in_order_also_on_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transfer, "CHUNK", 4096)
    monkeypatch.setattr(transfer, "HASH_QUEUE", 1)
    data = os.urandom(300 * 4096 + 123)
    part = tmp_path / "dest" / ".w.bin.patchkit-part"
    part.parent.mkdir()
    part.write_bytes(data[:5000] + b"stale tail, cut off")
    done = transfer.op_receive_file(io.BytesIO(data[5000:]), str(tmp_path / "dest"), "w.bin", 5000,
                                    len(data) - 5000, hashlib.sha256(data).hexdigest(), 0o644,
                                    str(tmp_path / "b"), str(tmp_path / "c.json"))
    assert done["sha256"] == hashlib.sha256(data).hexdigest()
    assert (tmp_path / "dest" / "w.bin").read_bytes() == data and not part.exists()
    # two chunks swapped: every byte arrives, in the wrong order, and is refused
    swapped = data[4096:8192] + data[:4096] + data[8192:]
    with pytest.raises(transfer.Refused, match="arrived with sha256"):
        receive(tmp_path, swapped, hashlib.sha256(data).hexdigest())
    assert not hasher_threads()


def test_the_hasher_thread_ends_when_the_stream_breaks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transfer, "CHUNK", 4096)
    data = os.urandom(50 * 4096)
    with pytest.raises(transfer.Refused, match="stream ended after"):
        transfer.op_receive_file(io.BytesIO(data), str(tmp_path / "dest"), "w.bin", 0, len(data) + 1,
                                 "0" * 64, 0o644, str(tmp_path / "b"), str(tmp_path / "c.json"))
    assert not hasher_threads()
    assert (tmp_path / "dest" / ".w.bin.patchkit-part").read_bytes() == data


def test_stdin_is_read_on_while_a_chunk_is_hashed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A slow hash does not hold up reading: the agent keeps draining its stdin (up to the queue)."""
    monkeypatch.setattr(transfer, "CHUNK", 4096)
    data = os.urandom(20 * 4096)
    stdin = Trickle(data)
    ahead = []
    real = hashlib.sha256

    class SlowSha256:
        def __init__(self) -> None:
            self._h = real()
            self.hashed = 0

        def update(self, chunk: bytes) -> None:
            time.sleep(0.02)
            self.hashed += len(chunk)
            ahead.append(stdin.delivered - self.hashed)
            self._h.update(chunk)

        def hexdigest(self) -> str:
            return self._h.hexdigest()

    expected = hashlib.sha256(data).hexdigest()
    monkeypatch.setattr(transfer.hashlib, "sha256", SlowSha256)
    done = transfer.op_receive_file(stdin, str(tmp_path / "dest"), "w.bin", 0, len(data), expected, 0o644,
                                    str(tmp_path / "b"), str(tmp_path / "c.json"))
    assert done["sha256"] == expected
    assert max(ahead) >= transfer.HASH_QUEUE * 4096, ahead  # reading ran ahead of the hash
    assert max(ahead) <= (transfer.HASH_QUEUE + 2) * 4096, ahead  # but only by the bounded queue


# ---------------------------------------------------------------- splicing into ssh's stdin (OpenSSH transport)


def local_streams(out: Path, ready: bool) -> _OpenSSHStreams:
    """An _OpenSSHStreams around a local `sh` in place of ssh, copying its stdin to `out`."""
    transport = SimpleNamespace(target=SimpleNamespace(name="local"), attempts=1, _live=set())
    script = ("echo ready; " if ready else "") + f"exec cat > {out}"
    return _OpenSSHStreams(transport, ["sh", "-c", script], None)  # type: ignore[arg-type]


def test_file_bytes_are_spliced_into_ssh_after_what_was_written_before(tmp_path: Path) -> None:
    src = tmp_path / "src.bin"
    data = os.urandom((5 << 20) + 4321)
    src.write_bytes(data)
    head = os.urandom(3 << 20)  # more than the pipe takes at once: part of it waits in asyncio's buffer

    async def main() -> tuple[list[int], int, Exception | None]:
        streams = local_streams(tmp_path / "out", ready=True)
        await streams.start()
        assert await streams.readline() == b"ready\n"
        moved: list[int] = []
        real = streams.write_file

        async def spy(fd: int, offset: int, count: int) -> int | None:
            n = await real(fd, offset, count)
            moved.append(n)
            return n

        streams.write_file = spy  # type: ignore[method-assign]
        client = AgentClient(streams, "local", "0" * 16)  # type: ignore[arg-type]
        streams.write(head)
        await client._stream(src, 777, len(data) - 777)
        shrank = None
        try:
            await client._stream(src, len(data) - 10, 20)
        except HostError as exc:
            shrank = exc
        await streams.close()
        return moved, client.bytes_sent, shrank

    moved, sent, shrank = asyncio.run(main())
    assert (tmp_path / "out").read_bytes() == head + data[777:] + data[-10:]
    assert all(n is not None for n in moved) and sum(moved) == len(data) - 777 + 10, moved
    assert sent == len(data) - 777 + 10
    assert shrank is not None and "shrank" in str(shrank)


def test_before_ssh_answers_file_bytes_are_written_and_kept_for_a_retry(tmp_path: Path) -> None:
    src = tmp_path / "src.bin"
    data = os.urandom(100_000)
    src.write_bytes(data)

    async def main() -> bytes:
        streams = local_streams(tmp_path / "out", ready=False)
        await streams.start()
        assert await streams.write_file(os.open(src, os.O_RDONLY), 0, 10) is None
        client = AgentClient(streams, "local", "0" * 16)  # type: ignore[arg-type]
        await client._stream(src, 0, len(data))
        kept = bytes(streams._replay or b"")
        await streams.close()
        return kept

    assert asyncio.run(main()) == data
    assert (tmp_path / "out").read_bytes() == data


# ---------------------------------------------------------------- splice(2) from the agent's stdin pipe (host side)


def piped_stdin(stream: bytes, close: bool = True) -> io.BufferedReader:
    """A real pipe carrying `stream` (fed by a thread, as sshd would), opened like the agent's stdin."""
    read_end, write_end = os.pipe()

    def feed() -> None:
        with os.fdopen(write_end, "wb") as w:
            w.write(stream)

    threading.Thread(target=feed, daemon=True).start()
    return os.fdopen(read_end, "rb")


@pytest.fixture
def spliced(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Byte counts os.splice moved (the test fails if the agent fell back to read/write)."""
    if not hasattr(os, "splice"):
        pytest.fail("os.splice is missing: the host agent's splice path cannot be tested on Python < 3.10")
    moved: list[int] = []
    real = os.splice

    def spy(src: int, dst: int, count: int, *args: object) -> int:
        n = real(src, dst, count, *args)
        moved.append(n)
        return n

    monkeypatch.setattr(os, "splice", spy)
    return moved


def test_from_a_pipe_the_bytes_are_spliced_and_the_next_request_is_read_intact(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spliced: list[int]) -> None:
    monkeypatch.setattr(transfer, "SPLICE_HASH_STEP", 1 << 20)  # several hasher requests, one short tail
    data = os.urandom((5 << 20) + 12345)
    request = b'{"id": 7, "op": "receive_file"}\n'
    stdin = piped_stdin(request + data + b'{"id": 8, "op": "hello"}\n')
    assert stdin.readline() == request  # the way the agent reads a request: part of the data is now buffered
    done = transfer.op_receive_file(stdin, str(tmp_path / "dest"), "w.bin", 0, len(data),
                                    hashlib.sha256(data).hexdigest(), 0o640, str(tmp_path / "b"),
                                    str(tmp_path / "c.json"))
    assert done["sha256"] == hashlib.sha256(data).hexdigest()
    assert (tmp_path / "dest" / "w.bin").read_bytes() == data
    assert sum(spliced) > len(data) // 2, spliced  # most of it never went through Python
    assert stdin.readline() == b'{"id": 8, "op": "hello"}\n'  # not one byte too many was taken


def test_spliced_bytes_that_do_not_hash_right_are_discarded(tmp_path: Path, spliced: list[int]) -> None:
    data = os.urandom(3 << 20)
    damaged = data[:-1] + bytes([data[-1] ^ 1])
    with pytest.raises(transfer.Refused, match="arrived with sha256"):
        transfer.op_receive_file(piped_stdin(damaged), str(tmp_path / "dest"), "w.bin", 0, len(data),
                                 hashlib.sha256(data).hexdigest(), 0o644, str(tmp_path / "b"),
                                 str(tmp_path / "c.json"))
    assert spliced and not (tmp_path / "dest").joinpath("w.bin").exists()
    assert not (tmp_path / "dest" / ".w.bin.patchkit-part").exists()


def test_a_spliced_transfer_cut_off_keeps_its_part_and_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               spliced: list[int]) -> None:
    monkeypatch.setattr(transfer, "SPLICE_HASH_STEP", 3 << 20)  # on resume: one hasher request mid-way, one tail
    data = os.urandom((6 << 20) + 99)
    cut = (2 << 20) + 7
    with pytest.raises(transfer.Refused, match=f"stream ended after {cut} of {len(data)}"):
        transfer.op_receive_file(piped_stdin(data[:cut]), str(tmp_path / "dest"), "w.bin", 0, len(data),
                                 hashlib.sha256(data).hexdigest(), 0o644, str(tmp_path / "b"),
                                 str(tmp_path / "c.json"))
    part = tmp_path / "dest" / ".w.bin.patchkit-part"
    assert part.read_bytes() == data[:cut]
    done = transfer.op_receive_file(piped_stdin(data[cut:]), str(tmp_path / "dest"), "w.bin", cut,
                                    len(data) - cut, hashlib.sha256(data).hexdigest(), 0o644,
                                    str(tmp_path / "b"), str(tmp_path / "c.json"))
    assert done["sha256"] == hashlib.sha256(data).hexdigest() and not part.exists()
    assert (tmp_path / "dest" / "w.bin").read_bytes() == data
    assert not hasher_threads()


def test_a_file_system_that_cannot_splice_gets_the_bytes_written(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    def no_splice(*args: object) -> int:
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(os, "splice", no_splice)
    data = os.urandom((2 << 20) + 5)
    done = transfer.op_receive_file(piped_stdin(data), str(tmp_path / "dest"), "w.bin", 0, len(data),
                                    hashlib.sha256(data).hexdigest(), 0o644, str(tmp_path / "b"),
                                    str(tmp_path / "c.json"))
    assert done["sha256"] == hashlib.sha256(data).hexdigest()
    assert (tmp_path / "dest" / "w.bin").read_bytes() == data


def test_where_files_cannot_be_mapped_the_spliced_bytes_are_read_back_for_the_hash(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spliced: list[int]) -> None:
    def no_mmap(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENODEV, "No such device")

    monkeypatch.setattr(transfer.mmap, "mmap", no_mmap)
    monkeypatch.setattr(transfer, "SPLICE_HASH_STEP", 1 << 20)
    data = os.urandom((3 << 20) + 333)
    done = transfer.op_receive_file(piped_stdin(data), str(tmp_path / "dest"), "w.bin", 0, len(data),
                                    hashlib.sha256(data).hexdigest(), 0o644, str(tmp_path / "b"),
                                    str(tmp_path / "c.json"))
    assert done["sha256"] == hashlib.sha256(data).hexdigest() and spliced
    damaged = data[:-1] + bytes([data[-1] ^ 1])
    with pytest.raises(transfer.Refused, match="arrived with sha256"):
        transfer.op_receive_file(piped_stdin(damaged), str(tmp_path / "dest"), "x.bin", 0, len(data),
                                 hashlib.sha256(data).hexdigest(), 0o644, str(tmp_path / "b"),
                                 str(tmp_path / "c.json"))


# ---------------------------------------------------------------- a failed receive still takes its bytes


def test_pages_are_dropped_behind_the_stream_only_once_on_disk_and_hashed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spliced: list[int]) -> None:
    """The page cache is handed back as the file arrives (a deploy does not keep gigabytes of it),
    never ahead of the fdatasync or of the hash (a slow hasher here): every range advised away
    was written back and hashed before, and the file is intact."""
    monkeypatch.setattr(transfer, "FLUSH_EVERY", 1 << 20)
    monkeypatch.setattr(transfer, "SPLICE_HASH_STEP", 1 << 20)
    data = os.urandom((8 << 20) + 777)
    expected = hashlib.sha256(data).hexdigest()
    progress = {"hashed": 0, "synced": 0}
    real_sha256, real_fdatasync, real_fadvise = hashlib.sha256, os.fdatasync, os.posix_fadvise

    class SlowSha256:
        def __init__(self) -> None:
            self._h = real_sha256()

        def update(self, chunk: bytes) -> None:
            time.sleep(0.01)
            self._h.update(chunk)
            progress["hashed"] += len(chunk)

        def hexdigest(self) -> str:
            return self._h.hexdigest()

    def fdatasync(fd: int) -> None:
        size = os.fstat(fd).st_size
        real_fdatasync(fd)
        progress["synced"] = max(progress["synced"], size)

    dropped: list[tuple[int, int, int, int]] = []

    def fadvise(fd: int, offset: int, length: int, advice: int) -> None:
        if advice == os.POSIX_FADV_DONTNEED:
            dropped.append((offset, offset + length, progress["synced"], progress["hashed"]))
        real_fadvise(fd, offset, length, advice)

    monkeypatch.setattr(transfer.hashlib, "sha256", SlowSha256)
    monkeypatch.setattr(os, "fdatasync", fdatasync)
    monkeypatch.setattr(os, "posix_fadvise", fadvise)
    done = transfer.op_receive_file(piped_stdin(data), str(tmp_path / "dest"), "w.bin", 0, len(data), expected,
                                    0o644, str(tmp_path / "b"), str(tmp_path / "c.json"))
    assert done["sha256"] == expected
    assert (tmp_path / "dest" / "w.bin").read_bytes() == data
    assert spliced and len(dropped) >= 2, dropped  # while the stream ran, not once at the end
    assert dropped[0][0] == 0 and all(a[1] == b[0] for a, b in zip(dropped, dropped[1:])), dropped  # in order, no gap
    assert all(end <= synced and end <= hashed for _, end, synced, hashed in dropped), dropped
    assert dropped[-1][1] >= len(data) - 3 * (1 << 20), dropped  # all but the last write-back's worth


def test_without_posix_fadvise_a_deploy_lands_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      spliced: list[int]) -> None:
    monkeypatch.setattr(transfer, "FLUSH_EVERY", 1 << 20)
    monkeypatch.setattr(transfer, "_DONTNEED", None)  # as on hosts whose Python has no os.posix_fadvise
    data = os.urandom(3 << 20)
    done = transfer.op_receive_file(piped_stdin(data), str(tmp_path / "dest"), "w.bin", 0, len(data),
                                    hashlib.sha256(data).hexdigest(), 0o644, str(tmp_path / "b"),
                                    str(tmp_path / "c.json"))
    assert done["sha256"] == hashlib.sha256(data).hexdigest() and (tmp_path / "dest" / "w.bin").read_bytes() == data


def test_a_receive_that_fails_mid_stream_still_takes_all_its_bytes(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk fills up half way: the error is reported and the next request line is intact."""
    real = os.splice
    calls = []

    def splice_until_full(src: int, dst: int, count: int, *args: object) -> int:
        calls.append(count)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(src, dst, count, *args)

    monkeypatch.setattr(os, "splice", splice_until_full)
    data = os.urandom(4 << 20)
    stdin = piped_stdin(data + b'{"id": 2, "op": "hello"}\n')
    with pytest.raises(OSError, match="No space left"):
        transfer.op_receive_file(stdin, str(tmp_path / "dest"), "w.bin", 0, len(data),
                                 hashlib.sha256(data).hexdigest(), 0o644, str(tmp_path / "b"),
                                 str(tmp_path / "c.json"))
    assert stdin.readline() == b'{"id": 2, "op": "hello"}\n'
    assert not (tmp_path / "dest" / "w.bin").exists()


def test_a_file_refused_before_its_bytes_are_read_does_not_derail_the_files_behind_it(tmp_path: Path) -> None:
    """Through the real agent: the first file's folder cannot be made (a file is in the way),
    the second, sent right behind it without waiting, lands."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file\n")
    first, second = tmp_path / "first.bin", tmp_path / "second.bin"
    first.write_bytes(os.urandom(3 << 20))
    second.write_bytes(os.urandom(200_000))

    async def main() -> tuple[str, dict[str, Any]]:
        transport = LocalTransport()
        agent = await AgentClient.start(transport, sys.executable, "local")
        try:
            await agent.started(sys.executable)
            sent = []
            for path, dest in ((first, blocker / "sub"), (second, tmp_path / "dest")):
                data = path.read_bytes()
                sent.append(await agent.send_file(RECEIVE_FILE({
                    "dest": str(dest), "rel": path.name, "offset": 0, "length": len(data),
                    "expected_sha256": hashlib.sha256(data).hexdigest(), "mode": 0o644,
                    "backup_path": str(tmp_path / "state" / "backups" / "run" / "step" / path.name),
                    "cache_file": str(tmp_path / "c.json"),
                }), path, 0, len(data)))
            with pytest.raises(HostError) as refused:
                await sent[0].result()
            return str(refused.value), await sent[1].result()
        finally:
            await agent.close()

    error, landed = asyncio.run(main())
    assert "not-a-folder" in error, error
    assert landed["path"] == str(tmp_path / "dest" / "second.bin")
    assert (tmp_path / "dest" / "second.bin").read_bytes() == second.read_bytes()


def test_a_manifest_whose_hashes_are_all_cached_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A no-op redeploy's manifest is read-only on the host: the hash cache is written when it
    learnt something (the first manifest, a changed file), not on every plan."""
    dest, cache = tmp_path / "dest", tmp_path / "state" / "hashcache.json"
    dest.mkdir()
    (dest / "a.bin").write_bytes(b"a" * 5000)
    saved: list[int] = []
    real = transfer._save_cache

    def counted(cache_file: str, entries: dict) -> None:
        saved.append(len(entries))
        real(cache_file, entries)

    monkeypatch.setattr(transfer, "_save_cache", counted)
    first = transfer.op_manifest(str(dest), str(cache))
    again = transfer.op_manifest(str(dest), str(cache))
    assert first == again and saved == [1], saved
    (dest / "a.bin").write_bytes(b"b" * 6000)  # changed: re-hashed, and the cache learns it
    assert transfer.op_manifest(str(dest), str(cache))["files"]["a.bin"]["size"] == 6000 and saved == [1, 1]
