"""Fan-out over hosts: bounded concurrency, a canary batch, a failure budget, progress.

- `concurrency`: hosts worked on at once.
- `serial` (canary): the first N hosts run alone first; the rest start only if all of
  them succeeded.
- `max_fail`: once more than K hosts have failed, hosts not yet started are skipped.
- Ctrl-C once: no new host and no new step starts; steps in progress finish (and are
  journaled), then the summary says which hosts finished. Ctrl-C again: hosts in
  flight are abandoned; each host agent still finishes the request it is on (it
  ignores SIGINT, and every write is atomic), so no file is left half-written.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Awaitable, Callable, Protocol, TextIO

from patchkit.inventory import HostSpec
from patchkit.results import HostResult

if TYPE_CHECKING:
    from rich.table import Table  # imported where used: only --progress needs rich


class Progress(Protocol):
    def started(self, host: str) -> None: ...
    def note(self, host: str, text: str) -> None: ...
    def finished(self, host: str, result: HostResult) -> None: ...
    def close(self) -> None: ...


@dataclass
class FanOutPolicy:
    concurrency: int = 32
    serial: int | None = None
    max_fail: int | None = None


@dataclass
class Interrupt:
    """What Ctrl-C asked for; the runner checks `requested` between steps."""

    requested: bool = False
    forced: bool = False


@dataclass
class _State:
    failed: int = 0
    stop_reason: str | None = None
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

    async def one(host: HostSpec) -> None:
        async with limit:
            if state.stop_reason:
                state.results[host.name] = HostResult(status="skipped", message=f"not run: {state.stop_reason}")
                return
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
                if policy.max_fail is not None and state.failed > policy.max_fail:
                    state.stop_reason = f"more than {policy.max_fail} host(s) failed (--max-fail)"

    batches = [hosts]
    if policy.serial and policy.serial < len(hosts):
        batches = [hosts[: policy.serial], hosts[policy.serial:]]
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, on_sigint)
    try:
        for i, batch in enumerate(batches):
            if i > 0 and state.failed and not state.stop_reason:
                state.stop_reason = f"a host of the first {policy.serial} (--serial canary) failed"
            tasks[:] = [asyncio.ensure_future(one(h)) for h in batch]
            await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        if progress:
            progress.close()
    for host in hosts:
        state.results.setdefault(host.name, HostResult(status="skipped", message="not run: interrupted"))
    return {h.name: state.results[h.name] for h in hosts}


class LineProgress:
    """Plain lines on stderr (for logs and non-terminals): one per finished host of a fleet, and
    a host's long work (a deploy's bytes, rate, ETA) at most once a minute per host."""

    def __init__(self, total: int, every_s: float = 60.0, clock: Callable[[], float] = time.monotonic,
                 out: TextIO | None = None) -> None:
        self.total = total
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
        if self.total < 2:
            return  # one host: its report says it
        note = f" — {result.message}" if result.status == "failed" and result.message else ""
        print(f"[{self.done}/{self.total}] {host}: {result.status}{note}", file=self.out or sys.stderr, flush=True)

    def close(self) -> None:
        return None


class LiveProgress:
    """A live per-host view on a terminal (rich)."""

    def __init__(self, hosts: list[str]) -> None:
        from rich.console import Console
        from rich.live import Live

        self.states = {h: "waiting" for h in hosts}
        self.live = Live(self._render(), console=Console(stderr=True), refresh_per_second=8, transient=True)
        self.live.start()

    def _render(self) -> Table:
        from rich.table import Table

        table = Table.grid(padding=(0, 2))
        for host, status in self.states.items():
            table.add_row(host, status)
        return table

    def started(self, host: str) -> None:
        self.states[host] = "working…"
        self.live.update(self._render())

    def note(self, host: str, text: str) -> None:
        self.states[host] = text
        self.live.update(self._render())

    def finished(self, host: str, result: HostResult) -> None:
        self.states[host] = result.status
        self.live.update(self._render())

    def close(self) -> None:
        self.live.stop()


def progress_for(hosts: list[HostSpec], enabled: bool) -> Progress | None:
    """A live view on a terminal (one host too: a long deploy is never silent), lines otherwise."""
    if not enabled:
        return None
    if sys.stderr.isatty():
        return LiveProgress([h.name for h in hosts])
    return LineProgress(len(hosts))
