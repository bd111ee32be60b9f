"""Fan-out over hosts: bounded concurrency, a canary batch, a failure budget, progress.

- `concurrency`: hosts worked on at once.
- `serial` (batches, rollout.py): `1,10%,100%` runs one host, then 10% of them, then the
  rest, a batch only once every host of the batches before succeeded (gates included); a
  single N is a canary (the first N, then all others). The hosts of the batch that failed
  and the hosts never started are named in every skipped host's message.
- `max_fail` (a count or a percentage): once more than that many hosts have failed, hosts
  not yet started are skipped.
- Ctrl-C once: no new host and no new step starts; steps in progress finish (and are
  journaled), then the summary says which hosts finished. Ctrl-C again: hosts in
  flight are abandoned at once, not waited for: each host agent still finishes the request
  it is on (it ignores SIGINT, and every write is atomic), so no file is left half-written,
  and a change cut off before its checks were recorded is `pending verification` in status.
"""

from __future__ import annotations

import asyncio
import signal
import os
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol, TextIO

from patchkit.fleet.inventory import HostSpec
from patchkit.run.results import HostResult
from patchkit.base.reveal import reveal
from patchkit.base.rollout import Size, batches, failure_budget

if TYPE_CHECKING:
    from rich.console import Console  # imported where used: only --progress needs rich
    from rich.table import Table


class Progress(Protocol):
    def started(self, host: str) -> None: ...
    def note(self, host: str, text: str) -> None: ...
    def finished(self, host: str, result: HostResult) -> None: ...
    def close(self) -> None: ...


ABANDONED = ("interrupted while in progress, abandoned at the second Ctrl-C: the host's agent finishes the request "
             "it was on (each write is whole); status says what it left")


@dataclass
class FanOutPolicy:
    concurrency: int = 32
    serial: list[Size] | None = None
    max_fail: Size | None = None


@dataclass
class Interrupt:
    """What Ctrl-C asked for; the runner checks `requested` between steps."""

    requested: bool = False
    forced: bool = False


@dataclass
class _State:
    failed: int = 0
    stop_reason: str | None = None
    running: set[str] = field(default_factory=set)  # hosts started, finished or not
    results: dict[str, HostResult] = field(default_factory=dict)


async def fan_out(
    hosts: list[HostSpec],
    run_one: Callable[[HostSpec], Awaitable[HostResult]],
    policy: FanOutPolicy,
    progress: Progress | None = None,
    interrupt: Interrupt | None = None,
) -> dict[str, HostResult]:
    state = _State()
    limit = asyncio.Semaphore(max(1, policy.concurrency))
    interrupt = interrupt or Interrupt()
    tasks: list[asyncio.Task[None]] = []

    def on_sigint() -> None:
        if not interrupt.requested:
            interrupt.requested = True
            state.stop_reason = "interrupted (Ctrl-C)"
            print("patchkit: interrupted: finishing the steps in progress; Ctrl-C again to abandon them",
                  file=sys.stderr, flush=True)
            return
        interrupt.forced = True
        for task in tasks:
            task.cancel()
        abandoned.set()  # not waiting for the hosts' agents to end: see the module's docstring

    async def one(host: HostSpec) -> None:
        async with limit:
            if state.stop_reason:
                state.results[host.name] = HostResult(status="skipped", message=f"not run: {state.stop_reason}")
                return
            state.running.add(host.name)
            if progress:
                progress.started(host.name)
            try:
                result = await run_one(host)
            except asyncio.CancelledError:
                state.results[host.name] = HostResult(status="failed", message="interrupted while in progress")
                raise
            state.results[host.name] = result
            if progress:
                progress.finished(host.name, result)
            if result.status == "failed":
                state.failed += 1
                if budget is not None and state.failed > budget:
                    state.stop_reason = f"more than {budget} host(s) failed (--max-fail {policy.max_fail})"

    budget = failure_budget(policy.max_fail, len(hosts))
    cut = batches(hosts, policy.serial)
    abandoned = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, on_sigint)
    try:
        for i, batch in enumerate(cut):
            if i > 0 and state.failed and not state.stop_reason:
                state.stop_reason = _stopped_after(i, cut, state.results)
            tasks[:] = [asyncio.ensure_future(one(h)) for h in batch]
            every: asyncio.Future[Any] = asyncio.gather(*tasks, return_exceptions=True)
            given_up: asyncio.Future[Any] = asyncio.ensure_future(abandoned.wait())
            await asyncio.wait([every, given_up], return_when=asyncio.FIRST_COMPLETED)
            given_up.cancel()
            if abandoned.is_set():
                break
            for host in batch if len(cut) > 1 else ():
                if host.name in state.results:
                    state.results[host.name].batch = f"{i + 1}/{len(cut)}"
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        if progress:
            progress.close()
    for host in hosts:
        if host.name in state.running:  # abandoned at the second Ctrl-C
            state.results.setdefault(host.name, HostResult(status="failed", message=ABANDONED))
        state.results.setdefault(host.name, HostResult(status="skipped", message="not run: interrupted"))
    return {h.name: state.results[h.name] for h in hosts}


