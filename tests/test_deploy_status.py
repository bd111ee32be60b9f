"""`status --verify-all` re-hashes deployed files that the size+mtime hash cache would trust."""

from __future__ import annotations

import os
from pathlib import Path

from helpers import run_patchkit


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
