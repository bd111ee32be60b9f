"""Recipes on every node of a real Ray cluster (a head and two added nodes on 127.0.0.1),
through the real CLI: the same agent, journal, status and rollback as over SSH, each node
reached by a pinned actor that is gone when the run ends, however it ends.

One cluster for the tier, shared with test_ray_nodes.py (tests/raycluster.py): each node has a
package copy and home of this module's own, picked by a group of the node's custom resource.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import PATCHKIT, Result, recipe, run_patchkit, start_patchkit
from tests.raycluster import LocalCluster, hold_recipe, module_cluster
from tests.sshd import closed_port

TOY = recipe("toyllm_eagle3.yaml")
PATCHED = ("toyllm/config/speculative.py", "toyllm/config/model.py")


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from module_cluster(request, tmp_path_factory)  # the tier's cluster, fresh hosts on it


def patchkit(*args: str, timeout: float = 120) -> Result:
    result = run_patchkit(*args, "--json", timeout=timeout)
    assert "Traceback" not in result.stderr, result
    return result


def files(cluster: LocalCluster) -> dict[str, dict[str, bytes]]:
    return {n.letter: {rel: n.sandbox.file(rel).read_bytes() for rel in PATCHED} for n in cluster.nodes.values()}


def statuses(result: Result) -> dict[str, list[str]]:
    return {name: [s["status"] for s in host["steps"]] for name, host in result.hosts().items()}


def test_apply_reapply_status_and_rollback_on_every_node(cluster: LocalCluster, tmp_path: Path) -> None:
    inventory = cluster.inventory(tmp_path / "cluster.yaml")
    before = files(cluster)
    hosts = {n.host for n in cluster.nodes.values()}

    applied = patchkit("apply", TOY, "-i", str(inventory))
    assert applied.returncode == 0, applied
    assert statuses(applied) == {h: ["ok", "changed", "changed"] for h in hosts}
    after = files(cluster)
    for letter, texts in after.items():
        assert b"kimi_k2" in texts[PATCHED[0]] and b"float32" in texts[PATCHED[1]], letter
        assert texts != before[letter]
    assert cluster.wait_for_no_actor() == []  # each run's actors are killed at its end

    again = patchkit("apply", TOY, "-i", str(inventory))
    assert again.returncode == 0 and statuses(again) == {h: ["ok", "ok", "ok"] for h in hosts}, again
    status = patchkit("status", TOY, "-i", str(inventory))
    assert status.returncode == 0, status
    assert {h: s[1:] for h, s in statuses(status).items()} == {h: ["applied", "applied"] for h in hosts}

    rolled = patchkit("rollback", TOY, "-i", str(inventory))
    assert rolled.returncode == 0, rolled
    assert files(cluster) == before  # byte for byte, on every node
    assert cluster.wait_for_no_actor() == []


def test_a_group_by_resource_reaches_only_its_node(cluster: LocalCluster, tmp_path: Path) -> None:
    inventory = cluster.inventory(tmp_path / "cluster.yaml")
    before = files(cluster)
    b = cluster.nodes["b"]
    applied = patchkit("apply", TOY, "-i", str(inventory), "-l", "b")
    assert applied.returncode == 0 and list(applied.hosts()) == [b.host], applied
    after = files(cluster)
    assert after["a"] == before["a"] and after["c"] == before["c"] and after["b"] != before["b"]
    assert patchkit("rollback", TOY, "-i", str(inventory), "-l", "b").returncode == 0
    assert files(cluster) == before


def test_a_single_node_address_and_a_group_of_all_nodes_through_ray_client(cluster: LocalCluster, tmp_path: Path) -> None:
    c = cluster.nodes["c"]
    one = tmp_path / "one.yaml"
    one.write_text(json.dumps({"hosts": {"worker-c": {"address": f"ray://gcs/{cluster.address}/{c.node_id[:8]}",
                                                      "python": str(c.python), "state_dir": str(c.sandbox.state)}}}))
    plan = patchkit("plan", TOY, "-i", str(one))
    assert plan.returncode == 0 and list(plan.hosts()) == ["worker-c"], plan
    assert str(c.sandbox.file(PATCHED[0])) in plan.stdout  # the diff names node c's own copy

    # Every node, through Ray Client (ray://HEAD:PORT), each host given its own node's python.
    every = tmp_path / "all.yaml"
    every.write_text(json.dumps({"hosts": {}, "groups": {"cluster": {"ray": {
        "address": cluster.client_address, "python": str(cluster.nodes["a"].python)}}}}))
    status = patchkit("status", TOY, "-i", str(every))
    assert status.returncode == 3, status  # pending: nothing applied
    assert sorted(status.hosts()) == sorted(n.host for n in cluster.nodes.values()), status


def test_a_ray_client_server_that_dies_at_its_start_costs_one_more_try(cluster: LocalCluster, tmp_path: Path) -> None:
    """The head starts a server process per Ray client; when it dies at its start, Ray's client
    waits for an answer forever. patchkit waits PATCHKIT_RAY_CLIENT_TIMEOUT_S, then connects
    again as a new client (a new server), up to three clients; if every one dies, one line says so.
    A healthy server's start took more than 8 s once in a full CI run (a loaded 2-core machine),
    so the retries get 20 s; when every server dies, how long each wait is does not matter."""
    every = tmp_path / "all.yaml"
    every.write_text(json.dumps({"hosts": {}, "groups": {"cluster": {"ray": {
        "address": cluster.client_address, "python": str(cluster.nodes["a"].python)}}}}))
    env = {**os.environ, "PATCHKIT_RAY_CLIENT_TIMEOUT_S": "20"}
    cluster.client_server_fault.write_text("once")
    status = run_patchkit("status", TOY, "-i", str(every), "--json", env=env, timeout=120)
    assert not cluster.client_server_fault.exists()  # the first client's server did die
    assert status.returncode == 3, status  # pending, from every node: a later client worked
    assert sorted(status.hosts()) == sorted(n.host for n in cluster.nodes.values()), status
    assert "ray.client_retry" in status.stderr and "did not answer within 20 s" in status.stderr, status

    env["PATCHKIT_RAY_CLIENT_TIMEOUT_S"] = "5"
    cluster.client_server_fault.write_text("always")
    try:
        failed = run_patchkit("status", TOY, "-i", str(every), env=env, timeout=120)
    finally:
        cluster.client_server_fault.unlink()
    assert failed.returncode == 1 and "Traceback" not in failed.stderr, failed
    assert failed.stderr.strip().splitlines()[-1] == (
        f"patchkit: group cluster: cannot connect to the Ray cluster at {cluster.client_address}: the Ray "
        "Client server did not answer within 5 s (tried 3 times; the head's logs: ray_client_server*.err)"), failed


def test_no_actor_is_left_when_the_cli_is_killed(cluster: LocalCluster, tmp_path: Path) -> None:
    release = tmp_path / "release"
    hold = hold_recipe(tmp_path / "hold.yaml", release)
    inventory = cluster.inventory(tmp_path / "cluster.yaml")
    markers = [n.home / "holding" for n in cluster.nodes.values()]
    proc = start_patchkit("apply", str(hold), "-i", str(inventory))
    try:
        deadline = time.monotonic() + 90
        while not all(m.exists() for m in markers) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert all(m.exists() for m in markers), proc.communicate(timeout=30)
        placed = [actor["Address"]["NodeID"] for actor in cluster.alive_actors()]
        assert sorted(placed) == sorted(n.node_id for n in cluster.nodes.values())  # one on each node, mid-run
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
        assert cluster.wait_for_no_actor() == []  # not detached: they die with their driver
    finally:
        release.touch()
        if proc.poll() is None:
            proc.kill()
    for m in markers:
        m.unlink()


def test_ctrl_c_ends_the_run_and_its_actors(cluster: LocalCluster, tmp_path: Path) -> None:
    release = tmp_path / "release"
    hold = hold_recipe(tmp_path / "hold.yaml", release)
    inventory = cluster.inventory(tmp_path / "cluster.yaml", letters=["a"])
    marker = cluster.nodes["a"].home / "holding"
    proc = start_patchkit("apply", str(hold), "-i", str(inventory))
    try:
        deadline = time.monotonic() + 90
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert marker.exists(), proc.communicate(timeout=30)
        proc.send_signal(signal.SIGINT)
        release.touch()  # the check in progress ends; the run stops there
        _, stderr = proc.communicate(timeout=90)
        assert proc.returncode != 0 and "Traceback" not in stderr, stderr
        assert cluster.wait_for_no_actor() == []
    finally:
        release.touch()
        if proc.poll() is None:
            proc.kill()
    marker.unlink()


def test_the_cluster_s_errors_are_one_line_each(cluster: LocalCluster, tmp_path: Path) -> None:
    nowhere = tmp_path / "nowhere.yaml"
    port = closed_port()
    nowhere.write_text(json.dumps({"hosts": {}, "groups": {"c": {"ray": {"address": f"127.0.0.1:{port}"}}}}))
    result = run_patchkit("status", TOY, "-i", str(nowhere))
    assert result.returncode != 0 and "Traceback" not in result.stderr, result
    assert f"group c: cannot reach the Ray cluster at 127.0.0.1:{port}: Connection refused" in result.stderr

    # A bad PATCHKIT_RAY_CLIENT_TIMEOUT_S is named before any cluster is contacted (not "refused").
    client = tmp_path / "client.yaml"
    client.write_text(json.dumps({"hosts": {}, "groups": {"c": {"ray": {"address": f"ray://127.0.0.1:{port}"}}}}))
    for given in ("soon", "0", "-3", "nan", "inf", ""):
        result = run_patchkit("status", TOY, "-i", str(client), env={**os.environ, "PATCHKIT_RAY_CLIENT_TIMEOUT_S": given})
        assert result.returncode != 0 and "Traceback" not in result.stderr, result
        assert result.stderr.strip().splitlines()[-1] == (
            f"patchkit: group c: PATCHKIT_RAY_CLIENT_TIMEOUT_S={given!r} is not a positive number of seconds"), result

    none = tmp_path / "none.yaml"
    none.write_text(json.dumps({"hosts": {}, "groups": {"gpus": {"ray": {
        "address": cluster.address, "nodes": {"resources": {"GPU": 1}}}}}}))
    result = run_patchkit("status", TOY, "-i", str(none))
    assert result.returncode != 0 and "Traceback" not in result.stderr, result
    assert f"group gpus: no alive node with GPU>=1 in the Ray cluster at {cluster.address}" in result.stderr

    # Without Ray installed (its import blocked): one line naming the group, and the cure.
    blocked = ("import sys, runpy; sys.modules['ray'] = None; sys.argv[0] = 'patchkit'; "
               "runpy.run_module('patchkit', run_name='__main__')")
    missing = run_python(blocked, "status", TOY, "-i", str(none))
    assert missing.returncode != 0 and "Traceback" not in missing.stderr, missing
    assert missing.stderr.strip().splitlines()[-1] == (
        "patchkit: group gpus: Ray is not installed on this machine: pip install 'patchkit-llm[ray]' "
        "(or '.[ray]' in a clone of patchkit; the Ray transport needs it)")


def run_python(code: str, *args: str) -> Result:
    import subprocess

    python = str(Path(PATCHKIT).with_name("python"))
    proc = subprocess.run([python, "-c", code, *args], capture_output=True, text=True, timeout=60, check=False)
    return Result(list(args), proc.returncode, proc.stdout, proc.stderr)
