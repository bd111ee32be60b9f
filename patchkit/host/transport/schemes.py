"""How a host is reached, by its address: one row per scheme, and nothing else names them.

`inventory.split_address` cuts `scheme://rest`; a bare address is `local` (this machine) or
an SSH host; a host with no address is the SSH host of its name (`localhost`: this machine). Each row's transport class reads its own address form
(`check_address`, with its own message) and builds itself from the host's inventory entry
(`for_host`). A row imports its class's module only when a host uses the scheme, so an SSH
run never imports the container code and a container run never imports asyncssh.

Adding a scheme: its transport module (a class with `check_address` and `for_host`), a
loader and a row here, and its tests (tests/unit/test_schemes.py asks for an example address).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from patchkit.fleet.inventory import split_address

if TYPE_CHECKING:
    from patchkit.fleet.inventory import HostSpec
    from patchkit.host.transport.base import HostTransport, Reach, Transport


def _local() -> type[HostTransport]:
    from patchkit.host.transport.local import LocalTransport

    return LocalTransport


def _ssh() -> type[HostTransport]:
    from patchkit.host.transport.ssh_common import SSHScheme

    return SSHScheme


def _container() -> type[HostTransport]:
    from patchkit.host.transport.container import ContainerTransport

    return ContainerTransport


def _ray() -> type[HostTransport]:
    from patchkit.host.transport.raytransport import RayTransport  # Ray itself loads only when a host starts

    return RayTransport


@dataclass(frozen=True)
class Scheme:
    form: str  # how its addresses are written, for messages
    transport: Callable[[], type[HostTransport]]  # the class, imported on first use
    written: bool = True  # False: reached by a bare address, never written `scheme://`


SCHEMES: dict[str, Scheme] = {
    "local": Scheme("`local` (this machine)", _local, written=False),
    "ssh": Scheme("a host name or address (SSH)", _ssh, written=False),
    "podman": Scheme("podman://CONTAINER", _container),
    "docker": Scheme("docker://CONTAINER", _container),
    "k8s": Scheme("k8s://NAMESPACE/POD[/CONTAINER]", _container),
    "ray": Scheme("ray://HEAD:PORT/NODE_ID (a Ray node)", _ray),
}


def scheme_of(address: str | None, name: str | None = None) -> str:
    """The scheme an address names (a key of SCHEMES, once `check` accepted the address). A host
    without an address is reached, as Ansible does, by its name over SSH (~/.ssh/config may
    alias it); only `local`, or no address on the host named `localhost`, is this machine."""
    scheme, rest = split_address(address)
    if scheme is not None:
        return scheme
    if not rest:
        return "local" if name == "localhost" else "ssh"
    return "local" if rest == "local" else "ssh"


def check(address: str) -> None:
    """ValueError (one line) unless `address` is an address of one of the schemes."""
    written, rest = split_address(address)
    scheme = scheme_of(address)
    row = SCHEMES.get(scheme)
    if row is None or (written is not None) != row.written:
        forms = ", ".join(s.form for s in SCHEMES.values())
        raise ValueError(f"address {address!r}: unknown scheme {scheme + '://'!r}; an address is one of: {forms}")
    row.transport().check_address(scheme, rest)


def transport_for(host: HostSpec, reach: Reach) -> Transport:
    """The transport that reaches `host`, by its address's scheme."""
    return SCHEMES[scheme_of(host.address, host.name)].transport().for_host(host, reach)
