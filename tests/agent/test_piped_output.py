"""What a pipe or a log file gets: each host's result once, headers above what they head.

Two local hosts (each a sandbox of its own). With stdout and stderr going to one file
(`2>&1 | tee log`) the fleet's progress lines would repeat every result the report then
prints: they are left out, and kept when stderr goes elsewhere (a terminal, its own log).
A step's `why:` line comes under the run's `#` header line, not above it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.helpers import PATCHKIT, make_sandbox, recipe

TOY = recipe("toyllm_eagle3.yaml")


def _inventory(tmp_path: Path) -> Path:
    boxes = {name: make_sandbox(tmp_path / name, ("toyllm",)) for name in ("gpu-1", "gpu-2")}
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(json.dumps({"hosts": {
        name: {"address": "local", "python": str(box.python), "state_dir": str(box.state)}
        for name, box in boxes.items()}}))
    return inventory


def test_one_file_for_both_streams_shows_each_result_once(tmp_path: Path) -> None:
    inventory = _inventory(tmp_path)
    together = subprocess.run([PATCHKIT, "status", TOY, "-i", str(inventory)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=120, check=False)
    assert together.returncode == 3, together.stdout  # pending on both
    assert "[1/2]" not in together.stdout and "[2/2]" not in together.stdout, together.stdout
    for host in ("gpu-1", "gpu-2"):
        rows = [line for line in together.stdout.splitlines() if line.startswith(f"{host}\t")]
        assert rows and all("\tpending\t" in row or "\tnot-applicable\t" in row for row in rows), together.stdout

    apart = subprocess.run([PATCHKIT, "status", TOY, "-i", str(inventory)], capture_output=True, text=True,
                           timeout=120, check=False)
    assert apart.returncode == 3, apart
    finished = [line for line in apart.stderr.splitlines() if line.startswith("[")]
    assert sorted(line.split("] ", 1)[1].split(":")[0] for line in finished) == ["gpu-1", "gpu-2"], apart.stderr


def test_a_why_line_comes_under_the_run_header(tmp_path: Path) -> None:
    box = make_sandbox(tmp_path / "host", ("toyllm",))
    recipe_file = tmp_path / "why.yaml"
    recipe_file.write_text(Path(TOY).read_text().replace(
        "  - name: eagle3-whitelist\n", "  - name: eagle3-whitelist\n    why: the whitelist lacks kimi_k2\n", 1))
    assert "why: the whitelist" in recipe_file.read_text()
    planned = subprocess.run([PATCHKIT, *box.argv("plan", str(recipe_file))], capture_output=True, text=True,
                             timeout=120, check=False)
    assert planned.returncode == 0, planned
    lines = planned.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("# plan "))
    why = next(i for i, line in enumerate(lines) if "why: the whitelist lacks kimi_k2" in line)
    assert header < why, planned.stdout


def test_status_says_applied_in_a_short_line_and_json_keeps_the_backup(tmp_path: Path) -> None:
    box = make_sandbox(tmp_path / "host", ("toyllm",))
    applied = box.run("apply", TOY, "--steps", "eagle3-whitelist", json_out=True)
    assert applied.returncode == 0, applied
    status = box.run("status", TOY, "--steps", "eagle3-whitelist")
    row = next(line for line in status.stdout.splitlines() if line.startswith("local\teagle3-whitelist\t"))
    assert row == f"local\teagle3-whitelist\tapplied\tapplied by patchkit in run {applied.json()['run_id']}", row
    shown = box.run("status", TOY, "--steps", "eagle3-whitelist", json_out=True)
    step = shown.hosts()["local"]["steps"][0]
    assert step["status"] == "applied" and Path(step["backup"]).is_file(), step


def test_a_module_that_is_not_there_gets_the_package_s_module_of_that_name(tmp_path: Path) -> None:
    box = make_sandbox(tmp_path / "host", ("toyllm",))
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(Path(TOY).read_text().replace("modules: [toyllm.config.speculative, toyllm.config]",
                                                   "modules: [toyllm.speculative]", 1))
    assert "modules: [toyllm.speculative]" in wrong.read_text()
    planned = box.run("plan", str(wrong), "--steps", "eagle3-whitelist", json_out=True)
    assert planned.returncode == 1, planned
    message = planned.hosts()["local"]["steps"][0]["message"]
    assert "toyllm.speculative: no such module (did you mean toyllm.config.speculative?)" in message, message
