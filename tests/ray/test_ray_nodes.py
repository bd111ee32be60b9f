"""Deploys through Ray's object store, launch on a Ray node, and a node that dies mid-run,
on a real local Ray cluster (a head and two added nodes on 127.0.0.1, tests/raycluster.py).

The node-death test removes a node: it is the module's last (a module after it gets a new
cluster: tests/raycluster.py replaces one that lost a node).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from fixtures.make_drafter import make_drafter
from tests.helpers import Result, recipe, run_patchkit, sha256, start_patchkit
from tests.raycluster import LocalCluster, hold_recipe, module_cluster

TOY = recipe("toyllm_eagle3.yaml")


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from module_cluster(request, tmp_path_factory)  # the tier's cluster, fresh hosts on it


def patchkit(*args: str, timeout: float = 180) -> Result:
    result = run_patchkit(*args, timeout=timeout)
    assert "Traceback" not in result.stderr, result
    return result


def events(stderr: str, name: str) -> list[dict]:
    found = []
    for line in stderr.splitlines():
        if line.startswith("{"):
            event = json.loads(line)
            if event.get("event") == name:
                found.append(event)
    return found


def test_a_deploy_puts_each_file_into_the_object_store_once_for_every_node(cluster: LocalCluster,
                                                                         tmp_path: Path) -> None:
    drafter = make_drafter(tmp_path / "drafter", "valid-sharded")
    (drafter / "extra.bin").write_bytes(os.urandom((3 << 20) + 12345))  # several chunks, the last one short
    files = sorted(p for p in drafter.iterdir() if p.is_file())
    total = sum(p.stat().st_size for p in files)
    deploy = tmp_path / "deploy.yaml"
    deploy.write_text(json.dumps({"name": "drafter", "steps": [{"name": "drafter", "deploy": {
        "src": str(drafter), "dest": "~/drafter", "validate": "eagle3-drafter"}}]}))
    inventory = cluster.inventory(tmp_path / "cluster.yaml")

    result = patchkit("apply", str(deploy), "-i", str(inventory), "--log-format", "json")
    assert result.returncode == 0, result
    for node in cluster.nodes.values():  # every node has every file, hashed on arrival
        assert {p.name: sha256(p) for p in (node.home / "drafter").iterdir()} == {p.name: sha256(p) for p in files}
    sent = events(result.stderr, "ray.sent")
    assert len(sent) == 3
    assert sum(e["put"] for e in sent) == total  # each byte read on this side and put into the store once
    assert all(e["from_store"] == total for e in sent)  # every node fetched all of it from the store
    assert all(e["relayed"] < total / 10 for e in sent)  # requests only: the file bytes took the store

    again = patchkit("apply", str(deploy), "-i", str(inventory), "--json")
    assert again.returncode == 0 and all(h["status"] == "ok" for h in again.hosts().values()), again
    assert patchkit("rollback", str(deploy), "-i", str(inventory)).returncode == 0
    assert not any((n.home / "drafter").exists() for n in cluster.nodes.values())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


def test_a_server_launched_on_a_node_outlives_the_actor(cluster: LocalCluster, tmp_path: Path) -> None:
    port = free_port()
    web = tmp_path / "web.yaml"
    web.write_text(json.dumps({"name": "web", "steps": [{"name": "web", "launch": {
        "command": ["python", "-m", "http.server", str(port), "--bind", "127.0.0.1"], "cwd": str(tmp_path),
        "health": {"url": f"http://127.0.0.1:{port}/", "timeout_s": 60, "interval_s": 0.2},
        "ready": {"completion": None}}}]}))
    inventory = cluster.inventory(tmp_path / "cluster.yaml", letters=["b"])
    applied = patchkit("apply", str(web), "-i", str(inventory), "--json")
    try:
        assert applied.returncode == 0, applied
        (host,) = applied.hosts().values()
        pid = host["steps"][0]["details"]["servers"][0]["pid"]
        assert cluster.wait_for_no_actor() == []  # the run and its actor are gone...
        assert alive(pid) and os.getsid(pid) == pid  # ...the server is not: its own session
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as answer:
            assert answer.status == 200
        status = patchkit("status", str(web), "-i", str(inventory), "--json")
        assert status.returncode == 0 and next(iter(status.hosts().values()))["steps"][0]["status"] == "applied"
    finally:
        rolled = patchkit("rollback", str(web), "-i", str(inventory), "--json")
    assert rolled.returncode == 0, rolled
    deadline = time.monotonic() + 30
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive(pid)


def test_a_node_that_dies_mid_run_fails_its_host_and_a_rerun_converges(cluster: LocalCluster,
                                                                       tmp_path: Path) -> None:
    release = tmp_path / "release"
    hold = hold_recipe(tmp_path / "hold.yaml", release)
    inventory = cluster.inventory(tmp_path / "cluster.yaml")
    markers = [n.home / "holding" for n in cluster.nodes.values()]
    c = cluster.nodes["c"]
    proc = start_patchkit("apply", str(hold), "-i", str(inventory), "--json")
    try:
        deadline = time.monotonic() + 90
        while not all(m.exists() for m in markers) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert all(m.exists() for m in markers), proc.communicate(timeout=30)
        cluster.cluster.remove_node(c.raylet)  # node c dies with the agent in the middle of its step
        time.sleep(1)
        release.touch()
        stdout, stderr = proc.communicate(timeout=180)
    finally:
        release.touch()
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
    assert proc.returncode != 0 and "Traceback" not in stderr, stderr
    hosts = json.loads(stdout)["hosts"]
    assert {h: hosts[h]["status"] for h in hosts} == {
        cluster.nodes["a"].host: "ok", cluster.nodes["b"].host: "ok", c.host: "failed"}, stdout
    assert f"Ray node {c.node_id[:8]} is gone" in json.dumps(hosts[c.host]), hosts[c.host]

    # The rerun: node c's group has no alive node left, said in one line; the others converge.
    gone = patchkit("apply", TOY, "-i", str(inventory))
    assert gone.returncode != 0
    assert (f"group c: no alive node with node_c>=1 in the Ray cluster at {cluster.address} "
            "(left out: 1 dead or draining node(s))") in gone.stderr
    rest = patchkit("apply", TOY, "-i", str(inventory), "-l", "a,b", "--json")
    assert rest.returncode == 0 and sorted(rest.hosts()) == sorted([cluster.nodes["a"].host, cluster.nodes["b"].host])
    again = patchkit("apply", TOY, "-i", str(inventory), "-l", "a,b", "--json")
    assert again.returncode == 0 and all(h["status"] == "ok" for h in again.hosts().values()), again

    every = tmp_path / "all.yaml"
    every.write_text(json.dumps({"hosts": {}, "groups": {"cluster": {"ray": {"address": cluster.address}}}}))
    listed = patchkit("status", TOY, "-i", str(every), "-e", f"python={cluster.nodes['a'].python}")
    assert f"patchkit: group cluster: Ray node {c.host} left out: dead" in listed.stderr, listed
    assert cluster.wait_for_no_actor() == []
