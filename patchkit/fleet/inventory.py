"""Inventories: which hosts, how to reach them, which interpreter and state dir they use.

A host has what every host has (name, address, python, user, state_dir, vars) and the options of
its address's scheme (`port:`, `engine_args:`, ...), written flat beside them; which schemes
there are, the form of their addresses and their options are the transports' (reach.py holds
what they declared). A group is a list of hosts and groups (or `{hosts: [...], vars: {...}}`),
a Kubernetes label selector resolved to running pods at run time, or the nodes of a Ray
cluster (raygroup.py), resolved to its alive nodes at run time.

Variables (`vars:`) on `defaults`, groups and hosts reach the recipe's `{{ }}` templates per host:
a host's own win over its groups', a group's over `defaults`'. Among a host's groups, as in
Ansible: parents first, then children, then by name (a child group's value wins).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Callable, ClassVar, TypeVar, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    SerializeAsAny,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from patchkit.fleet import patterns as hostpattern
from patchkit.base.errors import UsageError
from patchkit.fleet.raygroup import RayGroup
from patchkit.fleet.reach import (
    TransportOptions,
    entry_scheme,
    option_keys,
    raise_with,
    registered,
    scheme_of,
    take_options,
)
from patchkit.base.rollout import SerialField
from patchkit.base.yamlsource import load_yaml

K8S_NAME = re.compile(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?")  # RFC 1123: namespaces, pods, containers
O = TypeVar("O", bound=TransportOptions)
# Groups in groups (children of children ...) at most this deep: the walks over them recurse.
MAX_GROUP_DEPTH = 100


def too_deep(group: str, trail: tuple[str, ...] | frozenset[str]) -> None:
    """UsageError once a walk from `group` through `trail` passes MAX_GROUP_DEPTH groups."""
    if len(trail) >= MAX_GROUP_DEPTH:
        raise UsageError(f"group {group!r}: groups nested deeper than {MAX_GROUP_DEPTH} levels "
                         "(a group's children's children ...): not read")


class HostSpec(BaseModel):
    """One host: what every host has, and how it is reached (`options`, its scheme's: reach.py).

    The inventory writes a host's transport options flat, beside these keys (`port:`,
    `engine_args:`); they are read into `options`, the model its address's scheme declares."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = ""
    address: str | None = None  # `scheme://rest`, `local`, or an SSH host; none: the SSH host of the name
    python: str | None = None  # the target interpreter
    # Who the agent runs as: the SSH login, podman's and docker's `exec --user`; kubectl exec,
    # Ray and local cannot choose (the pod's, the raylet's, patchkit's own user).
    user: str | None = None
    state_dir: str | None = None  # the journal's folder on the host
    vars: dict[str, Any] = Field(default_factory=dict)  # for the recipe's templates (defaults' and groups' merged in)
    options: SerializeAsAny[TransportOptions] = Field(default_factory=TransportOptions)  # never written as such

    @model_validator(mode="wrap")
    @classmethod
    def _transport_options(cls, data: Any, handler: ModelWrapValidatorHandler[HostSpec]) -> HostSpec:
        if not isinstance(data, dict):
            return handler(data)
        scheme, problems = entry_scheme(data.get("address"), data.get("name"))  # in its scheme's words
        taken = take_options(data, _own_keys(cls), scheme)
        problems += taken.problems
        if problems or taken.options is None:
            try:
                handler(taken.own)  # its own keys' problems too
            except ValidationError as exc:
                raise_with(cls.__name__, problems, exc)
            raise_with(cls.__name__, problems)
        return handler({**taken.own, "options": taken.options})

    @classmethod
    def accepted_keys(cls) -> list[str]:
        """The keys an inventory's host entry may have: these, then every scheme's options."""
        return [*(key for key in cls.model_fields if key in _own_keys(cls)), *option_keys()]

    @property
    def scheme(self) -> str:
        """How the host is reached: a scheme registered in reach.py."""
        return scheme_of(self.address, self.name)

    def options_as(self, model: type[O]) -> O:
        """The host's options as its scheme's model says them (TypeError for another scheme's)."""
        if not isinstance(self.options, model):
            raise TypeError(f"host {self.name!r} is reached by {self.scheme}, not by the scheme of {model.__name__}")
        return self.options

    def settings(self) -> dict[str, Any]:
        """The host as flat inventory keys: its own, its options, then vars."""
        own = self.model_dump(exclude={"options", "vars"})
        return {**own, **self.options.model_dump(), "vars": self.vars}

    def given(self) -> dict[str, Any]:
        """The keys the entry set (flat), for defaults to fill the rest."""
        return {**self.model_dump(exclude_unset=True, exclude={"options"}), **self.options.model_dump(exclude_unset=True)}


