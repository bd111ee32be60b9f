"""What a command works with, read from its arguments: the recipe with its variables, the
selected hosts, the rollout; every problem a usage error before any host is contacted.

Several commands share these (validate, test, bake and the commands that work on hosts);
each takes the parts it needs. The -i inventories are read once per command and kept on
`args` (a pipe has no second reading).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from patchkit.base.errors import UsageError
    from patchkit.base.rollout import Size
    from patchkit.fleet.inventory import HostSpec
    from patchkit.fleet.sources import LoadedInventory
    from patchkit.recipe.model import LoadedRecipe, RecipeSource
    from patchkit.recipe.variables import Given

class Prepared(NamedTuple):
    """The command's recipe (None for those without one) with the -e variables."""

    source: RecipeSource | None
    extra: dict[str, Given]
    overrides: dict[str, str]  # python=PATH from -e: the target interpreter
    loaded: LoadedRecipe | None  # rendered with -e alone; None if only the hosts' variables can complete it
    base_error: UsageError | None  # why it could not be rendered so (loaded is None)


def prepare(args: argparse.Namespace, rendered_per_host: bool = False, bases: bool = True) -> Prepared:
    """-e parsed, the recipe read and rendered with them; UsageError if anything is wrong
    (with the inventory's problems too, so that one run shows everything to fix). rendered_per_host:
    the command renders the recipe for each host too, so with an inventory given, a variable
    only the hosts give is no error yet. bases: the base releases of based diffs fetched and
    checked (False: validate, which reads the recipe alone)."""
    import patchkit.run.steps.registry  # noqa: F401 - the step kinds a recipe's steps may be
    from patchkit.base.errors import UsageError
    from patchkit.recipe.model import read_recipe
    from patchkit.recipe.variables import layered, parse_extra_vars

    extra = parse_extra_vars(getattr(args, "extra_var", []))
    overrides = {"python": python_of(extra)} if "python" in extra else {}
    source = None
    try:
        if getattr(args, "recipe", None):
            source = read_recipe(args.recipe)
    except UsageError as exc:
        raise with_inventory_problems(exc, args) from None
    base_error: UsageError | None = None
    base = layered(source.declared, {}, extra, declared_at=source.declared_at) if source else {}  # -e of the wrong type: its error, once
    try:
        loaded = source.render(base) if source else None
    except UsageError as exc:
        # A variable only the inventory gives is undefined here: each host's rendering says.
        if not (source and rendered_per_host and getattr(args, "inventory", None)):
            raise with_inventory_problems(exc, args) from None
        loaded, base_error = None, exc
    if loaded is not None and bases:
        attach_bases(loaded)
    return Prepared(source, extra, overrides, loaded, base_error)


def attach_bases(*rendered: LoadedRecipe) -> None:
    """The base release's files for every based diff (fetched once, cached): before any host."""
    from patchkit.commands.releasetest.bases import attach

    attach(*rendered)


def with_inventory_problems(recipe_error: UsageError, args: argparse.Namespace) -> UsageError:
    """A broken recipe, and an inventory given: its problems too, after the recipe's (grouped
    per file), so one run shows everything to fix."""
    inventories = getattr(args, "inventory", None)
    if not isinstance(inventories, list) or not inventories:
        return recipe_error
    from patchkit.base.errors import UsageError

    try:
        inventories_of(args)
    except UsageError as exc:
        return UsageError(f"{recipe_error}\n{exc}")
    return recipe_error


def inventories_of(args: argparse.Namespace) -> LoadedInventory:
    """The -i inventories, read once per command (a pipe has no second reading); a problem
    found is raised again on each call."""
    from patchkit.base.errors import UsageError
    from patchkit.fleet.sources import load_inventories
    from patchkit.host.transport import schemes  # noqa: F401 - declares the addresses and options inventories take

    if "inventory_loaded" not in vars(args):
        try:
            args.inventory_loaded = load_inventories(args.inventory)
        except UsageError as exc:
            args.inventory_loaded = exc
    loaded: LoadedInventory | UsageError = args.inventory_loaded
    if isinstance(loaded, UsageError):
        raise loaded
    return loaded


def python_of(extra: dict[str, Given]) -> str:
    from patchkit.base.errors import UsageError

    value = extra["python"].value
    if not isinstance(value, str) or not value:
        raise UsageError(f"{extra['python'].origin}: python is the target interpreter's path, not {value!r}")
    return value


