"""The `ray` scheme: `ray://CLUSTER/NODE_ID`, a node of a Ray cluster, where CLUSTER is
`HEAD:PORT` (Ray Client at ray://HEAD:PORT), `auto`, or `gcs/HOST:PORT` (a GCS address) and
NODE_ID the node's hex id (or a prefix of at least 8 of its digits). The agent is started by
an actor pinned to the node (raytransport.py, imported only for a Ray host; Ray itself only
once the host starts). A Ray group of the inventory (fleet/raygroup.py) becomes such hosts.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from patchkit.fleet.raygroup import cluster_form
from patchkit.fleet.reach import TransportOptions

if TYPE_CHECKING:
    from patchkit.fleet.inventory import HostSpec
    from patchkit.host.transport.base import Reach, Transport

NODE_FORM = "ray://HEAD:PORT/NODE_ID, ray://auto/NODE_ID or ray://gcs/HOST:PORT/NODE_ID"
_NODE_ID = re.compile(r"[0-9a-f]{8,56}")


def node_address(cluster: str, node_id: str) -> str:
    """The host address of node `node_id` of the cluster at `cluster` (a group's `address`)."""
    if cluster == "auto":
        return f"ray://auto/{node_id}"
    if cluster.startswith("ray://"):
        return f"{cluster}/{node_id}"
    return f"ray://gcs/{cluster}/{node_id}"


def parse_node_address(rest: str) -> tuple[str, str]:
    """(the cluster address to connect to, the node id) of `ray://REST`; ValueError (one line)."""
    parts = rest.split("/")
    if len(parts) == 3 and parts[0] == "gcs":
        cluster, node = parts[1], parts[2]
    elif len(parts) == 2:
        cluster, node = (parts[0] if parts[0] == "auto" else f"ray://{parts[0]}"), parts[1]
    else:
        raise ValueError(f"address 'ray://{rest}': want {NODE_FORM}")
    wrong = cluster_form(cluster)
    if wrong:
        raise ValueError(f"address 'ray://{rest}': {wrong}")
    if not _NODE_ID.fullmatch(node):
        raise ValueError(f"address 'ray://{rest}': node id {node!r} is not a Ray node id "
                         "(8 to 56 lower-case hex digits)")
    return cluster, node


class RayOptions(TransportOptions):
    """Ray nodes: the address names the cluster and the node; nothing else to choose."""


class RayScheme:
    form = "ray://HEAD:PORT/NODE_ID (a Ray node)"
    written = True
    options = RayOptions

    def check_address(self, rest: str) -> None:
        parse_node_address(rest)

    def for_host(self, host: HostSpec, reach: Reach) -> Transport:
        from patchkit.host.transport.raytransport import RayTransport

        cluster, node_id = parse_node_address((host.address or "").removeprefix("ray://"))
        return RayTransport(host.name, cluster, node_id)

    def reported(self, host: HostSpec) -> tuple[str, str]:
        return "ray", host.address or host.name
