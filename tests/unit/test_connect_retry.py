"""Connection set-up is retried a bounded number of times with a short backoff (what replaced a
wall-clock bound in the SSH tier: the waits are counted here with a recorded sleep, not timed)."""

from __future__ import annotations

import asyncio

import pytest
from tenacity import retry_if_exception_type

from patchkit.host.transport.ssh_common import CONNECT_ATTEMPTS, connect_retrying


def run(error: type[Exception], attempts: int) -> tuple[int, list[float]]:
    tries: list[int] = []
    slept: list[float] = []

    async def record_sleep(seconds: float) -> None:
        slept.append(seconds)

    async def connect() -> None:
        retrying = connect_retrying(retry_if_exception_type(ConnectionRefusedError), attempts)
        # its own sleep, recorded: tenacity 8.0 (the lowest we allow) binds asyncio.sleep when it is
        # imported, so patching asyncio.sleep would leave real sleeps there and record none
        retrying.sleep = record_sleep
        async for attempt in retrying:
            with attempt:
                tries.append(1)
                raise error("down")

    with pytest.raises(error):
        asyncio.run(connect())
    return len(tries), slept


def test_a_transient_failure_is_retried_a_few_times_with_a_short_backoff() -> None:
    tries, slept = run(ConnectionRefusedError, CONNECT_ATTEMPTS)
    assert tries == CONNECT_ATTEMPTS and len(slept) == CONNECT_ATTEMPTS - 1
    assert slept == sorted(slept) and all(0 < s <= 2.0 for s in slept) and sum(slept) < 10


def test_any_other_failure_is_not_retried() -> None:
    assert run(PermissionError, CONNECT_ATTEMPTS) == (1, [])
