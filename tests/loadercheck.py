"""What the loader tests share: a hang guard and the error contract.

Every malformed recipe or inventory must raise UsageError (nothing else) whose first line
starts `FILE:LINE:COL: `, with bounded work. A file with several problems lists them all
one line each, every line `FILE:LINE:COL: ...` about the same file, in the file's
order. No test asserts seconds (a 2 s assertion failed on a loaded machine): the
guard is a generous budget of the process's own CPU time, which other jobs on the machine do
not stretch; a loader that blew up (an alias bomb expanded, a quadratic error path) would
spend far more.
"""

from __future__ import annotations

import re
import signal
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from patchkit.base.errors import UsageError
from patchkit.base.yamlsource import MAX_LISTED

CPU_LIMIT_S = 20.0  # one load; the slowest measured is ~0.1 s of CPU


class Hang(BaseException):
    """Raised by the timer inside a load that worked too long (BaseException: no `except
    Exception` in the code under test can swallow it)."""


@contextmanager
def time_limit(cpu_seconds: float = CPU_LIMIT_S) -> Iterator[None]:
    """Fail instead of hanging: SIGPROF (ITIMER_PROF counts this process's CPU time, not the
    wall clock) interrupts the load after `cpu_seconds` of work."""
    def on_timer(signum: int, frame: Any) -> None:
        raise Hang(f"no answer within {cpu_seconds} s of CPU time")

    previous = signal.signal(signal.SIGPROF, on_timer)
    signal.setitimer(signal.ITIMER_PROF, cpu_seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def place_of(message: str, path: Path | str) -> tuple[int, int]:
    """(line, column) of a `FILE:LINE:COL: ...` message about `path`."""
    found = re.match(re.escape(str(path)) + r":(\d+):(\d+): \S", message)
    assert found, f"not FILE:LINE:COL: ...: {message!r}"
    return int(found.group(1)), int(found.group(2))


def check_message(message: str, path: Path | str) -> tuple[int, int]:
    """The place of the first problem; every line must be one problem at its place, in order."""
    lines = message.split("\n")
    assert message.strip() == message and len(lines) == len(message.splitlines()), f"stray lines: {message!r}"
    assert len(lines) <= MAX_LISTED, f"{len(lines)} lines: {message[:300]!r}..."
    places = []
    for line in lines:
        assert len(line) <= 1000, f"{len(line)} characters: {line[:300]!r}..."
        places.append(place_of(line, path))
    assert places == sorted(places), f"not in the file's order: {message!r}"
    assert "Traceback" not in message
    return places[0]


def usage_error(load: Callable[[Path], Any], path: Path) -> tuple[str, float]:
    """The loader's UsageError for `path` (every line checked), and the CPU seconds it took (to report)."""
    start = time.process_time()
    with time_limit():
        try:
            load(path)
        except UsageError as exc:
            message = str(exc)
        else:
            pytest.fail(f"{path} loaded, but it is malformed:\n{path.read_bytes()[:2000]!r}")
    elapsed = time.process_time() - start
    check_message(message, path)
    return message, elapsed
