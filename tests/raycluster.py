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
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # before Ray is imported anywhere
# The head's Ray Client server starts a server process per client and gives its channel 30 s to
# come up; on 2 cores shared with other jobs that start took longer once ("Initialization failure
# from server"). The head inherits this process's environment.
os.environ.setdefault("RAY_CLIENT_SERVER_CHECK_CHANNEL_TIMEOUT_S", "180")

import ray
from ray.cluster_utils import Cluster

from tests.helpers import Sandbox, make_sandbox

LOOPBACK = "127.0.0.1"


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
        """client_port: the head also serves Ray Client there (`ray://127.0.0.1:PORT`)."""
        letters = list(letters)
        self.root = root
        head: dict[str, Any] = {"num_cpus": num_cpus, "include_dashboard": False,
                                "resources": {f"node_{letters[0]}": 1}}
        if client_port is not None:
            head["ray_client_server_port"] = client_port
        self.client_address = f"ray://{LOOPBACK}:{client_port}" if client_port else None
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
        self.nodes: dict[str, RayNode] = {}
        for letter, raylet in raylets.items():
            node_id = next(n["NodeID"] for n in listed if n["Resources"].get(f"node_{letter}"))
            sandbox = make_sandbox(root / f"node_{letter}")
            home = root / f"node_{letter}" / "home"
            home.mkdir()
            python = _wrapper(root / f"node_{letter}" / "python", sandbox.python, home)
            self.nodes[letter] = RayNode(letter, raylet, node_id, sandbox, python, home)

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


def hold_recipe(path: Path, release: Path) -> Path:
    """A recipe whose one check marks ~/holding on each node and waits until `release` exists:
    a run held mid-step on every node, for tests that kill or interrupt it there."""
    path.write_text(json.dumps({"name": "hold", "steps": [{"name": "hold", "check": {"python": (
        "import os, time\n"
        "open(os.path.expanduser('~/holding'), 'w').close()\n"
        f"while not os.path.exists({str(release)!r}):\n    time.sleep(0.05)\n")}}]}))
    return path
