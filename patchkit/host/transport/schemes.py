"""How a host is reached, by its address: one row per scheme, and nothing else names them.

Each row is a scheme declared in its own module: the form of its addresses and their parser
(`check_address`, in its own words), its options (a pydantic model, each field described:
what the inventory accepts for its hosts), and how a transport is built for a host
(`for_host`). Importing this module registers every row with the inventory (fleet/reach.py),
which reads addresses and options with them. The scheme modules are light: each imports its
transport's own code only when a host of its scheme is reached, so an SSH run never imports
the container code and a container run never imports asyncssh.

Adding a scheme: its module (a class like podman.py's or local.py's), a row here, and its
tests (tests/unit/test_schemes.py asks for an example address and a test that reaches a host
of the scheme for real; docs/inventory.md's table of options is checked against the models).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from patchkit.fleet import reach
from patchkit.fleet.reach import SchemeForm, scheme_of
from patchkit.host.transport.docker import DockerScheme
from patchkit.host.transport.k8s import KubectlScheme
from patchkit.host.transport.local import LocalScheme
from patchkit.host.transport.podman import PodmanScheme
from patchkit.host.transport.ray_scheme import RayScheme
from patchkit.host.transport.ssh_scheme import SSHScheme

if TYPE_CHECKING:
    from patchkit.fleet.inventory import HostSpec
    from patchkit.host.transport.base import Reach, Transport


class Scheme(SchemeForm, Protocol):
    """A scheme as the run uses it: what the inventory reads (SchemeForm), and its transport."""

    def for_host(self, host: HostSpec, reach: Reach) -> Transport:
        """The transport that reaches `host` (a host of this scheme), not started yet."""

    def reported(self, host: HostSpec) -> tuple[str, str]:
        """How the report names the host's transport (`ssh/openssh`) and its address."""


SCHEMES: dict[str, Scheme] = {
    "local": LocalScheme(),
    "ssh": SSHScheme(),
    "podman": PodmanScheme(),
    "docker": DockerScheme(),
    "k8s": KubectlScheme(),
    "ray": RayScheme(),
}

for _name, _scheme in SCHEMES.items():
    reach.register(_name, _scheme)


def transport_for(host: HostSpec, reach: Reach) -> Transport:
    """The transport that reaches `host`, by its address's scheme."""
    return SCHEMES[scheme_of(host.address, host.name)].for_host(host, reach)


def reported(host: HostSpec) -> tuple[str, str]:
    """How a host is reached, and at what address, as the report says it."""
    return SCHEMES[scheme_of(host.address, host.name)].reported(host)


def options_reference() -> str:
    """docs/inventory.md's table of every scheme's options, from the models' descriptions."""
    lines = ["| scheme | option | type | description |", "|---|---|---|---|"]
    for name, scheme in SCHEMES.items():
        fields = scheme.options.model_fields
        if not fields:
            lines.append(f"| `{name}` | — | — | {_cell(scheme.options.__doc__ or '')} |")
        for key, field in fields.items():
            kind = str(field.annotation).replace("typing.", "").replace("NoneType", "None")
            lines.append(f"| `{name}` | `{key}` | `{kind}` | {_cell(field.description or '')} |")
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")
