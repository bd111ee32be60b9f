"""Rolling rollouts over an inventory of local hosts (each its own interpreter and journal):
batches in order, a batch only after every host before it succeeded, the report naming the
batch that stopped the rollout and the hosts never started; --max-fail as a percentage."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.helpers import run_patchkit

GATE = """\
import os, sys
# the host's gate: fails where the inventory's interpreter says so
if os.environ.get("ROLLOUT_FAIL") == "1":
    sys.exit("acceptance gate failed on " + os.environ["ROLLOUT_HOST"])
"""


def fleet(root: Path, count: int, failing: set[str], serial: object = None) -> tuple[Path, Path]:
    """(inventory, recipe): hosts h1..hN, each with its own state dir and an interpreter that
    tells the recipe's check whether it fails there."""
    hosts = {}
    for i in range(1, count + 1):
        name = f"h{i}"
        python = root / f"python-{name}"
        python.write_text(f'#!/bin/sh\nROLLOUT_HOST={name} ROLLOUT_FAIL={int(name in failing)} '
                          f'exec "{sys.executable}" "$@"\n')
        python.chmod(0o755)
        hosts[name] = {"address": "local", "python": str(python), "state_dir": str(root / "state" / name)}
    inventory = root / "inventory.yaml"
    doc: dict = {"hosts": hosts}
    if serial is not None:
        doc["serial"] = serial
    inventory.write_text(json.dumps(doc))
    recipe = root / "gate.yaml"
    recipe.write_text(json.dumps({"name": "gate", "steps": [{"name": "gate", "check": {"python": GATE}}]}))
    return inventory, recipe


def started(root: Path, name: str) -> bool:
    """Did a run touch this host? (its journal exists once it was locked)"""
    return (root / "state" / name).exists()


def test_a_failing_gate_in_batch_2_leaves_batch_3_unstarted(tmp_path: Path) -> None:
    inventory, recipe = fleet(tmp_path, 10, failing={"h3"})
    result = run_patchkit("apply", str(recipe), "-i", str(inventory), "--serial", "1,20%,100%", "--json")
    assert result.returncode == 1, result
    hosts = result.json()["hosts"]
    assert hosts["h1"]["status"] == "ok" and hosts["h1"]["batch"] == "1/3"
    assert hosts["h2"]["status"] == "ok" and hosts["h2"]["batch"] == "2/3"
    assert hosts["h3"]["status"] == "failed" and "acceptance gate failed on h3" in hosts["h3"]["steps"][0]["message"]
    never = [f"h{i}" for i in range(4, 11)]
    for name in never:
        assert hosts[name]["status"] == "skipped" and hosts[name]["batch"] == "3/3", hosts[name]
        assert hosts[name]["message"] == (
            "not run: the rollout stopped after batch 2 of 3 (--serial): h3 failed; "
            "never started: " + ", ".join(never)), hosts[name]["message"]
        assert not started(tmp_path, name)
    assert started(tmp_path, "h1") and started(tmp_path, "h3")

    # The same fleet, all healthy: every batch runs.
    (tmp_path / "state").rename(tmp_path / "state-before")
    inventory, recipe = fleet(tmp_path, 10, failing=set())
    result = run_patchkit("apply", str(recipe), "-i", str(inventory), "--serial", "1,20%,100%", "--json")
    assert result.returncode == 0, result
    assert [h["batch"] for h in result.json()["hosts"].values()] == ["1/3"] + ["2/3"] * 2 + ["3/3"] * 7


def test_serial_from_the_inventory_and_the_recipe(tmp_path: Path) -> None:
    inventory, recipe = fleet(tmp_path, 4, failing={"h1"}, serial=[1, "100%"])
    result = run_patchkit("apply", str(recipe), "-i", str(inventory), "--json")
    hosts = result.json()["hosts"]
    assert result.returncode == 1 and hosts["h1"]["status"] == "failed"
    assert all(hosts[h]["status"] == "skipped" for h in ("h2", "h3", "h4")), hosts
    assert "stopped after batch 1 of 2" in hosts["h2"]["message"]
    # the recipe's `serial:` wins over the inventory's, --serial over both
    doc = json.loads(recipe.read_text())
    doc["serial"] = ["50%"]
    recipe.write_text(json.dumps(doc))
    result = run_patchkit("apply", str(recipe), "-i", str(inventory), "--json")
    assert [h["batch"] for h in result.json()["hosts"].values()] == ["1/2", "1/2", "2/2", "2/2"]
    result = run_patchkit("apply", str(recipe), "-i", str(inventory), "--json", "--serial", "3")
    assert [h["batch"] for h in result.json()["hosts"].values()] == ["1/2", "1/2", "1/2", "2/2"]
    # an unreadable size is a usage error, nothing contacted
    result = run_patchkit("apply", str(recipe), "-i", str(inventory), "--serial", "1,ten%")
    assert result.returncode == 2
    assert "--serial: 'ten%' is not a host count or a percentage like 10%" in result.stderr, result.stderr
    doc["serial"] = ["0%"]
    recipe.write_text(json.dumps(doc))
    result = run_patchkit("validate", str(recipe))
    assert result.returncode == 2 and "serial" in result.stderr and "gate.yaml:" in result.stderr, result.stderr


def test_max_fail_as_a_percentage(tmp_path: Path) -> None:
    inventory, recipe = fleet(tmp_path, 10, failing={"h3", "h5"})
    result = run_patchkit("apply", str(recipe), "-i", str(inventory), "--max-fail", "10%", "--concurrency", "1",
                          "--json")
    hosts = result.json()["hosts"]
    assert [hosts[f"h{i}"]["status"] for i in range(1, 6)] == ["ok", "ok", "failed", "ok", "failed"]
    for i in range(6, 11):
        assert hosts[f"h{i}"]["status"] == "skipped", hosts[f"h{i}"]
        assert hosts[f"h{i}"]["message"] == "not run: more than 1 host(s) failed (--max-fail 10%)"
        assert not started(tmp_path, f"h{i}")
