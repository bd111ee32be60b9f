"""What the loader tests share: a hang guard and the error contract.

Every malformed recipe or inventory must raise UsageError (nothing else) whose first line
starts `FILE:LINE:COL: `. A file with several problems lists them all (issue 25), one line
each, every line `FILE:LINE:COL: ...` about the same file, in the file's order. The loader's
work is bounded by its limits (yamlsource.py: bytes, depth, alias values), which the tests
check by what they count, not by the clock; the alarm here only turns a hang into a failure,
with a margin no loaded machine reaches.
"""

from __future__ import annotations

import re
import signal
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from patchkit.errors import UsageError
from patchkit.yamlsource import MAX_LISTED

LIMIT_S = 60.0  # a hang guard, not a speed claim: a load takes milliseconds


class Hang(BaseException):
    """Raised by the alarm inside a load that took too long (BaseException: no `except
    Exception` in the code under test can swallow it)."""


@contextmanager
def time_limit(seconds: float = LIMIT_S) -> Iterator[None]:
    """Fail instead of hanging: SIGALRM interrupts the load after `seconds`."""
    def on_alarm(signum: int, frame: Any) -> None:
        raise Hang(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


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
    """The loader's UsageError for `path` (every line checked), and the seconds it took (for reports only)."""
    start = time.perf_counter()
    with time_limit():
        try:
            load(path)
        except UsageError as exc:
            message = str(exc)
        else:
            pytest.fail(f"{path} loaded, but it is malformed:\n{path.read_bytes()[:2000]!r}")
    elapsed = time.perf_counter() - start
    check_message(message, path)
    return message, elapsed
