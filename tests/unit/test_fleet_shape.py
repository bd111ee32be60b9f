"""A fleet's control-side work grows linearly with its hosts: no step does work per host for
every other host. Counted, never timed: the live view's redraws and the lines they draw, the
identical-diff grouping's keying, and the real runner's requests per host and distinct edits
computed, at two fleet sizes (the same recipe, FakeAgent hosts). bench/sim_fleet.py measures
the same flows for time and memory at 10 to 1,000 hosts."""

from __future__ import annotations

import asyncio
import io
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import patchkit.report.output as report_mod
import patchkit.run.runner as runner_mod
from patchkit.run.fanout import LineProgress, LiveProgress, progress_for
from patchkit.fleet.inventory import HostSpec
from patchkit.run.journal import new_run_id
from patchkit.recipe.model import LoadedRecipe, load_recipe
from patchkit.run.results import HostResult, RunReport, StepResult
from patchkit.host.testing import FakeAgent, FakePackage, FakeTransport


@pytest.fixture(autouse=True)
def a_terminal_that_redraws(monkeypatch: pytest.MonkeyPatch) -> None:
    """The live view is drawn on a terminal; a caller's TERM=dumb is not the one under test."""
    monkeypatch.setenv("TERM", "xterm-256color")


def test_a_dumb_terminal_gets_lines_not_a_live_view(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    hosts = [HostSpec(name="a"), HostSpec(name="b")]
    assert isinstance(progress_for(hosts, True), LiveProgress)
    monkeypatch.setenv("TERM", "dumb")
    assert isinstance(progress_for(hosts, True), LineProgress)


def terminal() -> Console:
    return Console(file=io.StringIO(), force_terminal=True, width=100, height=40)


def drive(progress: LiveProgress, names: list[str], now: list[float]) -> None:
    """Every host starts, says something and finishes; the clock moves 1 ms per event."""
    for name in names:
        now[0] += 0.001
        progress.started(name)
    for name in names:
        now[0] += 0.001
        progress.note(name, "deploy: 1 MiB / 2 MiB")
        now[0] += 0.001
        progress.finished(name, HostResult(status="failed" if name.endswith("7") else "changed", message="no route"))
    progress.close()


@pytest.mark.parametrize("hosts", [100, 1000])
def test_the_live_view_draws_at_its_rate_with_bounded_lines_whatever_the_fleet(hosts: int) -> None:
    names = [f"gpu-{i}" for i in range(hosts)]
    now = [0.0]
    console = terminal()
    progress = LiveProgress(names, console=console, rows=20, per_second=8, clock=lambda: now[0])
    drive(progress, names, now)
    elapsed = now[0]
    assert progress.redraws <= elapsed * 8 + 3  # the first frame, one per 1/8 s, the last one
    assert progress.lines_drawn <= progress.redraws * (20 + 2)  # counts, 20 hosts, "… N more"
    last = progress._render()
    assert last.row_count <= 22
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert f"{hosts}/{hosts} done" in text and "failed" in text


def test_a_small_fleet_shows_every_host_and_its_state() -> None:
    now = [0.0]
    console = terminal()
    progress = LiveProgress(["a", "b", "c"], console=console, clock=lambda: now[0])
    progress.started("a")
    now[0] += 1
    progress.note("a", "deploy: 5 MiB / 9 MiB")
    rows = [map(str, column._cells) for column in progress._render().columns]
    assert list(zip(*rows)) == [("a", "deploy: 5 MiB / 9 MiB"), ("b", "waiting"), ("c", "waiting")]
    progress.finished("a", HostResult(status="ok"))
    progress.close()


def test_identical_diffs_are_keyed_once_per_distinct_text(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: Counter[str] = Counter()
    real = report_mod.diff_key

    def counting(diff: str) -> str:
        calls[diff] += 1
        return real(diff)

    monkeypatch.setattr(report_mod, "diff_key", counting)
    same = "--- a/site/vllm/x.py\n+++ b/site/vllm/x.py\n@@ -1 +1 @@\n-a\n+b\n"
    elsewhere = same.replace("/site/", "/opt/venv/site/")  # another folder: the same change
    hosts = {f"h{i}": HostResult(status="changed", steps=[StepResult(name="p", kind="patch", status="changed",
                                                                     diff=same if i % 2 else elsewhere)])
             for i in range(1000)}
    report = RunReport(recipe="r", run_id="x", command="apply", dry_run=False, hosts=hosts)
    shown = report_mod.shared_diffs(report)
    assert len(shown) == 1 and len(next(iter(shown.values()))[1]) == 1000
    assert calls == {same: 1, elsewhere: 1}
    out = io.StringIO()
    report_mod.print_plain(report, out)
    assert out.getvalue().count("+b\n") == 1  # the diff once, for all 1,000 hosts


RECIPE = """
name: toy
steps:
  - name: alpha
    patch:
      package: toy
      modules: [toy.alpha]
      edit: {list_insert: {names: [ITEMS], values: [b]}}
    verify: {import: [toy.alpha]}
"""


@pytest.fixture
def recipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LoadedRecipe:
    monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "toy.yaml"
    path.write_text(RECIPE)
    return load_recipe(path)


def fleet_run(recipe: LoadedRecipe, n: int, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, HostResult],
                                                                                        dict[str, FakeAgent], Any]:
    """The real Runner.on_hosts over n FakeAgent hosts (its agent and transport swapped in)."""
    agents = {f"h{i}": FakeAgent(files={"/site/toy/alpha.py": b'ITEMS = ["a"]\n'},
                                 packages={"toy": FakePackage("/site/toy", "1.0", {"toy.alpha": "/site/toy/alpha.py"})})
              for i in range(n)}

    class Client:
        @staticmethod
        async def start(transport: Any, python: str, host: str) -> FakeAgent:
            return agents[host]

    monkeypatch.setattr(runner_mod, "AgentClient", Client)
    monkeypatch.setattr(runner_mod, "transport_for", lambda host, options=None: FakeTransport(name=host.name))
    runner = runner_mod.Runner(recipe, runner_mod.Options(concurrency=32), new_run_id(), "apply")
    results = asyncio.run(runner.on_hosts([HostSpec(name=name) for name in agents], runner.apply))
    time.sleep(2e-6)  # run ids sort by their start time, to the microsecond
    return results, agents, runner


def test_the_runner_does_the_same_work_per_host_at_any_fleet_size(recipe: LoadedRecipe,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    per_host = {}
    for n in (10, 200):
        results, agents, runner = fleet_run(recipe, n, monkeypatch)
        assert {r.status for r in results.values()} == {"changed"}
        ops = {tuple(op for op, _ in agent.calls) for agent in agents.values()}
        assert len(ops) == 1  # every host got the same requests
        per_host[n] = next(iter(ops))
        assert len(runner.edits.results) == 1  # one edit computed for the whole fleet
        assert runner.edits.hits >= n - 1
    assert per_host[10] == per_host[200]
