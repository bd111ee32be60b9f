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

import json
from types import UnionType
from typing import TYPE_CHECKING, Literal, Protocol, Union, get_args, get_origin

from pydantic.fields import FieldInfo

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
    """docs/inventory.md's reference of every scheme's options, made from the models: per scheme
    its address form and what its options model says, then a table of its options."""
    out: list[str] = []
    for name, scheme in SCHEMES.items():
        model = scheme.options
        out += [f"### `{name}`: {scheme.form}", "", " ".join((model.__doc__ or "").split()), ""]
        if model.model_fields:
            out += ["| option | type | default | description |", "|---|---|---|---|"]
            out += [f"| `{key}` | {_type_words(field.annotation)} | {_default(field)} | {_cell(field.description or '')} |"
                    for key, field in model.model_fields.items()]
            out.append("")
    return "\n".join(out)


def _type_words(annotation: object) -> str:
    """A field's type as the inventory's YAML writes it."""
    args = [a for a in get_args(annotation) if a is not type(None)]
    if get_origin(annotation) is Literal:
        return " or ".join(f"`{a}`" for a in args)
    if get_origin(annotation) in (Union, UnionType):
        return " or ".join(_type_words(a) for a in args)
    if get_origin(annotation) is list:
        return f"list of {_type_words(args[0])}s"
    words: dict[object, str] = {str: "string", int: "integer", bool: "`true` or `false`", float: "number"}
    return words.get(annotation, str(annotation))


def _default(field: FieldInfo) -> str:
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "—"
    return f"`{json.dumps(value)}`" if not isinstance(value, str) else f"`{value}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")
