"""CPU accounting shared by the benchmarks: the whole machine's busy time and waiting for quiet.

Every figure here is CPU-bound on 2 shared cores, so a run only counts when the rest of the
machine was idle; run_bench.py and deploy_bench.py both wait for that before each run.
"""

from __future__ import annotations

import os
import time

TICK = os.sysconf("SC_CLK_TCK")


def machine_busy() -> float:
    """Busy CPU seconds of the whole machine so far (all cores, /proc/stat; idle and iowait excluded)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / TICK


def wait_for_quiet(max_wait: float, threshold: float = 0.2, window: float = 0.3) -> float:
    """Until fewer than `threshold` cores were busy over `window` (or `max_wait` passed); seconds waited."""
    t0 = time.monotonic()
    while True:
        b0 = machine_busy()
        time.sleep(window)
        if (machine_busy() - b0) / window < threshold or time.monotonic() - t0 > max_wait:
            return time.monotonic() - t0
