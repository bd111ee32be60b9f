"""The host side of a deploy refuses bytes that do not hash to what was sent."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pytest

from patchkit.agent import transfer


def receive(tmp_path: Path, data: bytes, expected: str) -> dict:
    return transfer.op_receive_file(io.BytesIO(data), str(tmp_path / "dest"), "w.bin", 0, len(data), expected,
                                    0o644, str(tmp_path / "backup" / "w.bin"), str(tmp_path / "cache.json"))


def test_bytes_that_arrive_damaged_are_discarded(tmp_path: Path) -> None:
    good = b"weights" * 1000
    with pytest.raises(transfer.TransferRefused, match="arrived with sha256"):
        receive(tmp_path, good[:-1] + b"X", hashlib.sha256(good).hexdigest())
    assert not (tmp_path / "dest" / "w.bin").exists()
    assert not (tmp_path / "dest" / ".w.bin.patchkit-part").exists()


def test_intact_bytes_land_under_the_final_name(tmp_path: Path) -> None:
    good = b"weights" * 1000
    done = receive(tmp_path, good, hashlib.sha256(good).hexdigest())
    assert (tmp_path / "dest" / "w.bin").read_bytes() == good and done["sha256"] == hashlib.sha256(good).hexdigest()


def test_a_path_that_leaves_dest_is_refused(tmp_path: Path) -> None:
    with pytest.raises(transfer.TransferRefused, match="leaves the destination"):
        transfer.op_receive_file(io.BytesIO(b""), str(tmp_path / "dest"), "../escape", 0, 0, "x", 0o644,
                                 str(tmp_path / "b"), str(tmp_path / "c.json"))
