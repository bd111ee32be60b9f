"""Ctrl-C during a fleet run: the step in progress finishes (verified and journaled),
nothing new starts, the summary says which hosts finished, exit 130."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from tests.helpers import PATCHKIT

SLOW_PACKAGE = {
    "slowpkg/__init__.py": "import time\ntime.sleep(2)  # a slow import check\n",
    "slowpkg/config.py": 'SUPPORTED = ["llama", "qwen"]\n',
}


def make_host(root: Path) -> Path:
    """A venv whose interpreter sees its own copy of slowpkg; returns the python."""
    for rel, text in SLOW_PACKAGE.items():
        (root / "site" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "site" / rel).write_text(text)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    purelib = subprocess.run([str(root / "venv/bin/python"), "-c",
                              "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    Path(purelib, "site.pth").write_text(str(root / "site") + "\n")
    return root / "venv/bin/python"


def test_ctrl_c_finishes_the_step_in_progress_and_starts_nothing_new(tmp_path: Path) -> None:
    hosts = {name: make_host(tmp_path / name) for name in ("a", "b", "c")}
    inventory = tmp_path / "inv.yaml"
    inventory.write_text(json.dumps({"hosts": {
        name: {"address": "local", "python": str(py), "state_dir": str(tmp_path / name / "state")} for name, py in hosts.items()}}))
    recipe = tmp_path / "r.yaml"
    recipe.write_text(json.dumps({"name": "slow", "steps": [
        {"name": "add", "patch": {"package": "slowpkg", "modules": ["slowpkg.config"],
                                  "edit": {"list_insert": {"names": ["SUPPORTED"], "values": ["kimi_k2"]}}},
         "verify": {"import": ["slowpkg.config"]}},
        {"name": "after", "check": {"python": "print('second step')"}},
    ]}))
    proc = subprocess.Popen([PATCHKIT, "apply", str(recipe), "-i", str(inventory), "--concurrency", "1", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    backups = tmp_path / "a/state/backups"
    deadline = time.monotonic() + 60
    while not backups.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert backups.exists(), "host a never reached its write"
    time.sleep(0.3)  # host a is inside its verified write (the import check sleeps 2 s)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)

    assert proc.returncode == 130, err
    assert "finishing the steps in progress" in err
    report = json.loads(out)["hosts"]
    a_steps = {s["name"]: s for s in report["a"]["steps"]}
    assert a_steps["add"]["status"] == "changed"  # finished, verified
    assert a_steps["after"]["status"] == "skipped" and "interrupted" in a_steps["after"]["message"]
    assert '"kimi_k2"' in (tmp_path / "a/site/slowpkg/config.py").read_text()
    records = list((tmp_path / "a/state/runs/slow").glob("*.json"))
    assert len(records) == 1 and json.loads(records[0].read_text())["steps"][0]["status"] == "changed"
    for name in ("b", "c"):
        assert report[name]["status"] == "skipped" and "interrupted" in report[name]["message"]
        assert (tmp_path / name / "site/slowpkg/config.py").read_text() == SLOW_PACKAGE["slowpkg/config.py"]


def test_a_second_ctrl_c_exits_at_once_and_status_tells_what_the_host_left(tmp_path: Path) -> None:
    """The host's import check takes 10 s; the second Ctrl-C comes during it. patchkit exits
    at once (130) with the host failed as abandoned; the agent finishes its request, so the
    write is whole and journaled as unverified: status says `pending verification`, and the
    next apply verifies it."""
    site = tmp_path / "a" / "site" / "slowpkg"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("import time\ntime.sleep(10)  # a slow import check\n")
    (site / "config.py").write_text(SLOW_PACKAGE["slowpkg/config.py"])
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "a" / "venv")], check=True)
    python = tmp_path / "a" / "venv" / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    Path(purelib, "site.pth").write_text(str(tmp_path / "a" / "site") + "\n")
    inventory = tmp_path / "inv.yaml"
    inventory.write_text(json.dumps({"hosts": {"a": {"address": "local", "python": str(python),
                                                     "state_dir": str(tmp_path / "a" / "state")}}}))
    recipe = tmp_path / "r.yaml"
    recipe.write_text(json.dumps({"name": "slow", "steps": [
        {"name": "add", "patch": {"package": "slowpkg", "modules": ["slowpkg.config"],
                                  "edit": {"list_insert": {"names": ["SUPPORTED"], "values": ["kimi_k2"]}}},
         "verify": {"import": ["slowpkg.config"]}}]}))
    proc = subprocess.Popen([PATCHKIT, "apply", str(recipe), "-i", str(inventory), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    backups = tmp_path / "a/state/backups"
    deadline = time.monotonic() + 60
    while not backups.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert backups.exists(), "host a never reached its write"
    time.sleep(0.5)  # inside the import check
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    second = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    waited = time.monotonic() - second
    assert proc.returncode == 130, err
    assert waited < 3, f"the second Ctrl-C took {waited:.1f} s to exit"
    host = json.loads(out)["hosts"]["a"]
    assert host["status"] == "failed" and "abandoned at the second Ctrl-C" in host["message"], host
    assert "Traceback" not in err, err

    status = subprocess.run([PATCHKIT, "status", str(recipe), "-i", str(inventory)], capture_output=True, text=True,
                            timeout=60)  # waits for the agent's host lock, held until its request is done
    assert status.returncode == 3 and "\tpending\tpending verification: run " in status.stdout, status
    assert '"kimi_k2"' in (site / "config.py").read_text()
    again = subprocess.run([PATCHKIT, "apply", str(recipe), "-i", str(inventory)], capture_output=True, text=True,
                           timeout=60)
    assert again.returncode == 0 and "verified now" in again.stdout, again
