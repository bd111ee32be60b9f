"""A Ray cluster as patchkit sees it: the one connection of a run, and its nodes as hosts.

Ray is imported here, and only when a run has a ray:// host or a Ray group (a run without
one never imports it; without Ray installed such a run stops with one line saying so). The
control process connects once (`ray.init`, as a driver: every actor it starts dies with it)
and to one cluster. A Ray group (raygroup.py) becomes its matching nodes that are alive and
not draining, each a host `IP-SHORTID` at `ray://.../NODE_ID`; every matching node left out
is named with its reason, as pod selectors do. Reading `ray.nodes()` is pure (`nodes_from_state`).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from patchkit.base.errors import HostError
from patchkit.fleet.inventory import Defaults, HostSpec
from patchkit.base.logs import get_logger
from patchkit.fleet.raygroup import NodeFilter, RayGroup, RayNodes
from patchkit.host.transport import schemes  # noqa: F401 - registers the schemes that read the hosts built here
from patchkit.host.transport.ray_scheme import node_address

RAY_MISSING = ("Ray is not installed on this machine: pip install 'patchkit-llm[ray]' "
               "(or '.[ray]' in a clone of patchkit; the Ray transport needs it)")
REACH_TIMEOUT_S = 10.0
CLIENT_INIT_TIMEOUT_S = 45.0
CLIENT_INIT_TRIES = 3  # server starts fail about 1 in 17 (below): 3 tries leave ~1 in 5,000 connects failing
SHORT_ID = 8  # digits of a node id in a host's name

log = get_logger("patchkit")


def import_ray(where: str) -> ModuleType:
    """The `ray` package, or a HostError of one line naming `where` (it is optional)."""
    try:
        import ray
    except ImportError:
        raise HostError(f"{where}: {RAY_MISSING}") from None
    return ray


class _Connection:
    cluster: str | None = None  # the address this process is connected to (one per run)


def _reachable(cluster: str, where: str) -> None:
    """A TCP connect first: Ray retries an address that does not answer for a minute or more."""
    if cluster == "auto":
        return
    host, _, port = cluster.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), REACH_TIMEOUT_S).close()
    except OSError as exc:
        raise HostError(f"{where}: cannot reach the Ray cluster at {cluster}: "
                        f"{exc.strerror or exc.__class__.__name__}") from None


def connect(cluster: str, where: str) -> ModuleType:
    """`ray`, connected to the cluster at `cluster` (once per process; HostError, one line)."""
    ray = import_ray(where)
    if _Connection.cluster is not None:
        if _Connection.cluster != cluster:
            raise HostError(f"{where}: one Ray cluster per run: this run is connected to {_Connection.cluster}, "
                            f"not {cluster}")
        return ray
    if not ray.is_initialized():
        client = cluster.startswith("ray://")
        try:
            timeout = client_init_timeout() if client else 0.0
        except ValueError as exc:
            raise HostError(f"{where}: {exc}") from None  # before the cluster is contacted
        _reachable(cluster, where)
        try:
            if client:
                _client_init(ray, cluster, timeout)
            else:
                ray.init(address=cluster, logging_level=logging.ERROR, log_to_driver=False)
        except Exception as exc:  # noqa: BLE001 - Ray raises ConnectionError, RuntimeError, ValueError...
            text = (str(exc).strip().splitlines() or [exc.__class__.__name__])[0]
            raise HostError(f"{where}: cannot connect to the Ray cluster at {cluster}: {text}") from None
    _Connection.cluster = cluster
    return ray


class _ClientServerFailed(ConnectionError):
    """The head's Ray Client server for this process did not start (unanswered, or said so)."""


def client_init_timeout() -> float:
    """Seconds Ray Client's first answer may take (PATCHKIT_RAY_CLIENT_TIMEOUT_S; it comes in
    2-3 s on an idle head: the head starts a server process for each client). ValueError,
    naming the variable, for anything but a positive number."""
    given = os.environ.get("PATCHKIT_RAY_CLIENT_TIMEOUT_S")
    if given is None:
        return CLIENT_INIT_TIMEOUT_S
    try:
        seconds = float(given)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError(f"PATCHKIT_RAY_CLIENT_TIMEOUT_S={given!r} is not a positive number of seconds")
    return seconds


def _client_init(ray: ModuleType, cluster: str, timeout: float) -> None:
    """`ray.init` through Ray Client, bounded, tried again on a new client (CLIENT_INIT_TRIES in all).

    The head starts a server process for every client. When that process dies at its start
    (about once in 17 connects measured here: "SpecificServer startup failed"),
    Ray's client waits for the answer to its Init forever (Ray 2.60) or says "Initialization
    failure from server". A new client gets a new server process, so another try is worth it;
    with two tries, one such death beside an injected one (a server's gRPC fork error, then the
    injected exit) failed the fault test in a full run, so three."""
    for attempt in range(1, CLIENT_INIT_TRIES + 1):
        try:
            _one_client_init(ray, cluster, timeout)
            return
        except _ClientServerFailed as exc:
            if attempt == CLIENT_INIT_TRIES or not _fresh_client_context():
                raise _ClientServerFailed(f"{exc} (tried {attempt} times; the head's logs: "
                                          "ray_client_server*.err)") from None
            log.warning("ray.client_retry", cluster=cluster, reason=str(exc))


