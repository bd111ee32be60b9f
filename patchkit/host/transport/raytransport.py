"""Ray nodes (`ray://CLUSTER/NODE_ID`): the agent started by an actor pinned to the node.

The same one-agent-process model as SSH: an actor of `rayrelay.AgentRelay`, pinned to the
node (NodeAffinitySchedulingStrategy, soft=False) and taking no CPU, starts the host's python
with the agent's bootstrap and nonce there and relays its stdin and stdout; the agent and its
protocol do not know Ray is in between. One actor per node per run: it is not detached, so it
dies with this process (the driver) however the run ends, and `close()` kills it at the end.

Bulk file bytes (a deploy's files) take the object store instead of the actor calls: the
`write_file` ability of the streams (base.AgentStreams) puts each chunk of a file into Ray's
object store once for every node of the run (`_Chunks`), and each node's actor fetches it and
writes it to its agent, which hashes it on arrival as over any other transport.

A node that dies mid-run (its raylet gone) fails its host with a message naming the node.
"""

from __future__ import annotations

import asyncio
import atexit
import itertools
import os
from collections import OrderedDict, deque
from typing import Any, ClassVar

from patchkit.base.errors import HostError
from patchkit.base.logs import get_logger
from patchkit.host.transport import rayrelay
from patchkit.host.transport.raycluster import SHORT_ID, Node, cluster_nodes, connect

log = get_logger("patchkit")

READ_LIMIT = 1 << 26  # a reply line may carry a whole file
READ_CHUNK = 1 << 20  # stdout bytes one relay call returns at most
WRITES_IN_FLIGHT = 16  # stdin writes sent and not yet confirmed; more wait (back-pressure)
START_TIMEOUT_S = 120.0  # for the actor to be placed and the process started
CLOSE_TIMEOUT_S = 10.0
SETTLE_S = 5.0
CHUNKS_HELD = 256 << 20  # bytes of file chunks this process keeps referenced in the object store


class _Ray:
    """What this process made of Ray: the actor class, and every actor alive (killed at exit)."""

    relay: Any = None
    live: ClassVar[set[Any]] = set()


def _relay_class(ray: Any) -> Any:
    if _Ray.relay is None:
        # By value: a node needs Ray and Python, not patchkit.
        ray.cloudpickle.register_pickle_by_value(rayrelay)
        _Ray.relay = ray.remote(num_cpus=0, max_restarts=0)(rayrelay.AgentRelay)
        atexit.register(_kill_all, ray)
    return _Ray.relay


def _kill_all(ray: Any) -> None:
    for actor in list(_Ray.live):
        _kill(ray, actor)


def _kill(ray: Any, actor: Any) -> None:
    _Ray.live.discard(actor)
    try:
        ray.kill(actor, no_restart=True)
    except Exception:  # noqa: BLE001, S110 - gone already (its node died, or Ray shut down)
        pass


class _Chunks:
    """File chunks in the object store, each put once per run and shared by every node's
    streams (the newest CHUNKS_HELD bytes of them stay referenced; an older one is put again if
    a node asks for it later: a resumed transfer, a slow node)."""

    def __init__(self, budget: int = CHUNKS_HELD) -> None:
        self.budget = budget
        self._held: OrderedDict[tuple[int, ...], tuple[Any, int]] = OrderedDict()
        self._bytes = 0

    def get(self, ray: Any, fd: int, offset: int, count: int) -> tuple[Any, int, bool]:
        """(the ref, its size, whether it was read and put now) of `count` bytes of `fd` at `offset`."""
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, offset, count)
        held = self._held.get(key)
        if held is not None:
            self._held.move_to_end(key)
            return held[0], held[1], False
        data = os.pread(fd, count, offset)
        ref = ray.put(data)
        self._held[key] = (ref, len(data))
        self._bytes += len(data)
        while self._bytes > self.budget and len(self._held) > 1:
            _, (_, size) = self._held.popitem(last=False)  # a node still to fetch it keeps it alive
            self._bytes -= size
        return ref, len(data), True


CHUNKS = _Chunks()


