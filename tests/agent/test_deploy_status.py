"""`status --verify-all` re-hashes deployed files that the size+mtime hash cache would trust."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from tests.helpers import run_patchkit, start_patchkit


def test_status_trusts_the_hash_cache_and_verify_all_finds_bit_rot(tmp_path: Path) -> None:
    src, dest, state = tmp_path / "src", tmp_path / "dest", tmp_path / "state"
    src.mkdir()
    (src / "weights.bin").write_bytes(os.urandom(1 << 16))
    (src / "config.json").write_text("{}\n")
    recipe = tmp_path / "deploy.yaml"
    recipe.write_text(f"name: artifact\nsteps:\n  - name: sync\n    deploy: {{src: {src}, dest: {dest}}}\n")
    common = ["--state-dir", str(state), "--json"]
    assert run_patchkit("apply", str(recipe), *common).returncode == 0

    weights = dest / "weights.bin"
    st = weights.stat()
    with open(weights, "r+b") as f:  # bit rot: same size, mtime put back
        f.seek(100)
        f.write(b"\0" * 8)
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))

    trusted = run_patchkit("status", str(recipe), *common)
    assert trusted.returncode == 0, trusted
    assert trusted.hosts()["local"]["steps"][0]["status"] == "applied", trusted

    checked = run_patchkit("status", str(recipe), *common, "--verify-all")
    assert checked.returncode == 3, checked
    step = checked.hosts()["local"]["steps"][0]
    assert step["status"] == "drifted" and str(weights) in step["message"], checked

    planned = run_patchkit("plan", str(recipe), *common, "--verify-all")
    assert planned.hosts()["local"]["steps"][0]["status"] == "changed", planned


def test_rollback_puts_back_the_replaced_file_with_its_old_mode(tmp_path: Path) -> None:
    src, dest, state = tmp_path / "src", tmp_path / "dest", tmp_path / "state"
    src.mkdir()
    dest.mkdir()
    (src / "tokenizer.json").write_text('{"new": true}\n')
    (src / "tokenizer.json").chmod(0o644)
    old = dest / "tokenizer.json"
    old.write_text('{"old": true}\n')
    old.chmod(0o600)  # e.g. a file only its service user may read
    recipe = tmp_path / "deploy.yaml"
    recipe.write_text(f"name: artifact\nsteps:\n  - name: sync\n    deploy: {{src: {src}, dest: {dest}}}\n")
    common = ["--state-dir", str(state), "--json"]

    applied = run_patchkit("apply", str(recipe), *common)
    assert applied.returncode == 0, applied
    assert old.read_text() == '{"new": true}\n' and old.stat().st_mode & 0o777 == 0o644

    undone = run_patchkit("rollback", str(recipe), *common)
    assert undone.returncode == 0, undone
    assert old.read_text() == '{"old": true}\n'
    assert old.stat().st_mode & 0o777 == 0o600
    assert not [p for p in dest.iterdir() if p.name != "tokenizer.json"]  # no temp files left


def test_rollback_of_a_deploy_killed_mid_transfer_removes_what_it_had_written(tmp_path: Path) -> None:
    """The run's record names the files before they are sent: a run that dies half-way can
    still be rolled back (the files it wrote go, the untouched ones stay, no part file is left)."""
    src, dest, state = tmp_path / "src", tmp_path / "dest", tmp_path / "state"
    src.mkdir()
    dest.mkdir()
    (src / "a-config.json").write_text('{"hidden_size": 8}\n')  # sent first (sorted), small
    (src / "b-weights.bin").write_bytes(os.urandom(1 << 20) * 400)  # 400 MiB: still streaming when killed
    (dest / "a-config.json").write_text('{"hidden_size": 4}\n')  # replaced by the deploy
    (dest / "unrelated.txt").write_text("not ours\n")
    recipe = tmp_path / "deploy.yaml"
    recipe.write_text(f"name: artifact\nsteps:\n  - name: sync\n    deploy: {{src: {src}, dest: {dest}}}\n")
    common = ["--state-dir", str(state), "--json"]

    proc = start_patchkit("apply", str(recipe), *common)
    part = dest / ".b-weights.bin.patchkit-part"
    deadline = time.monotonic() + 60
    while not (part.exists() and part.stat().st_size > (8 << 20)) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert part.exists(), "the transfer never started"
    proc.send_signal(signal.SIGKILL)  # the control side dies: no chance to journal anything more
    proc.wait()
    time.sleep(0.5)  # the agent notices its stdin closed and exits
    assert (dest / "a-config.json").read_text() == '{"hidden_size": 8}\n'  # written before the kill
    assert not (dest / "b-weights.bin").exists()

    undone = run_patchkit("rollback", str(recipe), *common)
    assert undone.returncode == 0, undone
    assert (dest / "a-config.json").read_text() == '{"hidden_size": 4}\n'
    assert sorted(p.name for p in dest.iterdir()) == ["a-config.json", "unrelated.txt"]