def _fresh_client_context() -> bool:
    """Give this process a new Ray Client context for another try; False if this Ray's client
    is not laid out as expected (then there is no other try). The stuck one is left to its
    daemon thread: closing it waits for the head's streams, a minute or more."""
    try:
        import ray.util.client
    except ImportError:
        return False
    client_module: Any = ray.util.client
    if not all(hasattr(client_module, name) for name in ("_default_context", "_ClientContext", "ray")):
        return False
    fresh = client_module._ClientContext()
    client_module._default_context = fresh  # threads that have none yet (the next try's) take it
    client_module.ray.set_context(fresh)  # and this one, which makes the run's Ray calls
    return True


def _one_client_init(ray: ModuleType, cluster: str, timeout: float) -> None:
    outcome: list[BaseException | None] = []

    def init() -> None:
        try:
            ray.init(address=cluster, logging_level=logging.ERROR, log_to_driver=False)
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            outcome.append(exc)

    thread = threading.Thread(target=init, name="patchkit-ray-client-init", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise _ClientServerFailed(f"the Ray Client server did not answer within {timeout:g} s")
    error = outcome[0] if outcome else None
    if isinstance(error, ConnectionAbortedError) and "Initialization failure" in str(error):
        raise _ClientServerFailed("the Ray Client server failed to start")
    if error is not None:
        raise error


@dataclass(frozen=True)
class Node:
    node_id: str
    ip: str
    resources: Mapping[str, float] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    reason: str | None = None  # why it is left out (dead, draining); None: it takes an actor

    @property
    def name(self) -> str:
        return f"{self.ip}-{self.node_id[:SHORT_ID]}"

    def matches(self, wanted: NodeFilter) -> bool:
        """Has it the resources and labels? A dead node's resources are no longer listed (its
        labels are): it may have matched, so it counts as matching, to be named as left out."""
        unknown = self.reason is not None and not self.resources
        has = unknown or all(self.resources.get(k, 0.0) >= v for k, v in (wanted.resources or {}).items())
        return has and all(self.labels.get(k) == v for k, v in (wanted.labels or {}).items())


def node_state(entry: Mapping[str, Any], draining: Collection[str]) -> Node:
    """One entry of `ray.nodes()`: can it take an actor now?"""
    node_id = str(entry.get("NodeID", ""))
    reason = None
    if not entry.get("Alive"):
        why = str(entry.get("DeathReasonMessage") or "").strip()
        reason = "dead" + (f" ({why})" if why else "")
    elif node_id in draining:
        reason = "draining"
    return Node(node_id, str(entry.get("NodeManagerAddress", "?")), dict(entry.get("Resources") or {}),
                dict(entry.get("Labels") or {}), reason)


def nodes_from_state(entries: list[Mapping[str, Any]], draining: Collection[str] = ()) -> list[Node]:
    """The nodes of `ray.nodes()`, alive ones first, each in the order Ray lists them."""
    nodes = [node_state(e, draining) for e in entries]
    return [n for n in nodes if n.reason is None] + [n for n in nodes if n.reason is not None]


def draining_nodes(ray: ModuleType) -> Collection[str]:
    """Ids of the nodes being drained (Ray's GCS knows; through Ray Client it cannot be asked)."""
    try:
        from ray._private.state import state

        return set(state.get_draining_nodes())
    except Exception:  # noqa: BLE001 - not connected as a driver (Ray Client), or an older Ray
        return set()


def cluster_nodes(ray: ModuleType) -> list[Node]:
    return nodes_from_state(ray.nodes(), draining_nodes(ray))


def node_host(spec: RayNodes, defaults: Defaults, node: Node) -> HostSpec:
    """The host of one node: the inventory's defaults, then the group's settings."""
    merged = defaults.settings()
    merged.update(spec.host_settings())
    merged["vars"] = {**defaults.vars, **spec.vars}
    merged.update(name=node.name, address=node_address(spec.address, node.node_id))
    return HostSpec.model_validate(merged)


def resolve_ray_group(group: str, found: RayGroup, defaults: Defaults) -> tuple[list[HostSpec], list[str]]:
    """The alive matching nodes of a Ray group as hosts, and a note per matching node left out
    (HostError: Ray missing, the cluster unreachable, no alive node matches)."""
    spec = found.ray
    ray = connect(spec.address, f"group {group}")
    wanted = spec.nodes
    nodes = [n for n in cluster_nodes(ray) if wanted == "all" or n.matches(wanted)]
    hosts = [node_host(spec, defaults, n) for n in nodes if n.reason is None]
    notes = [f"group {group}: Ray node {n.name} left out: {n.reason}" for n in nodes if n.reason]
    if not hosts:
        which = "" if wanted == "all" else f" with {wanted}"
        gone = f" (left out: {len(notes)} dead or draining node(s))" if notes else ""
        raise HostError(f"group {group}: no alive node{which} in the Ray cluster at {spec.address}{gone}")
    return hosts, notes
