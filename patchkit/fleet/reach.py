"""How a host is reached, as the inventory sees it: its address's scheme, and that scheme's options.

An address is `scheme://rest`, or bare: `local` is this machine, anything else an SSH host;
a host without an address is the SSH host of its name (only `localhost` is this machine
then), as Ansible does. What each scheme is (the form of its addresses, the options its
hosts take) is declared by its transport: host/transport/schemes.py registers every scheme
here, once, when it is imported (the CLI does before it reads an inventory). This module
names no transport and imports nothing of host/: it holds the registry and reads inventory
entries with it.

A scheme's options are a pydantic model (`TransportOptions`), each field with a description
(the inventory's reference in docs/inventory.md is made from them). In the inventory they
are written flat, beside the host's own keys (`engine_args:` next to `python:`), as ever:
`take_options` splits them off and reads them with the model of the host's scheme, kept as
`HostSpec.options`; a key only other schemes take (`engine:` on an SSH host, e.g. from
`defaults:`) is checked with their model, and has no effect.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import InitErrorDetails

# The bare schemes: an address without `://` is one of these (scheme_of).
LOCAL = "local"
SSH = "ssh"


class TransportOptions(BaseModel):
    """What the inventory accepts for the hosts of one scheme. Every field has a default and a
    description; a key means the same (same type) in every scheme that declares it."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)


class SchemeForm(Protocol):
    """What the inventory needs of a scheme; its transport declares it (host/transport/)."""

    @property
    def form(self) -> str:
        """How its addresses are written, for messages (`podman://CONTAINER`)."""

    @property
    def written(self) -> bool:
        """True: addresses are written `scheme://rest`; False: a bare address (local, ssh)."""

    @property
    def options(self) -> type[TransportOptions]:
        """The options its hosts take (may have no field)."""

    def check_address(self, rest: str) -> None:
        """ValueError, one line naming the form wanted, when `scheme://rest` (the whole bare
        address for local and ssh) is not an address of this scheme."""


_SCHEMES: dict[str, SchemeForm] = {}


def register(name: str, scheme: SchemeForm) -> None:
    """Make `name` a scheme of inventory addresses (host/transport/schemes.py, at its import)."""
    _SCHEMES[name] = scheme
    _OWNERS.clear()


def registered() -> Mapping[str, SchemeForm]:
    """Every scheme; an inventory cannot be read before the transports declared theirs."""
    if not _SCHEMES:
        raise RuntimeError("no transport scheme is registered: import patchkit.host.transport.schemes "
                           "before reading an inventory (it declares every scheme)")
    return _SCHEMES


def split_address(address: str | None) -> tuple[str | None, str]:
    """`scheme://rest` as (scheme, rest); a bare address (none: "") as (None, address). What a
    scheme means, and whether `rest` is well formed, is the scheme's (`check`)."""
    if address is None or "://" not in address:
        return None, address or ""
    scheme, _, rest = address.partition("://")
    return scheme, rest


def scheme_of(address: str | None, name: str | None = None) -> str:
    """The scheme an address names (registered, once `check` accepted the address). A host
    without an address is reached, as Ansible does, by its name over SSH (~/.ssh/config may
    alias it); only `local`, or no address on the host named `localhost`, is this machine."""
    scheme, rest = split_address(address)
    if scheme is not None:
        return scheme
    if not rest:
        return LOCAL if name == "localhost" else SSH
    return LOCAL if rest == "local" else SSH


def check(address: str) -> None:
    """ValueError (one line) unless `address` is an address of one of the schemes."""
    if not address.strip():
        raise ValueError("address is empty: leave it out (the host's name is its SSH host) or write `local`")
    schemes = registered()
    written, rest = split_address(address)
    scheme = scheme_of(address)
    row = schemes.get(scheme)
    if row is None or (written is not None) != row.written:
        forms = ", ".join(s.form for s in schemes.values())
        raise ValueError(f"address {address!r}: unknown scheme {scheme + '://'!r}; an address is one of: {forms}")
    row.check_address(rest)


