"""Progress lines for pipes and logs: a host's long work at most once a minute, fleet lines only
for fleets. A fake clock: no sleeping, no wall-clock assertion."""

from __future__ import annotations

import io

from patchkit.run.fanout import LineProgress
from patchkit.run.results import HostResult


def test_a_long_deploy_on_one_host_says_where_it_is_once_a_minute() -> None:
    now = [0.0]
    out = io.StringIO()
    progress = LineProgress(1, every_s=60, clock=lambda: now[0], out=out)
    progress.started("gpu-1")
    for second in range(0, 181, 5):  # a note every 5 s for 3 minutes
        now[0] = float(second)
        progress.note("gpu-1", f"deploy: {second} MiB / 180 MiB")
    progress.finished("gpu-1", HostResult(status="changed"))
    assert out.getvalue().splitlines() == [
        "gpu-1: deploy: 60 MiB / 180 MiB", "gpu-1: deploy: 120 MiB / 180 MiB", "gpu-1: deploy: 180 MiB / 180 MiB"]


def test_a_fleet_gets_a_line_per_finished_host() -> None:
    out = io.StringIO()
    progress = LineProgress(2, out=out)
    progress.started("a")
    progress.started("b")
    progress.finished("b", HostResult(status="failed", message="no route"))
    progress.finished("a", HostResult(status="ok"))
    assert out.getvalue().splitlines() == ["[1/2] b: failed — no route", "[2/2] a: ok"]
