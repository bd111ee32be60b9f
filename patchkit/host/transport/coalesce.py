"""Fewer socket writes under asyncssh: the SSH packets of one event-loop turn go out together.

asyncssh hands every SSH packet to its asyncio transport on its own, and asyncio makes one
send() per write. A deploy streams channel data in packets of at most 32 KiB (sshd's limit),
about 65,000 of them per 2 GB; sshd then wakes up per packet as well. Here the writes made in
one turn of the event loop are joined and written once, at the end of that turn: same bytes,
same order, no added wait (asyncio runs the flush before it polls for I/O again).

asyncssh has no public hook for this: the wrapper replaces the connection's `_transport`
attribute, and is only installed when that attribute is an asyncio transport as expected.
"""

from __future__ import annotations

import asyncio
from typing import Any


class CoalescingTransport:
    """An asyncio transport whose writes of one loop turn reach the real one as one write."""

    def __init__(self, transport: asyncio.WriteTransport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(data)

    def flush(self) -> None:
        if not self._pending:
            return
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending.clear()
        try:
            self._transport.write(data)
        except ConnectionError:  # asyncssh ignores these on its own writes; the loss is reported elsewhere
            pass

    def close(self) -> None:
        self.flush()  # e.g. the disconnect message written just before
        self._transport.close()

    def abort(self) -> None:
        self._pending.clear()
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(map(len, self._pending))

    def __getattr__(self, name: str) -> Any:  # everything else is the real transport's
        return getattr(self._transport, name)


def coalesce_writes(conn: Any) -> bool:
    """Put a CoalescingTransport under an asyncssh connection; False if its layout is not the
    one this was written for (then nothing changes)."""
    transport = getattr(conn, "_transport", None)
    if not isinstance(transport, asyncio.WriteTransport) or isinstance(transport, CoalescingTransport):
        return False
    conn._transport = CoalescingTransport(transport, asyncio.get_running_loop())
    return True