def entry_scheme(address: object, name: object) -> tuple[str | None, list[InitErrorDetails]]:
    """The scheme of a host entry's address (None: no scheme takes it, or it is no string,
    which the entry's own model reports), and the address's problem, at its key."""
    if address is not None:
        if not isinstance(address, str):
            return None, []
        try:
            check(address)
        except ValueError as exc:
            return None, [InitErrorDetails(type="value_error", loc=("address",), input=address, ctx={"error": exc})]
    return scheme_of(address, name if isinstance(name, str) else None), []


_OWNERS: dict[str, list[str]] = {}  # option key -> the schemes declaring it, for `_owners_from`
_owners_from: object = None  # the registry _OWNERS was made from


def owners(key: str) -> list[str]:
    """The schemes whose options declare `key`."""
    global _owners_from
    schemes = registered()
    if _owners_from is not schemes or not _OWNERS:
        _OWNERS.clear()
        for name, row in schemes.items():
            for field in row.options.model_fields:
                _OWNERS.setdefault(field, []).append(name)
        _owners_from = schemes
    return _OWNERS.get(key, [])


def option_keys() -> list[str]:
    """Every key some scheme's options declare, in the order the schemes and their fields are."""
    return list(dict.fromkeys(key for row in registered().values() for key in row.options.model_fields))


@dataclass
class Taken:
    """An inventory entry's keys, split by `take_options`."""

    own: dict[str, Any]  # its model's own keys
    given: dict[str, Any]  # every transport option it gives, checked (flat)
    options: TransportOptions | None  # those of the entry's scheme, as its model (None: no scheme)
    problems: list[InitErrorDetails]  # each at its key: an unknown key, a value its scheme refuses


def take_options(data: dict[str, Any], own: Collection[str], scheme: str | None = None,
                 schemes: Collection[str] | None = None, null_unsets: bool = False) -> Taken:
    """An inventory entry (flat keys) split into its model's own keys (`own`) and transport
    options. The options `scheme` declares are read with its model; any other is checked with
    the model of the first scheme declaring it (only `schemes`, when given: a pod selector
    takes k8s's alone), and has no effect. `null_unsets`: an option given as null is left out
    (defaults and selectors: null sets nothing). `raise_with` turns the problems into
    pydantic's error."""
    taken = Taken({}, {}, None, [])
    by_owner: dict[str, dict[str, Any]] = {}
    for key, value in data.items():
        if key in own:
            taken.own[key] = value
            continue
        found = owners(key) if isinstance(key, str) else []
        if schemes is not None:
            found = [s for s in found if s in schemes]
        if not found:
            taken.problems.append(InitErrorDetails(type="extra_forbidden", loc=(key,), input=value))
            continue
        if value is None and null_unsets:
            continue
        by_owner.setdefault(scheme if scheme in found else found[0], {})[key] = value
    rows = registered()
    for owner, values in by_owner.items():
        try:
            checked = rows[owner].options.model_validate(values)
        except ValidationError as exc:
            taken.problems += [_detail(err) for err in exc.errors()]
            continue
        taken.given.update((key, getattr(checked, key)) for key in values)
        if owner == scheme:
            taken.options = checked
    if scheme is not None and taken.options is None and scheme not in by_owner:
        taken.options = rows[scheme].options.model_validate({})
    return taken


def raise_with(title: str, problems: list[InitErrorDetails], also: ValidationError | None = None) -> NoReturn:
    """The problems found by `take_options` (and those of the entry's own keys, `also`) as one
    ValidationError, each at its key, as pydantic reports a model's fields."""
    if also is not None:
        problems = [_detail(err) for err in also.errors()] + problems
    raise ValidationError.from_exception_data(title, problems)


def _detail(err: Any) -> InitErrorDetails:
    detail = InitErrorDetails(type=err["type"], loc=tuple(err["loc"]), input=err["input"])
    if "ctx" in err:
        detail["ctx"] = err["ctx"]
    return detail