@cache
def _own_keys(model: type[BaseModel]) -> frozenset[str]:
    return frozenset(key for key in model.model_fields if key != "options")


class _FlatOptions(BaseModel):
    """An entry that takes transport options flat beside its own keys, kept as given (flat):
    `defaults:` (every scheme's, for hosts of any scheme), a pod selector (k8s's)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    options: dict[str, Any] = Field(default_factory=dict)  # never written as such
    _schemes: ClassVar[tuple[str, ...] | None] = None  # whose options it takes; None: every scheme's

    @model_validator(mode="wrap")
    @classmethod
    def _transport_options(cls, data: Any, handler: ModelWrapValidatorHandler[_FlatOptions]) -> _FlatOptions:
        if not isinstance(data, dict):
            return handler(data)
        taken = take_options(data, _own_keys(cls), schemes=cls._schemes, null_unsets=True)
        if taken.problems:
            try:
                handler(taken.own)
            except ValidationError as exc:
                raise_with(cls.__name__, taken.problems, exc)
            raise_with(cls.__name__, taken.problems)
        return handler({**taken.own, "options": taken.given})

    @classmethod
    def accepted_keys(cls) -> list[str]:
        takes = option_keys() if cls._schemes is None else \
            [k for s in cls._schemes for k in registered()[s].options.model_fields]
        return [*(key for key in cls.model_fields if key in _own_keys(cls)), *dict.fromkeys(takes)]


class Defaults(_FlatOptions):
    """What every host of the inventory gets unless it sets it: its own keys, and options of
    every scheme (a host takes those of its own scheme)."""

    python: str | None = None
    user: str | None = None
    state_dir: str | None = None
    vars: dict[str, Any] = Field(default_factory=dict)

    def settings(self) -> dict[str, Any]:
        """The defaults set, as flat host keys (vars apart)."""
        own = {k: v for k, v in self.model_dump(exclude={"options", "vars"}).items() if v is not None}
        return {**own, **self.options}


class GroupSpec(BaseModel):
    """A group with variables: its members (hosts and groups), and what they all get."""

    model_config = ConfigDict(extra="forbid", strict=True)

    hosts: list[str]
    vars: dict[str, Any] = Field(default_factory=dict)


class PodSelector(_FlatOptions):
    """A group of pods: those matching a label selector in a namespace, resolved at run time
    (`kubectl get pods -l SELECTOR -n NAMESPACE -o json`; pods not running are left out, each
    with the reason). Each pod becomes a host `NAMESPACE/POD` at `k8s://NAMESPACE/POD[/CONTAINER]`
    with the inventory's defaults, then what is set here (the k8s scheme's options too)."""

    _schemes = ("k8s",)

    k8s_selector: str = Field(min_length=1)
    namespace: str = "default"
    container: str | None = None  # the container in each pod (-c); None: the pod's default
    python: str | None = None
    state_dir: str | None = None
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
        settings: dict[str, object] = {k: v for k, v in (("python", self.python), ("state_dir", self.state_dir))
                                       if v is not None}
        settings.update(self.options)
        if self.vars:
            settings["vars"] = dict(self.vars)
        return settings


def _group_kind(members: object) -> str:
    if isinstance(members, RayGroup) or (isinstance(members, dict) and "ray" in members):
        return "ray"  # the nodes of a Ray cluster (raygroup.py)
    if isinstance(members, PodSelector) or (isinstance(members, dict) and "k8s_selector" in members):
        return "selector"
    if isinstance(members, dict) and "hosts" not in members and "vars" not in members \
            and set(members) & set(PodSelector.accepted_keys()):
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
            merged = self.defaults.settings()
            merged.update(host.given())
            merged["name"] = name
            merged["vars"] = {**self.defaults.vars, **group_vars.get(name, {}), **host.vars}
            out[name] = HostSpec.model_validate(merged)
        return out

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