def _names(hosts: list[HostSpec], limit: int = 10) -> str:
    shown = ", ".join(h.name for h in hosts[:limit])
    return shown + (f" and {len(hosts) - limit} more" if len(hosts) > limit else "")


def _stopped_after(done: int, cut: list[list[HostSpec]], results: dict[str, HostResult]) -> str:
    """Why the rollout stops before batch `done + 1`: the batch that failed, and who never starts."""
    failed_in = next(i for i, batch in enumerate(cut[:done]) if any(
        results.get(h.name) is not None and results[h.name].status == "failed" for h in batch))
    failed = [h for h in cut[failed_in] if results.get(h.name) is not None and results[h.name].status == "failed"]
    never = [h for batch in cut[done:] for h in batch]
    return (f"the rollout stopped after batch {failed_in + 1} of {len(cut)} (--serial): {_names(failed)} failed; "
            f"never started: {_names(never)}")


class LineProgress:
    """Plain lines on stderr (for logs and non-terminals): one per finished host of a fleet, and
    a host's long work (a deploy's bytes, rate, ETA) at most once a minute per host."""

    def __init__(self, total: int, every_s: float = 60.0, clock: Callable[[], float] = time.monotonic,
                 out: TextIO | None = None, finished_lines: bool = True) -> None:
        self.total = total
        self.finished_lines = finished_lines  # off when the report goes to the same file: it says each host
        self.done = 0
        self.every_s, self.clock, self.out = every_s, clock, out
        self.last: dict[str, float] = {}

    def started(self, host: str) -> None:
        self.last[host] = self.clock()

    def note(self, host: str, text: str) -> None:
        now = self.clock()
        if now - self.last.get(host, now) >= self.every_s:
            self.last[host] = now
            print(f"{host}: {text}", file=self.out or sys.stderr, flush=True)

    def finished(self, host: str, result: HostResult) -> None:
        self.done += 1
        if self.total < 2 or not self.finished_lines:
            return  # one host, or stdout is this same file: the report says it
        note = f" — {reveal(result.message)}" if result.status == "failed" and result.message else ""
        print(f"[{self.done}/{self.total}] {host}: {result.status}{note}", file=self.out or sys.stderr, flush=True)

    def close(self) -> None:
        return None


