"""The host agent's start on the local transport: spawn -> `hello` answered (-> closed).

No SSH, no login shell: what patchkit itself adds to every host's start (bootstrap, sending
the agent's core, its first reply, closing). Medians of N starts after 5 warm-up ones, and
the CPU they cost per start (this process and the agents, from getrusage: robust against
other load on a shared machine, unlike the wall times):

    .venv/bin/python bench/agent_start.py [-n 200] [--python /usr/bin/python3]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import sys
import time

from patchkit.host.agent.client import AgentClient
from patchkit.host.transport.local import LocalTransport


async def once(python: str) -> tuple[float, float]:
    started = time.perf_counter()
    agent = await AgentClient.start(LocalTransport(), python, "local")
    await agent.started(python)
    ready = time.perf_counter() - started
    await agent.close()
    return ready, time.perf_counter() - started


def cpu() -> tuple[float, float]:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


async def main(n: int, python: str) -> None:
    for _ in range(5):
        await once(python)
    own0, agents0 = cpu()
    runs = [await once(python) for _ in range(n)]
    own1, agents1 = cpu()
    print(f"{python}: hello answered {1000 * statistics.median(r[0] for r in runs):.1f} ms, "
          f"with close {1000 * statistics.median(r[1] for r in runs):.1f} ms (median of {n}); CPU per start: "
          f"control side {1000 * (own1 - own0) / n:.2f} ms, agent {1000 * (agents1 - agents0) / n:.2f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("-n", type=int, default=200)
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args()
    asyncio.run(main(args.n, args.python))
