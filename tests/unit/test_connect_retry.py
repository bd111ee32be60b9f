"""Connection set-up is retried a bounded number of times with a short backoff (what replaced a
wall-clock bound in the SSH tier: the waits are counted here with a recorded sleep, not timed)."""

from __future__ import annotations

import asyncio

import pytest
from tenacity import retry_if_exception_type

from patchkit.transport.ssh_common import CONNECT_ATTEMPTS, connect_retrying


def run(error: type[Exception], attempts: int, monkeypatch: pytest.MonkeyPatch) -> tuple[int, list[float]]:
    tries: list[int] = []
    slept: list[float] = []

    async def record_sleep(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr(asyncio, "sleep", record_sleep)

    async def connect() -> None:
        async for attempt in connect_retrying(retry_if_exception_type(ConnectionRefusedError), attempts):
            with attempt:
                tries.append(1)
                raise error("down")

    with pytest.raises(error):
        asyncio.run(connect())
    return len(tries), slept


def test_a_transient_failure_is_retried_a_few_times_with_a_short_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    tries, slept = run(ConnectionRefusedError, CONNECT_ATTEMPTS, monkeypatch)
    assert tries == CONNECT_ATTEMPTS and len(slept) == CONNECT_ATTEMPTS - 1
    assert slept == sorted(slept) and all(s <= 2.0 for s in slept) and sum(slept) < 10


def test_any_other_failure_is_not_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    assert run(PermissionError, CONNECT_ATTEMPTS, monkeypatch) == (1, [])
