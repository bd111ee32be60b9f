"""Inventories: which hosts, how to reach them, which interpreter and state dir they use.

An address names the way in: `scheme://rest`, or a bare address (`local` is this machine,
anything else an SSH host). A host without an address is the SSH host of its name, resolved
through ~/.ssh/config as Ansible does; only the name `localhost` is this machine then. Which schemes there are, and what their addresses look
like, is the transports' business (host/transport/schemes.py); this module only splits them. A group is a list of
hosts and groups (or `{hosts: [...], vars: {...}}`), a Kubernetes label selector resolved to running
pods at run time, or the nodes of a Ray cluster (raygroup.py), resolved to its alive nodes at run time.

Variables (`vars:`) on `defaults`, groups and hosts reach the recipe's `{{ }}` templates per host:
a host's own win over its groups', a group's over `defaults`'. Among a host's groups, as in
Ansible: parents first, then children, then by name (a child group's value wins).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)

from patchkit.fleet import patterns as hostpattern
from patchkit.base.errors import UsageError
from patchkit.fleet.raygroup import RayGroup
from patchkit.base.rollout import SerialField
from patchkit.base.yamlsource import load_yaml

K8S_NAME = re.compile(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?")  # RFC 1123: namespaces, pods, containers
# Groups in groups (children of children ...) at most this deep: the walks over them recurse.
MAX_GROUP_DEPTH = 100


def too_deep(group: str, trail: tuple[str, ...] | frozenset[str]) -> None:
    """UsageError once a walk from `group` through `trail` passes MAX_GROUP_DEPTH groups."""
    if len(trail) >= MAX_GROUP_DEPTH:
        raise UsageError(f"group {group!r}: groups nested deeper than {MAX_GROUP_DEPTH} levels "
                         "(a group's children's children ...): not read")


def split_address(address: str | None) -> tuple[str | None, str]:
    """`scheme://rest` as (scheme, rest); a bare address (none: "") as (None, address). What a
    scheme means, and whether `rest` is well formed, is the transport's (host/transport/schemes.py)."""
    if address is None or "://" not in address:
        return None, address or ""
    scheme, _, rest = address.partition("://")
    return scheme, rest

# Which SSH client reaches a host: the embedded asyncssh (default) or the system OpenSSH `ssh`
# (its own config and auth features, and a faster data path for bulk deploys).
SSHClient = Literal["asyncssh", "openssh"]
# How the host agent starts over SSH: its source on stdin (one round trip after the exec), or
# in the exec's command line (~20 KB of base64 in argv, visible in `ps`; docs/fleets.md).
AgentStart = Literal["stdin", "command"]


class HostSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = ""
    address: str | None = None
    port: int | None = Field(default=None, ge=1, le=65535)
    user: str | None = None
    python: str | None = None
    identity_file: str | None = None
    known_hosts: str | None = None
    state_dir: str | None = None
    become: bool = False
    ssh_client: SSHClient = "asyncssh"
    agent_start: AgentStart = "stdin"
    # Containers and pods (podman://, docker://, k8s://): the engine binary (default podman,
    # docker or kubectl, found on PATH), arguments it takes before its command (`--runtime
    # runc`, `--cgroup-manager=cgroupfs`, `--kubeconfig` is below), kubectl's config and context.
    engine: str | None = None
    engine_args: list[str] = Field(default_factory=list)
    kubeconfig: str | None = None
    context: str | None = None
    vars: dict[str, Any] = Field(default_factory=dict)  # for the recipe's templates (defaults' and groups' merged in)

    @field_validator("address")
    @classmethod
    def _address_form(cls, address: str | None) -> str | None:
        if address is not None:
            if not address.strip():
                raise ValueError("address is empty: leave it out (the host's name is its SSH host) or write `local`")
            from patchkit.host.transport import schemes  # its transport checks the form (imported then)

            schemes.check(address)
        return address

    @property
    def scheme(self) -> str:
        """How the host is reached: the key of host/transport/schemes.py's table."""
        from patchkit.host.transport.schemes import scheme_of

        return scheme_of(self.address, self.name)


