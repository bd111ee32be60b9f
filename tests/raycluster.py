"""A real Ray cluster of several nodes on this machine, for tests/ray and bench/.

Every Ray process stays on loopback: `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` is set in this
process's environment on import, so the test, its Ray nodes and every patchkit CLI it starts
(which inherit it) bind and dial 127.0.0.1 only (FACTS.md); `LocalCluster` checks that every
node's address is 127.0.0.1. All nodes share this machine's disk, so each gets its own
"installed" package copy and home: a sandbox (tests/helpers.py) and an interpreter wrapper
setting HOME, selected by a per-node custom resource `node_<letter>`.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # before Ray is imported anywhere
# The head's Ray Client server starts a server process per client and gives its channel 30 s to
# come up; on 2 cores shared with other jobs that start took longer once ("Initialization failure
# from server"). The head inherits this process's environment.
os.environ.setdefault("RAY_CLIENT_SERVER_CHECK_CHANNEL_TIMEOUT_S", "180")

import pytest
import ray
from ray.cluster_utils import Cluster

from tests.helpers import Sandbox, make_sandbox

LOOPBACK = "127.0.0.1"
FAULTS = Path(__file__).resolve().parent / "ray_faults"  # sitecustomize.py: a Ray Client server that dies


@dataclass
class RayNode:
    letter: str
    raylet: Any  # ray._private.node.Node, for cluster.remove_node
    node_id: str
    sandbox: Sandbox
    python: Path  # the sandbox's python with HOME set to `home`
    home: Path

    @property
    def host(self) -> str:
        """The host name patchkit gives this node."""
        return f"{LOOPBACK}-{self.node_id[:8]}"


def _wrapper(path: Path, python: Path, home: Path) -> Path:
    path.write_text(f'#!/bin/sh\nHOME="{home}"; export HOME\nexec "{python}" "$@"\n')
    path.chmod(0o755)
    return path


class LocalCluster:
    """A head (node a) and added nodes (b, c, ...), each with resource `node_<letter>`: 1."""

    def __init__(self, root: Path, letters: Iterable[str] = ("a", "b", "c"), num_cpus: int = 1,
                 client_port: int | None = None) -> None:
        """client_port: the head also serves Ray Client there (`ray://127.0.0.1:PORT`); while the
        file `client_server_fault` exists, the head's next Ray Client server dies at its start
        (every one, if the file says `always`: tests/ray_faults/sitecustomize.py)."""
        letters = list(letters)
        self.root = root
        self.client_server_fault = root / "client-server-fault"
        head: dict[str, Any] = {"num_cpus": num_cpus, "include_dashboard": False,
                                "resources": {f"node_{letters[0]}": 1}}
        if client_port is not None:
            head["ray_client_server_port"] = client_port
        self.client_address = f"ray://{LOOPBACK}:{client_port}" if client_port else None
        with _head_environment({"PYTHONPATH": str(FAULTS),
                                "PATCHKIT_TEST_CLIENT_SERVER_FAULT": str(self.client_server_fault)}):
            self.cluster = Cluster(initialize_head=True, head_node_args=head)
        self.session_dir = self.cluster.head_node.get_session_dir_path()
        raylets = {letters[0]: self.cluster.head_node}
        for letter in letters[1:]:
            raylets[letter] = self.cluster.add_node(num_cpus=num_cpus, resources={f"node_{letter}": 1})
        self.cluster.wait_for_nodes()
        self.address = self.cluster.address
        ray.init(address=self.address, logging_level="ERROR", log_to_driver=False)
        listed = ray.nodes()
        assert {n["NodeManagerAddress"] for n in listed} == {LOOPBACK}, listed  # nothing but loopback
        self._raylets = raylets
        self.nodes: dict[str, RayNode] = {}
        self.new_hosts(root)

    def new_hosts(self, root: Path) -> None:
        """Every node gets a fresh package copy, home and state dir under `root` (what a test
        module starts from: nothing another module's runs left behind)."""
        listed = ray.nodes()
        self.nodes = {}
        for letter, raylet in self._raylets.items():
            node_id = next(n["NodeID"] for n in listed if n["Resources"].get(f"node_{letter}") and n["Alive"])
            sandbox = make_sandbox(root / f"node_{letter}")
            home = root / f"node_{letter}" / "home"
            home.mkdir()
            python = _wrapper(root / f"node_{letter}" / "python", sandbox.python, home)
            self.nodes[letter] = RayNode(letter, raylet, node_id, sandbox, python, home)

    def whole(self) -> bool:
        """Every node it started is alive (a test may have removed one)."""
        alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        return all(node.node_id in alive for node in self.nodes.values())

    def inventory(self, path: Path, letters: Iterable[str] | None = None, address: str | None = None) -> Path:
        """Groups `a`, `b`, ...: each the node with resource node_<letter>, its python and state dir."""
        groups = {}
        for letter in letters or self.nodes:
            node = self.nodes[letter]
            groups[letter] = {"ray": {"address": address or self.address,
                                      "nodes": {"resources": {f"node_{letter}": 1}},
                                      "python": str(node.python), "state_dir": str(node.sandbox.state)}}
        path.write_text(json.dumps({"hosts": {}, "groups": groups}))  # JSON is YAML
        return path

    def alive_actors(self) -> list[dict[str, Any]]:
        """The cluster's actors not dead, as the GCS lists them (what `ray.util.state.list_actors`
        reports, without the dashboard: the clusters here run none, to spare the CPU)."""
        from ray._private.state import actors

        return [a for a in actors().values() if a["State"] != "DEAD"]

    def wait_for_no_actor(self, within: float = 60) -> list[Any]:
        """The actors not dead yet, once there are none or `within` s passed (a dead driver's
        actors are reaped by the GCS a moment later)."""
        deadline = time.monotonic() + within
        while (left := self.alive_actors()) and time.monotonic() < deadline:
            time.sleep(0.5)
        return left

    def processes(self) -> list[int]:
        """Pids of processes of this cluster's session still running (raylets, GCS, workers)."""
        found = []
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                try:
                    cmdline = (proc / "cmdline").read_bytes()
                except OSError:
                    continue
                if self.session_dir.encode() in cmdline:
                    found.append(int(proc.name))
        return found

    def shutdown(self) -> list[int]:
        """Everything stopped; the pids of this cluster's processes still running after (none)."""
        ray.shutdown()
        self.cluster.shutdown()
        deadline = time.monotonic() + 30
        while (left := self.processes()) and time.monotonic() < deadline:
            time.sleep(0.5)
        return left


@contextmanager
def _head_environment(extra: dict[str, str]) -> Iterator[None]:
    """`extra` in the environment the head's processes start with, and only theirs."""
    saved = {key: os.environ.get(key) for key in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


_shared: list[LocalCluster] = []  # the one cluster of this run, while a module uses it


def module_cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The body of a module-scoped `cluster` fixture: one cluster (with Ray Client) shared by the
    tier's modules, since starting one costs more than most tests. Each module gets fresh hosts
    on it (new_hosts); a cluster that lost a node is replaced by a new one; after the last
    module of this run that uses it, it is shut down and nothing of it may be left running."""
    if _shared and not _shared[0].whole():
        assert _shared.pop().shutdown() == []
    if _shared:
        _shared[0].new_hosts(tmp_path_factory.mktemp("ray-hosts"))
    else:
        _shared.append(LocalCluster(tmp_path_factory.mktemp("ray"), client_port=_free_port()))
    yield _shared[0]
    if not _used_later(request):
        assert _shared.pop().shutdown() == []  # no raylet, GCS or worker of it left running


def _used_later(request: pytest.FixtureRequest) -> bool:
    """Whether a test of another module that runs after this one asks for the cluster."""
    items = request.session.items
    module = request.node.path
    last = max(i for i, item in enumerate(items) if item.path == module)
    return any("cluster" in item.fixturenames and item.path.parent == module.parent for item in items[last + 1:])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def hold_recipe(path: Path, release: Path) -> Path:
    """A recipe whose one check marks ~/holding on each node and waits until `release` exists:
    a run held mid-step on every node, for tests that kill or interrupt it there."""
    path.write_text(json.dumps({"name": "hold", "steps": [{"name": "hold", "check": {"python": (
        "import os, time\n"
        "open(os.path.expanduser('~/holding'), 'w').close()\n"
        f"while not os.path.exists({str(release)!r}):\n    time.sleep(0.05)\n")}}]}))
    return path
