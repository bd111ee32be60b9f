#!/usr/bin/env python3
"""Where does a `patchkit apply` spend its time? A timeline per host, without touching patchkit.

    .venv/bin/python bench/profile_patchkit.py apply bench/bench_eagle3.yaml -i INVENTORY --json

Runs the patchkit CLI in this process with timing hooks wrapped around (if they exist):
the imports, `SSHTransport._connect_with_retries` (TCP + SSH handshake + auth),
`SSHTransport.spawn` (the exec request), every agent request from the moment it is written
to the moment its answer is read (by op name; pipelined requests overlap) and the
transport's close. Prints, on stderr,
the start-up phases and per op: how many calls per host and their median / max duration,
then the critical path of the slowest host. patchkit's own stdout is left alone.
"""

from __future__ import annotations

import atexit
import functools
import os
import statistics
import sys
import time
from collections import defaultdict

T0 = time.perf_counter()
CPU0 = time.process_time()
EVENTS: list[tuple[str, str, float, float]] = []  # host, what, start, end (seconds since T0)
PHASES: dict[str, float] = {}


def _rel() -> float:
    return time.perf_counter() - T0


def _wrap_async(cls: type, name: str, label, host_of) -> None:
    original = getattr(cls, name, None)
    if original is None:
        print(f"[profile] {cls.__name__}.{name} not found: not timed", file=sys.stderr)
        return

    @functools.wraps(original)
    async def wrapper(self, *args, **kwargs):
        start = _rel()
        try:
            return await original(self, *args, **kwargs)
        finally:
            EVENTS.append((host_of(self), label(args, kwargs), start, _rel()))

    setattr(cls, name, wrapper)


def install_hooks() -> None:
    from patchkit.host.agent.client import AgentClient, Pending

    # Every request, from the moment it is written to the moment its answer is read: requests
    # are pipelined (several may be in flight), so these spans can overlap.
    original_send, original_result = AgentClient._send, Pending.result

    async def send(self, op, args, payload, preamble=b""):
        pending = await original_send(self, op, args, payload, preamble)
        pending._profile_sent = _rel()
        return pending

    async def result(self, timeout=600):
        first = self._outcome is None
        try:
            return await original_result(self, timeout)
        finally:
            if first:
                EVENTS.append((getattr(self.client, "_host", "?"), "agent." + self.op,
                               getattr(self, "_profile_sent", _rel()), _rel()))

    AgentClient._send, Pending.result = send, result
    try:
        from patchkit.host.transport import ssh
    except ImportError:
        return
    host_of = lambda self: self.target.name  # noqa: E731
    _wrap_async(ssh.SSHTransport, "_connect_with_retries", lambda a, k: "ssh.connect", host_of)
    _wrap_async(ssh.SSHTransport, "spawn", lambda a, k: "ssh.spawn (exec request)", host_of)
    _wrap_async(ssh.SSHTransport, "close", lambda a, k: "ssh.close", host_of)


def report() -> None:
    end = _rel()
    out = sys.stderr
    print(f"\n[profile] wall {end:.3f} s, control-side CPU {time.process_time() - CPU0:.3f} s "
          f"(+ interpreter start before this script ran)", file=out)
    for name, at in PHASES.items():
        print(f"[profile]   {name:<34} at {at:.3f} s", file=out)
    if not EVENTS:
        return
    by_op: dict[str, list[float]] = defaultdict(list)
    per_host: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for host, what, start, stop in EVENTS:
        by_op[what].append(stop - start)
        per_host[host][what] += 1
    hosts = len(per_host)
    first = min(e[2] for e in EVENTS)
    print(f"[profile] {hosts} hosts; first host contact at {first:.3f} s; per op (calls per host, "
          f"median / max seconds):", file=out)
    order = sorted(by_op, key=lambda w: min(e[2] for e in EVENTS if e[1] == w))
    for what in order:
        durations = by_op[what]
        print(f"[profile]   {what:<28} {len(durations) / hosts:4.1f}  {statistics.median(durations):.3f} / "
              f"{max(durations):.3f}", file=out)
    requests = sum(1 for e in EVENTS if e[1].startswith("agent.")) / hosts
    print(f"[profile] agent requests per host: {requests:.1f} (pipelined ones share a round trip)", file=out)
    slowest = max(per_host, key=lambda h: max(e[3] for e in EVENTS if e[0] == h))
    print(f"[profile] critical path of the slowest host, {slowest}:", file=out)
    for host, what, start, stop in sorted((e for e in EVENTS if e[0] == slowest), key=lambda e: e[2]):
        print(f"[profile]   {start:7.3f} → {stop:7.3f}  {what}", file=out)


def main() -> None:
    atexit.register(report)
    import patchkit.cli.main as cli

    PHASES["patchkit.cli.main imported"] = _rel()
    import patchkit.host.agent.client  # noqa: F401  (what the hooks need; patchkit imports it anyway)

    install_hooks()
    PHASES["hooks installed (+agent, ssh imports)"] = _rel()
    sys.argv = ["patchkit", *sys.argv[1:]]
    cli.main()


if __name__ == "__main__":
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ.setdefault("PATCHKIT_SSH_HELPER", "0")  # the timing hooks see SSH in this process only
    main()
