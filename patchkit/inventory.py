"""Inventories: which hosts, how to reach them, which interpreter and state dir they use."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from patchkit.errors import UsageError
from patchkit.yamlsource import load_yaml

LOCAL_ADDRESSES = {None, "", "local"}

# Which SSH client reaches a host: the embedded asyncssh (default) or the system OpenSSH `ssh`
# (its own config and auth features, and a faster data path for bulk deploys).
SSHClient = Literal["asyncssh", "openssh"]


class HostSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = ""
    address: str | None = None
    port: int | None = Field(None, ge=1, le=65535)
    user: str | None = None
    python: str | None = None
    identity_file: str | None = None
    known_hosts: str | None = None
    state_dir: str | None = None
    become: bool = False
    ssh_client: SSHClient = "asyncssh"

    @property
    def is_local(self) -> bool:
        return self.address in LOCAL_ADDRESSES


class Defaults(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    port: int | None = Field(None, ge=1, le=65535)
    user: str | None = None
    python: str | None = None
    identity_file: str | None = None
    known_hosts: str | None = None
    state_dir: str | None = None
    become: bool | None = None
    ssh_client: SSHClient | None = None


class Inventory(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    hosts: dict[str, HostSpec] = Field(min_length=1)
    groups: dict[str, list[str]] = Field(default_factory=dict)
    defaults: Defaults = Field(default_factory=Defaults)

    @field_validator("groups")
    @classmethod
    def _groups_name_hosts(cls, groups: dict[str, list[str]], info: ValidationInfo) -> dict[str, list[str]]:
        hosts = info.data.get("hosts")
        if hosts is None:  # hosts did not validate: that is the error to report
            return groups
        for group, members in groups.items():
            if group in hosts:
                raise ValueError(f"group {group!r} has the name of a host")
            for member in members:
                if member not in hosts and member not in groups:
                    raise ValueError(f"group {group!r} names unknown host {member!r}")
        return groups

    def resolved(self) -> dict[str, HostSpec]:
        out = {}
        for name, host in self.hosts.items():
            merged = {k: v for k, v in self.defaults.model_dump().items() if v is not None}
            merged.update(host.model_dump(exclude_unset=True))
            merged["name"] = name
            out[name] = HostSpec.model_validate(merged)
        return out

    def select(self, limit: list[str] | None) -> list[HostSpec]:
        hosts = self.resolved()
        if not limit:
            return list(hosts.values())
        chosen: list[str] = []

        def add(name: str, trail: tuple[str, ...]) -> None:
            if name in hosts:
                if name not in chosen:
                    chosen.append(name)
            elif name in self.groups and name not in trail:
                for member in self.groups[name]:
                    add(member, trail + (name,))
            elif name not in self.groups:
                raise UsageError(f"-l: {name!r} is neither a host nor a group of the inventory")

        for name in limit:
            add(name, ())
        return [hosts[n] for n in chosen]


def load_inventory(path: str | Path) -> Inventory:
    loaded = load_yaml(Path(path))
    return loaded.validate(Inventory.model_validate)


def local_inventory() -> Inventory:
    return Inventory(hosts={"local": HostSpec(name="local")})
