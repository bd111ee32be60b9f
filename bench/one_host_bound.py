#!/usr/bin/env python3
"""How close can one host get to the floor? The pieces of a fresh apply beside the floor, in one run.

    .venv/bin/python bench/one_host_bound.py [--rounds 10]

One loopback sshd host (bench/fleet.py). Each round, in rotating order, after a quiet wait:
- `validate`: `patchkit validate` of the bench recipe: the interpreter, the imports and the
  recipe's validation, which the contract puts before any host is contacted (exit 2, nothing
  contacted);
- `apply`: a fresh `patchkit apply`, run in a wrapper that notes when the first TCP connect to
  the host starts (`contact`) and when the process ends (`end`);
- `floor`: the hand-written one-exec `ssh` of run_bench.py (FLOOR);
- `ssh`: `ssh HOST 'echo ok'`, what any one-exec tool pays before its work;
- `warm`: the same apply with asyncssh (as `host/transport/asyncssh_import.py` imports it)
  imported before the clock starts: what a second process started with the command, doing
  the SSH side while the first validates, would take off the path (its relay not counted).
  Its figure is the wrapper's own end mark plus the interpreter's start as `apply` measures it.
  `apply`, `contact` and `warm` run with SSH in the CLI's process (PATCHKIT_SSH_HELPER=0),
  whose connect the wrapper can see;
- `helper`: the default since session 12, that second process (host/transport/sshhelper.py): a
  plain fresh apply, timed from outside.
The bound is what a fresh apply would take if nothing but the validation came before the
first byte: validate + (end - contact). Medians; nothing here is a timed test.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from fleet import Fleet  # noqa: E402
from measure import wait_for_quiet  # noqa: E402
from run_bench import FLOOR, IMPORT_CHECK, RECIPE  # noqa: E402

# The CLI in this process, with the first TCP connect and the exit noted on stderr.
CONTACT_WRAPPER = """
import asyncio.base_events, atexit, os, sys, time
if os.environ.get("BOUND_WARM"):
    import patchkit.host.transport.asyncssh_import  # asyncssh, as the SSH side imports it (not our models)
t0 = time.perf_counter()
real = asyncio.base_events.BaseEventLoop.create_connection
async def noted(self, *a, **k):
    print(f"contact {time.perf_counter() - t0:.6f}", file=sys.stderr, flush=True)
    asyncio.base_events.BaseEventLoop.create_connection = real
    return await real(self, *a, **k)
asyncio.base_events.BaseEventLoop.create_connection = noted
atexit.register(lambda: print(f"end {time.perf_counter() - t0:.6f}", file=sys.stderr, flush=True))
sys.argv = ["patchkit"] + sys.argv[1:]
from patchkit.cli.main import main
main()
"""


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, str, str, int]:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    return time.perf_counter() - start, proc.stdout, proc.stderr, proc.returncode


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--python", default=sys.executable, help="the interpreter whose patchkit is measured")
    p.add_argument("--quiet-wait", type=float, default=10.0)
    p.add_argument("--json-out", type=Path, help="write the medians and every run here")
    args = p.parse_args()

    work = Path(tempfile.mkdtemp(prefix="patchkit-bound-"))
    fleet = Fleet.create(work, 1)
    try:
        host = fleet.hosts[0]
        known = fleet.known_hosts(work / "known_hosts")
        inventory = work / "inventory.yaml"
        inventory.write_text(json.dumps({"hosts": {host.name: {
            "address": "127.0.0.1", "port": host.port, "user": "root", "identity_file": str(fleet.client_key),
            "known_hosts": str(known), "python": str(host.python), "state_dir": str(host.state)}}}))
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # installed tools have bytecode
        ssh = ["ssh", "-F", "/dev/null", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
               "-o", f"UserKnownHostsFile={known}", "-o", "GlobalKnownHostsFile=/dev/null", "-o", "IdentitiesOnly=yes",
               "-i", str(fleet.client_key), "-p", str(host.port), "-l", "root", "127.0.0.1"]
        floor = FLOOR.format(file=shlex.quote(str(host.target)), python=shlex.quote(str(host.python)),
                             module=IMPORT_CHECK)
        runs: dict[str, list[float]] = {k: [] for k in ("validate", "contact", "apply", "after_contact", "floor", "ssh",
                                                        "start", "warm", "helper")}
        kinds = ["validate", "apply", "floor", "ssh", "warm", "helper"]
        in_process = {**env, "PATCHKIT_SSH_HELPER": "0"}
        for round_ in range(args.rounds + 1):  # round 0 warms the page cache and bytecode, untimed
            for kind in kinds[round_ % len(kinds):] + kinds[:round_ % len(kinds)]:
                fleet.reset(fleet.hosts)
                wait_for_quiet(args.quiet_wait)
                if kind == "validate":
                    took, _, err, code = timed([args.python, "-m", "patchkit", "validate", str(RECIPE)], env)
                elif kind == "helper":
                    took, out, err, code = timed([args.python, "-m", "patchkit", "apply", str(RECIPE),
                                                  "-i", str(inventory), "--json"], env)
                    assert code == 0 and json.loads(out)["hosts"][host.name]["status"] == "changed", err
                elif kind in ("apply", "warm"):
                    took, out, err, code = timed([args.python, "-c", CONTACT_WRAPPER, "apply", str(RECIPE),
                                                  "-i", str(inventory), "--json"],
                                                 {**in_process, "BOUND_WARM": "1"} if kind == "warm" else in_process)
                    marks = dict(line.split() for line in err.splitlines() if line.startswith(("contact ", "end ")))
                    assert code == 0 and json.loads(out)["hosts"][host.name]["status"] == "changed", err
                    if round_ and kind == "apply":
                        runs["contact"].append(float(marks["contact"]))
                        runs["after_contact"].append(float(marks["end"]) - float(marks["contact"]))
                        runs["start"].append(took - float(marks["end"]))  # the interpreter's start (and exit)
                    elif round_:
                        runs["warm"].append(float(marks["end"]))
                        continue
                elif kind == "floor":
                    took, out, err, code = timed(ssh + [floor], env)
                    assert out.strip() == "changed", (out, err)
                else:
                    took, out, err, code = timed(ssh + ["echo ok"], env)
                assert code == 0, (kind, err[-500:])
                if round_:
                    runs[kind].append(took)
        med = {k: statistics.median(v) for k, v in runs.items()}
        med["warm"] += med["start"]
        bound = med["validate"] + med["after_contact"]
        print(f"one loopback host, medians of {args.rounds} rounds (seconds):")
        for k in ("validate", "contact", "after_contact", "apply", "warm", "helper", "floor", "ssh"):
            shown = k in ("apply", "validate", "warm", "helper")
            print(f"  {k:14s} {med[k]:.3f}" + (f"   ({med[k] / med['floor']:.2f}x the floor)" if shown else ""))
        print(f"  apply / floor                {med['apply'] / med['floor']:.2f}")
        print(f"  bound: validate + after_contact = {bound:.3f} s = {bound / med['floor']:.2f}x the floor "
              f"(nothing but the validation before the first byte)")
        print(f"  before contact, beyond validate: {med['contact'] - med['validate']:.3f} s")
        if args.json_out:
            args.json_out.write_text(json.dumps({"medians": med, "bound": bound, "runs": runs}, indent=1) + "\n")
    finally:
        fleet.stop()


if __name__ == "__main__":
    main()
