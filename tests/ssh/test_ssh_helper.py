"""SSH in a second process (host/transport/sshhelper.py), against real sshd hosts: the CLI's own
process never loads asyncssh, a Ctrl-C or a kill -9 of the CLI leaves no helper and no
session behind, a helper that dies fails its hosts in words (never a hang), and
PATCHKIT_SSH_HELPER=0 keeps SSH in the CLI's process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.sshd import Testbed, fleet, sshd_root, testbed  # noqa: F401 - pytest fixtures

pytestmark = pytest.mark.timeout(120)

# The CLI, reporting at its exit whether this process imported asyncssh.
WHICH_PROCESS = """
import atexit, sys
atexit.register(lambda: print("asyncssh in the CLI's process:", "asyncssh" in sys.modules, file=sys.stderr))
atexit.register(lambda: print("CLI wrote bytes:", open("/proc/self/io").read().split("wchar: ")[1].split()[0],
                              file=sys.stderr))
from patchkit.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def one_host(testbed: Testbed) -> Path:
    server = testbed.fleet.servers[0]
    testbed.add(server.name, server)
    testbed.fleet.write_known_hosts(testbed.known_hosts, [server])
    return testbed.inventory()


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_until(condition, timeout: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


@pytest.mark.parametrize(("switch", "in_cli"), [("1", False), ("0", True)], ids=["helper", "in-process"])
def test_asyncssh_runs_in_the_helper_unless_switched_off(testbed: Testbed, tmp_path: Path, switch: str,
                                                         in_cli: bool) -> None:
    inventory = one_host(testbed)
    script = tmp_path / "which_process.py"
    script.write_text(WHICH_PROCESS)
    proc = subprocess.run([sys.executable, str(script), "apply", str(testbed.recipe()), "-i", str(inventory),
                           "--json"], capture_output=True, text=True, timeout=90,
                          env=testbed.env(PATCHKIT_SSH_HELPER=switch))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["hosts"]["gpu-1"]["status"] == "changed"
    assert f"asyncssh in the CLI's process: {in_cli}" in proc.stderr, proc.stderr


def start_napping(testbed: Testbed, inventory: Path, nap_s: float = 30) -> tuple[subprocess.Popen[str], int]:
    """A run whose host naps in a check step; returns it and its helper's pid, once it naps."""
    proc = testbed.start("apply", str(testbed.recipe(nap=True)), "-i", str(inventory), "-e", f"nap_s={nap_s}",
                         "--json")
    server = testbed.fleet.servers[0]
    assert wait_until(lambda: "sleep" in server.log or len(children(proc.pid)) >= 1, 20)
    helpers = children(proc.pid)
    assert len(helpers) == 1, helpers  # the helper is the CLI's one child
    assert wait_until(lambda: "Starting session" in server.log[-4000:], 20), server.log[-2000:]
    time.sleep(1.0)  # the agent runs the nap
    return proc, helpers[0]


def sessions_of(testbed: Testbed) -> list[int]:
    server = testbed.fleet.servers[0]
    assert server.proc is not None
    return [pid for pid in children(server.proc.pid) if alive(pid)]


def test_a_killed_cli_takes_its_helper_and_its_sessions_with_it(testbed: Testbed) -> None:
    inventory = one_host(testbed)
    proc, helper = start_napping(testbed, inventory)
    assert alive(helper) and sessions_of(testbed)
    proc.kill()  # kill -9: no handler runs in the CLI
    proc.wait(10)
    assert wait_until(lambda: not alive(helper)), "the helper outlived the CLI"
    assert wait_until(lambda: not sessions_of(testbed), 20), "an SSH session outlived the CLI"


def test_ctrl_c_reaches_the_cli_not_the_helper(testbed: Testbed) -> None:
    """The process group gets the Ctrl-C: the CLI finishes the step in progress and says so;
    the helper does not die under it, then ends with it."""
    inventory = one_host(testbed)
    proc, helper = start_napping(testbed, inventory, nap_s=4)
    for pid in (proc.pid, helper):  # as a terminal's Ctrl-C reaches the whole foreground group
        os.kill(pid, signal.SIGINT)
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 130, err
    assert "interrupted: finishing the steps in progress" in err
    host = json.loads(out)["hosts"]["gpu-1"]
    assert host["status"] == "changed" and [s["status"] for s in host["steps"]] == ["changed", "ok"], host
    assert wait_until(lambda: not alive(helper))


def test_a_helper_that_dies_fails_its_hosts_in_words(testbed: Testbed) -> None:
    inventory = one_host(testbed)
    proc, helper = start_napping(testbed, inventory)
    os.kill(helper, signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    host = json.loads(out)["hosts"]["gpu-1"]
    assert host["status"] == "failed" and "the SSH helper process exited" in host["message"], host


def test_a_fleet_is_served_in_the_cli_s_own_process(testbed: Testbed, tmp_path: Path) -> None:
    """More than sshhelper.MAX_HOSTS hosts: the relay's per-host cost would outweigh the one
    import it saves, so the helper is let go and SSH runs in the CLI's process."""
    from patchkit.host.transport.sshhelper import MAX_HOSTS

    servers = testbed.fleet.servers
    names = [f"node-{i}" for i in range(MAX_HOSTS + 1)]
    for i, name in enumerate(names):
        testbed.add(name, servers[i % len(servers)])
    testbed.fleet.write_known_hosts(testbed.known_hosts, servers)
    script = tmp_path / "which_process.py"
    script.write_text(WHICH_PROCESS)
    proc = subprocess.run([sys.executable, str(script), "apply", str(testbed.recipe()), "-i",
                           str(testbed.inventory()), "--json"], capture_output=True, text=True, timeout=90,
                          env=testbed.env())
    assert proc.returncode == 0, proc.stderr
    assert {h["status"] for h in json.loads(proc.stdout)["hosts"].values()} == {"changed"}
    assert "asyncssh in the CLI's process: True" in proc.stderr, proc.stderr


def test_a_deploy_goes_through_the_helper_each_file_whole_and_in_order(testbed: Testbed, tmp_path: Path) -> None:
    """A deploy's files reach the host through the helper (asyncssh never in the CLI's process):
    the helper reads each file itself and sends its bytes between the requests the CLI wrote
    (a file of several chunks and an odd length, a small one after it, an empty one): the CLI
    itself writes none of the file's bytes (/proc/self/io). Any byte out of place would fail the
    agent's hash check; the second run finds everything in place."""
    inventory = one_host(testbed)
    src = tmp_path / "drafter"
    (src / "sub").mkdir(parents=True)
    files = {"model.safetensors": os.urandom((3 << 20) + 123), "sub/config.json": b'{"hidden_size": 64}\n',
             "empty.bin": b""}
    for rel, data in files.items():
        (src / rel).write_bytes(data)
    dest = testbed.root / "deployed"
    recipe = tmp_path / "ship.yaml"
    recipe.write_text(json.dumps({"name": "ship", "steps": [{"name": "ship", "deploy": {"src": str(src),
                                                                                         "dest": str(dest)}}]}))
    script = tmp_path / "which_process.py"
    script.write_text(WHICH_PROCESS)
    for want in ("changed", "ok"):
        proc = subprocess.run([sys.executable, str(script), "apply", str(recipe), "-i", str(inventory), "--json"],
                              capture_output=True, text=True, timeout=90, env=testbed.env())
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["hosts"]["gpu-1"]["status"] == want, proc.stdout
        assert "asyncssh in the CLI's process: False" in proc.stderr, proc.stderr
        written = int(proc.stderr.split("CLI wrote bytes: ")[1].split()[0])
        assert written < (1 << 20), f"the CLI wrote {written} bytes: the file went through its pipe to the helper"
    for rel, data in files.items():
        assert (dest / rel).read_bytes() == data, rel


def test_a_helper_that_dies_mid_deploy_fails_the_host_and_leaves_only_a_part_file(testbed: Testbed,
                                                                                  tmp_path: Path) -> None:
    """The helper is killed while it sends a file's bytes: the host fails in words (never a
    hang) and the final name never holds a partial file."""
    inventory = one_host(testbed)
    src = tmp_path / "drafter"
    src.mkdir()
    size = 512 << 20
    with open(src / "weights.bin", "wb") as f:
        f.truncate(size)  # sparse: cheap to make, every byte still crosses the wire
    dest = testbed.root / "deployed"
    recipe = tmp_path / "ship.yaml"
    recipe.write_text(json.dumps({"name": "ship", "steps": [{"name": "ship", "deploy": {"src": str(src),
                                                                                         "dest": str(dest)}}]}))
    proc = testbed.start("apply", str(recipe), "-i", str(inventory), "--json")
    part = dest / ".weights.bin.patchkit-part"
    assert wait_until(lambda: part.exists() and part.stat().st_size > (1 << 20), 30), "no bytes arrived"
    helpers = children(proc.pid)
    assert len(helpers) == 1, helpers
    os.kill(helpers[0], signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    host = json.loads(out)["hosts"]["gpu-1"]
    assert host["status"] == "failed" and "SSH helper process" in json.dumps(host), host
    assert not (dest / "weights.bin").exists()


def test_a_switch_value_that_is_neither_0_nor_1_is_refused_before_any_host(testbed: Testbed) -> None:
    inventory = one_host(testbed)
    before = testbed.fleet.servers[0].ssh_connections()
    result = testbed.run("apply", str(testbed.recipe()), "-i", str(inventory), env=testbed.env(PATCHKIT_SSH_HELPER="off"))
    assert result.returncode == 2, result
    assert "PATCHKIT_SSH_HELPER=off: want 0 (SSH in the CLI's own process) or 1" in result.stderr, result
    assert testbed.fleet.servers[0].ssh_connections() == before