class Defaults(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    port: int | None = Field(default=None, ge=1, le=65535)
    user: str | None = None
    python: str | None = None
    identity_file: str | None = None
    known_hosts: str | None = None
    state_dir: str | None = None
    become: bool | None = None
    ssh_client: SSHClient | None = None
    agent_start: AgentStart | None = None
    engine: str | None = None
    engine_args: list[str] | None = None
    kubeconfig: str | None = None
    context: str | None = None
    vars: dict[str, Any] = Field(default_factory=dict)


class GroupSpec(BaseModel):
    """A group with variables: its members (hosts and groups), and what they all get."""

    model_config = ConfigDict(extra="forbid", strict=True)

    hosts: list[str]
    vars: dict[str, Any] = Field(default_factory=dict)


class PodSelector(BaseModel):
    """A group of pods: those matching a label selector in a namespace, resolved at run time
    (`kubectl get pods -l SELECTOR -n NAMESPACE -o json`; pods not running are left out, each
    with the reason). Each pod becomes a host `NAMESPACE/POD` at `k8s://NAMESPACE/POD[/CONTAINER]`
    with the inventory's defaults, then what is set here."""

    model_config = ConfigDict(extra="forbid", strict=True)

    k8s_selector: str = Field(min_length=1)
    namespace: str = "default"
    container: str | None = None  # the container in each pod (-c); None: the pod's default
    python: str | None = None
    state_dir: str | None = None
    engine: str | None = None  # kubectl
    engine_args: list[str] | None = None
    kubeconfig: str | None = None
    context: str | None = None
    vars: dict[str, Any] = Field(default_factory=dict)  # every pod's, over the defaults'

    @field_validator("namespace", "container")
    @classmethod
    def _kubernetes_name(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and not K8S_NAME.fullmatch(value):
            raise ValueError(f"{info.field_name} {value!r} is not a Kubernetes name "
                             "(lower-case letters, digits, '-' and '.')")
        return value

    def host_settings(self) -> dict[str, object]:
        """What a pod of this group takes from the selector (over the inventory's defaults)."""
        keep = ("python", "state_dir", "engine", "engine_args", "kubeconfig", "context")
        settings = {k: v for k, v in self.model_dump(include=set(keep)).items() if v is not None}
        if self.vars:
            settings["vars"] = dict(self.vars)
        return settings


def _group_kind(members: object) -> str:
    if isinstance(members, RayGroup) or (isinstance(members, dict) and "ray" in members):
        return "ray"  # the nodes of a Ray cluster (raygroup.py)
    if isinstance(members, PodSelector) or (isinstance(members, dict) and "k8s_selector" in members):
        return "selector"
    if isinstance(members, dict) and "hosts" not in members and "vars" not in members \
            and set(members) & set(PodSelector.model_fields):
        return "selector"  # a selector missing its k8s_selector: that is the error to name
    return "spec" if isinstance(members, (dict, GroupSpec)) else "list"


# A group: a list of hosts and groups, a mapping of them with vars, a pod selector (a mapping with
# k8s_selector) or Ray nodes (a mapping with ray). Told apart by shape, so an error names the list
# item or the key, not every form.
GroupMembers = Annotated[Union[Annotated[list[str], Tag("list")], Annotated[GroupSpec, Tag("spec")],
                               Annotated[PodSelector, Tag("selector")], Annotated[RayGroup, Tag("ray")]],
                         Discriminator(_group_kind)]
Resolved = Union[PodSelector, RayGroup]  # a group resolved at run time
RESOLVED = (PodSelector, RayGroup)


def members_of(group: list[str] | GroupSpec) -> list[str]:
    return group.hosts if isinstance(group, GroupSpec) else group


@dataclass(frozen=True)
class Selected:
    """The hosts chosen, and notes on what a selector left out (shown before the run)."""

    hosts: list[HostSpec]
    notes: list[str]


# Resolves a selector or Ray group to its running pods' (alive nodes') hosts, and notes on those left out.
SelectorResolver = Callable[[str, Resolved, "Defaults"], tuple[list[HostSpec], list[str]]]


class Inventory(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    hosts: dict[str, HostSpec]  # may be empty ({}) when a selector group brings the hosts
    groups: dict[str, GroupMembers] = Field(default_factory=dict)
    defaults: Defaults = Field(default_factory=Defaults)
    serial: SerialField = None  # rollout batches, e.g. [1, 10%, 100%] (rollout.py)
    # A selector group's own inventory's defaults, when several inventories were merged (sources.py).
    _selector_defaults: dict[str, Defaults] = PrivateAttr(default_factory=dict)

    @field_validator("groups")
    @classmethod
    def _groups_name_hosts(cls, groups: dict[str, list[str] | GroupSpec | Resolved],
                           info: ValidationInfo) -> dict[str, list[str] | GroupSpec | Resolved]:
        hosts = info.data.get("hosts")
        if hosts is None:  # hosts did not validate: that is the error to report
            return groups
        for group, members in groups.items():
            if group in hosts:
                raise ValueError(f"group {group!r} has the name of a host")
            if isinstance(members, RESOLVED):
                continue
            for member in members_of(members):
                if member not in hosts and member not in groups:
                    raise ValueError(f"group {group!r} names unknown host {member!r}")
        return groups

    @model_validator(mode="after")
    def _groups_nest_within_limit(self) -> Inventory:
        try:
            self.group_vars()  # walks every chain of groups up from a host
        except UsageError as exc:
            raise ValueError(str(exc)) from None
        return self

    @model_validator(mode="after")
    def _some_host(self) -> Inventory:
        if not self.hosts and not any(isinstance(g, RESOLVED) for g in self.groups.values()):
            raise ValueError("hosts: an inventory needs at least one host (or a group with a k8s_selector or "
                             "`ray:`; then write `hosts: {}`)")
        return self

    def resolved(self) -> dict[str, HostSpec]:
        out = {}
        group_vars = self.group_vars()
        for name, host in self.hosts.items():
            merged = self.merged_defaults()
            merged.update(host.model_dump(exclude_unset=True))
            merged["name"] = name
            merged["vars"] = {**self.defaults.vars, **group_vars.get(name, {}), **host.vars}
            out[name] = HostSpec.model_validate(merged)
        return out

    def merged_defaults(self) -> dict[str, object]:
        return {k: v for k, v in self.defaults.model_dump().items() if v is not None and k != "vars"}

    def group_vars(self) -> dict[str, dict[str, Any]]:
        """host -> the variables its groups give it: parents first, then children (deeper), then
        by name, as Ansible orders them; a later group's value wins."""
        parents: dict[str, set[str]] = {}
        direct: dict[str, set[str]] = {}
        for group, found in self.groups.items():
            if isinstance(found, RESOLVED):
                continue
            for member in members_of(found):
                (parents if member in self.groups else direct).setdefault(member, set()).add(group)
        depth: dict[str, int] = {}

        def depth_of(group: str, trail: frozenset[str] = frozenset()) -> int:
            if group not in depth:
                too_deep(group, trail)
                up = [p for p in parents.get(group, set()) if p not in trail]
                depth[group] = 1 + max((depth_of(p, trail | {group}) for p in up), default=-1)
            return depth[group]

        out: dict[str, dict[str, Any]] = {}
        for host, groups in direct.items():
            seen: set[str] = set()
            todo = list(groups)
            while todo:
                group = todo.pop()
                if group not in seen:
                    seen.add(group)
                    todo.extend(parents.get(group, set()))
            merged: dict[str, Any] = {}
            for group in sorted(seen, key=lambda g: (depth_of(g), g)):
                spec = self.groups[group]
                if isinstance(spec, GroupSpec):
                    merged.update(spec.vars)
            out[host] = merged
        return out

    def select(self, pattern: str | None, resolve: SelectorResolver | None = None) -> Selected:
        """The hosts the `-l` pattern selects (hostpattern.py: `all`, globs, `!x`, `a:&b`, `a,b`);
        without one, all hosts and selector groups. A selector group is resolved with `resolve`
        (a UsageError without one), and only when the pattern reaches it."""
        hosts = self.resolved()
        pods: dict[str, HostSpec] = {}
        notes: list[str] = []
        flat: dict[str, list[str]] = {}

        def members(group: str, trail: tuple[str, ...] = ()) -> list[str]:
            if group in flat:
                return flat[group]
            too_deep(group, trail)
            found = self.groups[group]
            names: list[str] = []
            if isinstance(found, RESOLVED):
                if resolve is None:
                    how = "by kubectl" if isinstance(found, PodSelector) else "from the Ray cluster"
                    raise UsageError(f"group {group!r} is resolved {how} at run time")
                running, left_out = resolve(group, found, self._selector_defaults.get(group, self.defaults))
                notes.extend(left_out)
                for pod in running:
                    pods.setdefault(pod.name, pod)
                names = [pod.name for pod in running]
            else:
                for member in members_of(found):
                    if member in hosts:
                        names.append(member)
                    elif member in self.groups and member not in trail:
                        names.extend(members(member, trail + (group,)))
            flat[group] = names
            return names

        if pattern:
            chosen = hostpattern.select(pattern, list(hosts), list(self.groups), members)
        else:
            chosen = list(hosts)
            for group, found in self.groups.items():
                if isinstance(found, RESOLVED):
                    chosen += [name for name in members(group) if name not in chosen]
        return Selected([hosts[name] if name in hosts else pods[name] for name in chosen], notes)


def load_inventory(path: str | Path) -> Inventory:
    loaded = load_yaml(Path(path))
    return loaded.validate(Inventory.model_validate)


def local_inventory() -> Inventory:
    return Inventory(hosts={"local": HostSpec(name="local", address="local")})
