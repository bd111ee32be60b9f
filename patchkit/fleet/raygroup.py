"""The inventory's Ray group form: every alive node of a Ray cluster that matches, at run time.

    groups:
      cluster:
        ray:
          address: ray://HEAD:10001   # Ray Client; or `auto`, or HOST:PORT (the GCS, as `ray start` takes)
          nodes: all                  # or {resources: {GPU: 1}} or {labels: {zone: b}}
          python: /opt/venv/bin/python
          state_dir: /var/lib/patchkit

Only the form lives here (pure, no Ray): the transport (host/transport/raycluster.py) lists the
cluster's nodes and turns the matching alive ones into hosts `ray://.../NODE_ID` (the ray
scheme's addresses: host/transport/ray_scheme.py).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_HOST_PORT = re.compile(r"[A-Za-z0-9_.-]+:[0-9]{1,5}|\[[0-9A-Fa-f:.]+\]:[0-9]{1,5}")


def cluster_form(address: str) -> str | None:
    """What is wrong with a cluster address (`ray://HOST:PORT`, `auto`, `HOST:PORT`), or None."""
    if address == "auto":
        return None
    rest = address.removeprefix("ray://")
    if rest == address and "://" in address:
        return f"cluster address {address!r}: only ray:// (Ray Client) is a scheme here"
    if not _HOST_PORT.fullmatch(rest):
        return f"cluster address {address!r}: want ray://HOST:PORT (Ray Client), `auto` or HOST:PORT (the GCS)"
    return None


class NodeFilter(BaseModel):
    """Nodes that have at least these amounts of resources and exactly these labels."""

    model_config = ConfigDict(extra="forbid", strict=True)

    resources: dict[str, float] | None = None
    labels: dict[str, str] | None = None

    @model_validator(mode="after")
    def _something(self) -> NodeFilter:
        if not self.resources and not self.labels:
            raise ValueError("nodes: give `all`, or `resources:` and/or `labels:` a node must have")
        return self

    def __str__(self) -> str:
        parts = [f"{k}>={v:g}" for k, v in (self.resources or {}).items()]
        parts += [f"{k}={v}" for k, v in (self.labels or {}).items()]
        return ", ".join(parts)


class RayNodes(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    address: str = "auto"
    nodes: Literal["all"] | NodeFilter = "all"
    python: str | None = None
    state_dir: str | None = None
    vars: dict[str, Any] = Field(default_factory=dict)  # every node's, over the defaults'

    @field_validator("address")
    @classmethod
    def _address_form(cls, address: str) -> str:
        wrong = cluster_form(address)
        if wrong:
            raise ValueError(wrong)
        return address

    def host_settings(self) -> dict[str, object]:
        """What a node of this group takes from the group (over the inventory's defaults)."""
        return {k: v for k, v in (("python", self.python), ("state_dir", self.state_dir)) if v is not None}


class RayGroup(BaseModel):
    """A group `{ray: {...}}`: the matching alive nodes of a Ray cluster, resolved at run time."""

    model_config = ConfigDict(extra="forbid", strict=True)

    ray: RayNodes = Field(default_factory=RayNodes)