class LiveProgress:
    """A live view on a terminal (rich): a line of counts, then the hosts at work.

    Its cost is bounded whatever the fleet's size: an event (a host started, a note, a host
    finished) only updates a few dicts, and the view is drawn at most `per_second` times a
    second (and once when it closes), each time with at most `rows` host lines: the hosts
    at work, oldest first, then (while there is room) the failed ones. A small fleet (no
    more hosts than `rows`) shows every host, as a table of host and state.
    """

    def __init__(self, hosts: list[str], console: Console | None = None, rows: int = 20, per_second: float = 8.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        from rich.console import Console
        from rich.live import Live

        self.total, self.rows = len(hosts), rows
        self.every_s, self.clock = 1.0 / per_second, clock
        self.states = {h: "waiting" for h in hosts} if len(hosts) <= rows else {}  # a small fleet: all of it
        self.working: dict[str, str] = {}  # host -> its note, in the order they started
        self.failed: dict[str, str] = {}
        self.counts: dict[str, int] = {}
        self.redraws = self.lines_drawn = 0  # what drawing cost so far (tests count it)
        self._drawn_at = -1e18
        self._deferred = self.closed = False
        # auto_refresh off: rich's refresh thread would read these dicts while the event loop
        # changes them; redraws happen here, on the loop, at most `per_second` times a second.
        self.live = Live(self._render(), console=console or Console(stderr=True), auto_refresh=False, transient=True)
        self.live.start()

    def _render(self) -> Table:
        from rich.table import Table
        from rich.text import Text

        table = Table.grid(padding=(0, 2))
        if self.states:
            shown = list(self.states.items())
        else:
            done = sum(self.counts.values())
            summary = ", ".join(f"{n} {status}" for status, n in sorted(self.counts.items()))
            table.add_row(f"{done}/{self.total} done", summary or "-",
                          f"{len(self.working)} at work, {self.total - done - len(self.working)} waiting")
            shown = []
            for host, text in self.working.items():
                if len(shown) == self.rows:
                    break
                shown.append((host, text))
            for host, message in self.failed.items():
                if len(shown) == self.rows:
                    break
                shown.append((host, f"failed: {message}" if message else "failed"))
            hidden = len(self.working) + len(self.failed) - len(shown)
            if hidden > 0:
                shown.append(("…", f"{hidden} more"))
        for host, text in shown:  # Text: a message is shown as written, never read as rich markup
            table.add_row(Text(reveal(host)), Text(reveal(text)))
        self.redraws += 1
        self.lines_drawn += len(shown) + (0 if self.states else 1)
        return table

    def _changed(self, final: bool = False) -> None:
        now = self.clock()
        if final or now - self._drawn_at >= self.every_s:
            self._drawn_at = now
            self.live.update(self._render(), refresh=True)
        elif not self._deferred:  # drawn again once the interval is over, even if nothing else happens
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return
            self._deferred = True
            loop.call_later(self.every_s - (now - self._drawn_at), self._redraw_deferred)

    def _redraw_deferred(self) -> None:
        self._deferred = False
        if not self.closed:
            self._changed(final=True)

    def _set(self, host: str, text: str) -> None:
        if host in self.states:
            self.states[host] = text

    def started(self, host: str) -> None:
        self.working[host] = "working…"
        self._set(host, "working…")
        self._changed()

    def note(self, host: str, text: str) -> None:
        if host in self.working:
            self.working[host] = text
        self._set(host, text)
        self._changed()

    def finished(self, host: str, result: HostResult) -> None:
        self.working.pop(host, None)
        self.counts[result.status] = self.counts.get(result.status, 0) + 1
        if result.status == "failed":
            self.failed[host] = result.message
        self._set(host, result.status)
        self._changed()

    def close(self) -> None:
        self._changed(final=True)
        self.closed = True
        self.live.stop()


def progress_for(hosts: list[HostSpec], enabled: bool) -> Progress | None:
    """A live view on a terminal (one host too: a long deploy is never silent), lines otherwise:
    also on a terminal that says it cannot redraw (TERM=dumb: an editor's shell), where the
    live view would draw nothing at all."""
    if not enabled:
        return None
    if sys.stderr.isatty() and os.environ.get("TERM") != "dumb":
        return LiveProgress([h.name for h in hosts])
    return LineProgress(len(hosts), finished_lines=not _same_file(sys.stdout, sys.stderr))


def _same_file(one: TextIO, other: TextIO) -> bool:
    """Do both write to the same open file (`2>&1 | tee log`, `>log 2>&1`)?"""
    try:
        return os.path.samestat(os.fstat(one.fileno()), os.fstat(other.fileno()))
    except (OSError, ValueError, AttributeError):  # not a real file (a test's StringIO)
        return False
