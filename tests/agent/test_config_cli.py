"""Defaults from PATCHKIT_* variables and patchkit.toml, through the real CLI: what they set is
used, a flag beats them, -v says where each value came from, and a bad or foreign file stops
the run in one line before any host is contacted."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.helpers import TOY_SPECULATIVE, make_sandbox, recipe, run_patchkit, sha256

TOY = recipe("toyllm_eagle3.yaml")


def test_the_environment_sets_the_state_dir_and_a_flag_beats_it(tmp_path: Path) -> None:
    box = make_sandbox(tmp_path / "host", ("toyllm",))
    from_env, from_flag = tmp_path / "env-state", tmp_path / "flag-state"
    env = {**os.environ, "PATCHKIT_STATE_DIR": str(from_env), "HOME": str(tmp_path / "home")}
    applied = run_patchkit("apply", TOY, "--steps", "eagle3-whitelist", "-e", f"python={box.python}", "-v", env=env)
    assert applied.returncode == 0, applied
    assert list((from_env / "runs").rglob("*.json")), "the run is journaled in PATCHKIT_STATE_DIR"
    logged = [line for line in applied.stderr.splitlines() if " config " in f" {line} " and "state_dir" in line]
    assert logged and str(from_env) in logged[0] and "PATCHKIT_STATE_DIR" in logged[0], applied.stderr

    rolled = run_patchkit("rollback", TOY, "-e", f"python={box.python}", "--state-dir", str(from_flag), "-v",
                          env=env)
    assert rolled.returncode == 0, rolled  # nothing journaled in the flag's dir: nothing to roll back there
    assert not [line for line in rolled.stderr.splitlines() if "PATCHKIT_STATE_DIR" in line], rolled.stderr
    assert '"kimi_k2"' in box.file(TOY_SPECULATIVE).read_text()  # the env's journal was not used


def test_a_project_file_names_the_inventory_relative_to_itself(tmp_path: Path) -> None:
    boxes = {name: make_sandbox(tmp_path / name, ("toyllm",)) for name in ("gpu-1", "gpu-2")}
    project = tmp_path / "project"
    (project / "inventories").mkdir(parents=True)
    (project / "inventories" / "gpu.yml").write_text(json.dumps({"hosts": {
        name: {"address": "local", "python": str(box.python), "state_dir": str(box.state)}
        for name, box in boxes.items()}}))
    (project / "patchkit.toml").write_text('inventory = ["inventories/gpu.yml"]\nconcurrency = 1\n')
    (project / "sub").mkdir()
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    status = run_patchkit("status", TOY, "--json", cwd=project / "sub", env=env)
    assert status.returncode == 3, status  # pending on both hosts of the project's inventory
    assert sorted(status.hosts()) == ["gpu-1", "gpu-2"], status

    (project / "patchkit.toml").write_text('inventory = ["inventories/gpu.yml"]\nconcurency = 1\n')
    before = {name: (sha256(box.file(TOY_SPECULATIVE)), sorted(box.state.rglob("*"))) for name, box in boxes.items()}
    bad = run_patchkit("apply", TOY, cwd=project, env=env)
    assert bad.returncode == 2, bad
    assert bad.stderr == (f"patchkit: {project / 'patchkit.toml'}: unknown key 'concurency' "
                          "(did you mean concurrency?)\n"), bad.stderr
    (project / "patchkit.toml").write_text('inventory = ["inventories/gpu.yml"]\n')
    (project / "patchkit.toml").chmod(0o666)
    foreign = run_patchkit("apply", TOY, cwd=project, env=env)
    assert foreign.returncode == 2 and "is writable by other users" in foreign.stderr, foreign
    after = {name: (sha256(box.file(TOY_SPECULATIVE)), sorted(box.state.rglob("*"))) for name, box in boxes.items()}
    assert after == before  # no host contacted
