"""What the loader tests share: a hang guard and the one-line error contract.

Every malformed recipe or inventory must raise UsageError (nothing else) with one line
that starts `FILE:LINE:COL: `. The loader's work is bounded by its limits (yamlsource.py:
bytes, depth, alias values), which the tests check by what they count, not by the clock;
the alarm here only turns a hang into a failure, with a margin no loaded machine reaches.
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
    assert len(message.splitlines()) == 1 and message.strip() == message, f"not one line: {message!r}"
    assert len(message) <= 1000, f"{len(message)} characters: {message[:300]!r}..."
    assert "Traceback" not in message
    return place_of(message, path)


def usage_error(load: Callable[[Path], Any], path: Path) -> tuple[str, float]:
    """The loader's one-line UsageError for `path`, and the seconds it took (for reports only)."""
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