def per_host(args: argparse.Namespace, source: RecipeSource, extra: dict[str, Given],
             hosts: list[HostSpec], bases: bool = True) -> dict[str, LoadedRecipe]:
    """The recipe rendered per host with its inventory variables (hosts alike share one); every
    host's problem at once, before any host is contacted. Unused variables warned about."""
    from patchkit.base.errors import UsageError
    from patchkit.recipe.variables import layered

    origins = getattr(args, "inventory_origins", {})
    out: dict[str, LoadedRecipe] = {}
    problems: dict[str, list[str]] = {}  # the same problem on every host is said once
    for host in hosts:
        try:
            out[host.name] = source.render(layered(source.declared, host.vars, extra, host.name,
                                                   f"-i {origins.get(host.name, 'inventory')}", source.declared_at))
        except UsageError as exc:
            problems.setdefault(str(exc), []).append(host.name)
    if len(problems) == 1 and len(next(iter(problems.values()))) == len(hosts):
        raise with_inventory_problems(UsageError(next(iter(problems))), args)
    if problems:
        raise UsageError("\n".join(f"host {', '.join(on)}: {problem}" for problem, on in problems.items()))
    warn_unused(args, source, extra, hosts)
    if bases:
        attach_bases(*out.values())
    return out


def warn_unused(args: argparse.Namespace, source: RecipeSource, extra: dict[str, Given],
                hosts: list[HostSpec]) -> None:
    """A variable given (-e, inventory) that the recipe does not know: a warning, --strict an error."""
    from patchkit.base.errors import UsageError
    from patchkit.recipe.variables import unused

    origins = getattr(args, "inventory_origins", {})
    from_ansible: set[str] = getattr(args, "inventory_ansible", set())
    given: dict[str, str] = {}
    typos_only: set[str] = set()
    for host in hosts:
        for name in host.vars:
            where = f"-i {origins.get(host.name, 'inventory')} (host {host.name})"
            given.setdefault(name, where)
            if host.name in from_ansible:
                typos_only.add(name)
    for name, value in extra.items():
        given[name] = value.origin
        typos_only.discard(name)
    found = unused(given, source.known, typos_only)
    if not found:
        return
    if getattr(args, "strict", False):
        raise UsageError("\n".join(f"{f} (--strict)" for f in found))
    for f in found:
        print(f"patchkit: warning: {f}", file=sys.stderr)


def split(value: str | None) -> list[str] | None:
    """NAME[,...] (--steps) as a list; None when not given."""
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def hosts_of(args: argparse.Namespace, resolve: bool = True) -> tuple[list[HostSpec], list[int | str] | int | str | None]:
    """The selected hosts, and the inventory's `serial`. resolve False (validate): groups resolved
    at run time (pods, Ray nodes) are named, not resolved: no cluster is contacted."""
    from patchkit.fleet.inventory import local_inventory
    from patchkit.fleet.sources import LoadedInventory
    from patchkit.host.transport import schemes  # noqa: F401 - declares the addresses and options inventories take
    from patchkit.host.transport.groups import resolve_group

    loaded = inventories_of(args) if args.inventory else LoadedInventory(local_inventory())
    if getattr(args, "verbose", False):
        for note in loaded.notes:  # conflicts between -i, Ansible settings patchkit does not use
            print(f"patchkit: {note}", file=sys.stderr)
    inventory = loaded.inventory
    args.inventory_origins, args.inventory_ansible = loaded.sources, loaded.ansible
    selected = inventory.select(args.limit, resolve_group if resolve else _not_resolved)
    for note in selected.notes:
        print(f"patchkit: {note}", file=sys.stderr)
    return selected.hosts, inventory.serial


def _not_resolved(group: str, found: object, defaults: object) -> tuple[list[HostSpec], list[str]]:
    return [], [f"group {group}: resolved at run time (its hosts are not checked here)"]


def rollout(args: argparse.Namespace, loaded: LoadedRecipe | None, inventory_serial: list[int | str] | int | str | None,
            changes: bool) -> tuple[list[Size] | None, Size | None]:
    """--serial, else (a command that changes hosts: apply, rollback) the recipe's `serial:`, else
    the inventory's; --max-fail. UsageError if unreadable. `serial:` paces changes; reads need
    no batches."""
    from patchkit.base.errors import UsageError
    from patchkit.base.rollout import parse_serial, parse_size

    try:
        given = args.serial if args.serial is not None else (loaded.recipe.serial if loaded and changes else None)
        if given is None and changes:
            given = inventory_serial
        serial = parse_serial(given, "--serial") if given is not None else None
        max_fail = parse_size(args.max_fail, "--max-fail") if args.max_fail is not None else None
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return serial, max_fail
