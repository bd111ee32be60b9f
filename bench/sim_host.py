"""The simulated host of bench/sim_fleet.py: FakeAgent (patchkit/host/testing.py) behind a wire.

Kept in its own file so that sim_fleet.py can leave the hosts' memory out of the control
side's: tracemalloc filters on this file and on testing.py. What a host does here stays
here: it decodes the request from JSON, runs the fake op, and encodes the answer as JSON
again, the way the real agent answers over its stdout. The control side (sim_fleet.py)
encodes the request and decodes the answer, as AgentClient does.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from patchkit.base.errors import HostError
from patchkit.host.testing import FakeAgent


@dataclass
class Answer:
    wire: str | None  # the reply as JSON, or None when the op failed
    error: HostError | None
    due: float  # loop time at which the reply reaches the control side


HOST_CPU = [0.0]  # CPU seconds spent being the hosts (left out of the control side's figures)


class SimHost(FakeAgent):
    """A FakeAgent that serves one request at a time, with a latency model: each request
    reaches the host rtt/2 after it is sent, waits for the ones before it (the agent is
    sequential), takes its op's service time, and its answer arrives rtt/2 later."""

    rtt_s: float = 0.0
    service_s: dict[str, float] = {}  # noqa: RUF012 - set per instance in configure()
    busy_until: float = 0.0

    def configure(self, rtt_s: float, service_s: dict[str, float]) -> SimHost:
        self.rtt_s, self.service_s, self.busy_until = rtt_s, service_s, 0.0
        return self

    def serve(self, wire: str, now: float) -> Answer:
        cpu0 = time.process_time()
        try:
            return self._serve(wire, now)
        finally:
            HOST_CPU[0] += time.process_time() - cpu0

    def _serve(self, wire: str, now: float) -> Answer:
        request = json.loads(wire)
        op, args = request["op"], request["args"]
        self.calls.append((op, args))
        start = max(now + self.rtt_s / 2, self.busy_until)
        self.busy_until = start + self.service_s.get(op, 0.0)
        due = self.busy_until + self.rtt_s / 2
        handler = getattr(self, f"op_{op}", None)
        try:
            if handler is None:
                raise HostError(f"sim: {op} failed: not in the fake agent")
            return Answer(json.dumps(handler(**args)), None, due)
        except HostError as exc:
            return Answer(None, exc, due)


def host_memory_filters() -> list[Any]:
    """tracemalloc filters that keep the simulated hosts' allocations out."""
    import tracemalloc

    return [tracemalloc.Filter(False, __file__, all_frames=True),
            tracemalloc.Filter(False, "*/patchkit/host/testing.py", all_frames=True)]
