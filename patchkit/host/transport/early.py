"""The first hosts' connections, started while the run's own code loads.

A fresh apply on one SSH host spent ~50 ms importing the runner, the journal, the agent
client and the step kinds before its first byte to the host, and then waited ~80 ms for
the SSH handshake with nothing to do (bench/README.md). Once the
recipe and the inventory are valid (nothing is contacted before: exit 2), `EarlyReach`
builds the transports of the hosts the fan-out starts first and asks each to `open()` (an
optional ability: SSH connects; a transport without it starts as before); the cli then
imports the rest in a thread while the event loop runs the handshakes. The runner's
session takes a host's transport from here, so nothing is reached twice; whatever was
opened and not taken (an interrupted run) is closed at the end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from patchkit.fleet.inventory import HostSpec
    from patchkit.base.rollout import Size
    from patchkit.host.transport.base import Reach, Transport


def first_wave(hosts: list[HostSpec], concurrency: int, serial: list[Size] | None) -> list[HostSpec]:
    """The hosts the fan-out starts at once: the first batch's first `concurrency`."""
    from patchkit.base.rollout import batches

    cut = batches(hosts, serial)
    return cut[0][:max(1, concurrency)] if cut else []


class EarlyReach:
    def __init__(self, hosts: list[HostSpec], reach: Reach) -> None:
        from patchkit.host.transport import schemes

        self._open: dict[str, Transport] = {}
        for host in hosts:
            transport = schemes.transport_for(host, reach)
            opener = getattr(transport, "open", None)
            if opener is not None:
                opener()
                self._open[host.name] = transport

    def take(self, host: str) -> Transport | None:
        """The host's transport, already reaching it; None: build one as usual."""
        return self._open.pop(host, None)

    async def close(self) -> None:
        """Close what no session took."""
        left, self._open = self._open, {}
        for transport in left.values():
            await transport.close()
