"""The actor body that runs on a Ray node (host/transport/rayrelay.py), driven directly: it is a
plain asyncio class, so its ordering and its process handling are tested without a cluster,
against real processes."""

from __future__ import annotations

import asyncio
import sys

from patchkit.host.transport.rayrelay import AgentRelay

ECHO = [sys.executable, "-c", "import sys; sys.stdout.buffer.write(sys.stdin.buffer.read())"]


async def read_all(relay: AgentRelay, key: int) -> bytes:
    out = b""
    while chunk := await relay.read(key, 1 << 16):
        out += chunk
    return out


def test_writes_reach_the_process_in_their_numbered_order_whatever_order_they_arrive_in() -> None:
    async def scenario() -> tuple[bytes, dict]:
        relay = AgentRelay()
        assert await relay.start(1, ECHO) is None
        # Ray runs an async actor's calls concurrently: number 2 may be served before 0 and 1.
        late = [asyncio.ensure_future(relay.write(1, seq, data)) for seq, data in ((2, b"c"), (1, b"b"))]
        await asyncio.sleep(0.05)
        assert not any(w.done() for w in late)  # held until their turn
        assert await relay.write(1, 0, b"a") is None
        assert await asyncio.gather(*late) == [None, None]
        ended = asyncio.ensure_future(relay.end(1, 10, 5))
        return await read_all(relay, 1), await ended

    out, ended = asyncio.run(scenario())
    assert out == b"abc" and ended["returncode"] == 0


def test_a_process_that_cannot_start_or_has_gone_is_said_so() -> None:
    async def scenario() -> tuple[str | None, str | None, dict]:
        relay = AgentRelay()
        missing = await relay.start(1, ["/nonexistent/python3", "-c", "pass"])
        assert await relay.start(2, [sys.executable, "-c", "import sys; sys.stderr.write('bye\\n')"]) is None
        await asyncio.sleep(0.5)
        await read_all(relay, 2)
        gone = await relay.write(2, 0, b"x" * (1 << 20))  # nobody reads stdin any more
        return missing, gone, await relay.stderr(2, 5)

    missing, gone, stderr = asyncio.run(scenario())
    assert missing == "interpreter /nonexistent/python3 not found"
    assert gone is not None and gone.startswith("the agent's stdin is closed")
    assert stderr == {"lines": ["bye"], "returncode": 0}