class RayTransport:
    name = "ray"

    def __init__(self, host: str, cluster: str, node_id: str) -> None:
        self.host = host
        self.cluster = cluster
        self.node_id = node_id  # as written (maybe a prefix) until the node is found
        self.exec_requests = 0
        self._ray: Any = None
        self._actor: Any = None
        self._keys = itertools.count(1)
        self._live: set[_RelayStreams] = set()
        self.sent = {"relayed": 0, "from_store": 0, "put": 0}  # bytes: by value, by ref, put by this host

    @property
    def node_name(self) -> str:
        return f"Ray node {self.node_id[:SHORT_ID]}"

    def _node(self) -> Node | None:
        """The node this host is, as the cluster lists it now (None: not listed)."""
        found = [n for n in cluster_nodes(self._ray) if n.node_id.startswith(self.node_id)]
        return found[0] if len(found) == 1 else None

    def _start_actor(self) -> Any:
        ray = self._ray = connect(self.cluster, self.host)
        node = self._node()
        if node is None:
            raise HostError(f"{self.host}: the Ray cluster at {self.cluster} has no node {self.node_id}")
        if node.reason:
            raise HostError(f"{self.host}: Ray node {node.name} is {node.reason}")
        self.node_id = node.node_id
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        pinned = NodeAffinitySchedulingStrategy(node.node_id, soft=False)
        actor = _relay_class(ray).options(scheduling_strategy=pinned).remote()
        _Ray.live.add(actor)
        return actor

    def gone(self, exc: BaseException) -> str:
        """Why the relay stopped answering, for a message: the node died, or the actor did."""
        try:
            node = self._node()
        except Exception:  # noqa: BLE001 - the cluster itself is gone
            node = None
        if node is None or node.reason:
            return (f"{self.node_name} is gone ({node.reason if node else 'no longer in the cluster'}); "
                    "its agent died with it")
        text = (str(exc).strip().splitlines() or [exc.__class__.__name__])[0]
        return f"the patchkit actor on {self.node_name} died: {text}"

    async def wait(self, ref: Any, timeout: float | None = None) -> Any:
        """The result of a relay call; a dead actor or node as ConnectionResetError saying which."""
        ray = self._ray
        try:
            return await asyncio.wait_for(ref, timeout)
        except ray.exceptions.RayError as exc:
            raise ConnectionResetError(self.gone(exc)) from None

    async def spawn(self, argv: list[str]) -> _RelayStreams:
        if self._actor is None:
            self._actor = self._start_actor()
        self.exec_requests += 1
        key = next(self._keys)
        try:
            why = await self.wait(self._actor.start.remote(key, argv), START_TIMEOUT_S)
        except TimeoutError:
            raise HostError(f"{self.host}: {self.node_name} started no actor within {START_TIMEOUT_S:g}s "
                            "(the cluster has no room, or the node is not reachable)") from None
        except ConnectionResetError as exc:
            raise HostError(f"{self.host}: {exc}") from None
        if why:
            raise HostError(why)
        streams = _RelayStreams(self, key)
        self._live.add(streams)
        return streams

    async def close(self) -> None:
        for streams in list(self._live):
            await streams.close()
        if self._actor is not None:
            _kill(self._ray, self._actor)
            self._actor = None
            log.info("ray.sent", host=self.host, node=self.node_id, **self.sent)


class _RelayStdin:
    """The agent's stdin through the actor: what is written goes out at drain(), numbered."""

    def __init__(self, streams: _RelayStreams) -> None:
        self._streams = streams
        self._buffer = bytearray()
        self._seq = itertools.count()
        self._in_flight: deque[Any] = deque()

    def write(self, data: bytes) -> None:
        self._buffer += data

    def flush(self) -> None:
        if self._buffer:
            self.submit(bytes(self._buffer))
            self._streams.transport.sent["relayed"] += len(self._buffer)
            self._buffer.clear()

    def submit(self, payload: Any) -> None:
        """bytes, or the ObjectRef of bytes in the object store."""
        s = self._streams
        self._in_flight.append(s.transport._actor.write.remote(s.key, next(self._seq), payload))

    async def drain(self, keep: int = WRITES_IN_FLIGHT) -> None:
        self.flush()
        while len(self._in_flight) > keep:
            why = await self._streams.transport.wait(self._in_flight.popleft())
            if why:
                raise ConnectionResetError(why)


class _RelayStreams:
    """The pipes of one agent process on the node, relayed by the node's actor."""

    supports_file_splice: ClassVar[bool] = True  # write_file: a chunk through the object store

    def __init__(self, transport: RayTransport, key: int) -> None:
        self.transport = transport
        self.key = key
        self.stdin = _RelayStdin(self)
        self.stdout = asyncio.StreamReader(limit=READ_LIMIT)
        self._final: dict[str, Any] | None = None
        self._pump = asyncio.create_task(self._read())

    async def _read(self) -> None:
        actor = self.transport._actor
        while True:
            try:
                data = await self.transport.wait(actor.read.remote(self.key, READ_CHUNK))
            except ConnectionResetError as exc:
                self.stdout.set_exception(exc)
                return
            if not data:
                self.stdout.feed_eof()
                return
            self.stdout.feed_data(data)

    async def write_file(self, fd: int, offset: int, count: int) -> int | None:
        self.stdin.flush()  # what was written before goes first
        ref, size, put = CHUNKS.get(self.transport._ray, fd, offset, count)
        if size:
            self.stdin.submit(ref)
            sent = self.transport.sent
            sent["from_store"] += size
            sent["put"] += size if put else 0
            await self.stdin.drain()
        return size

    async def _stderr(self) -> dict[str, Any]:
        if self._final is not None:
            return self._final
        try:
            return dict(await self.transport.wait(self.transport._actor.stderr.remote(self.key, SETTLE_S),
                                                  SETTLE_S + 30))
        except (ConnectionResetError, TimeoutError) as exc:
            return {"lines": [str(exc) or "the node gave no answer"], "returncode": None}

    async def stderr_text(self) -> str:
        return "".join(line + "\n" for line in (await self._stderr())["lines"])

    async def error_tail(self) -> str:
        state = await self._stderr()
        tail = "; ".join([line.strip() for line in state["lines"] if line.strip()][-5:])
        code = state["returncode"]
        return (f"exited with {code}" + (f": {tail}" if tail else "")) if code not in (None, 0) else tail

    async def close(self) -> None:
        transport = self.transport
        transport._live.discard(self)
        try:
            await self.stdin.drain(keep=0)
        except (ConnectionResetError, TimeoutError):
            pass
        try:
            end = transport._actor.end.remote(self.key, CLOSE_TIMEOUT_S, SETTLE_S)
            self._final = dict(await transport.wait(end, CLOSE_TIMEOUT_S + SETTLE_S + 30))
        except (ConnectionResetError, TimeoutError) as exc:
            self._final = {"lines": [str(exc)], "returncode": None}
        try:
            await asyncio.wait_for(asyncio.shield(self._pump), SETTLE_S)
        except TimeoutError:
            self._pump.cancel()
