"""A recipe's variables for one host: where each comes from, which wins, and which are unused.

Precedence (Ansible's order where it applies), the first that sets a name wins:

    -e (KEY=VALUE, @file.yml, JSON)  >  the host's vars  >  its groups' vars  >  defaults' vars
    >  the recipe's `vars`

(the inventory merges host, group and defaults into `HostSpec.vars`: inventory.py). A value
given for a variable the recipe declares with a number or a boolean must be one (text from
`-e KEY=VALUE` is read as YAML would read it); declared with a list or mapping, one too.

A variable given by `-e` or the inventory that the recipe neither declares nor uses in a
`{{ }}` template is a warning naming it (with the closest name it knows); `--strict` makes it
an error. `-e python=PATH` is the interpreter, not a recipe variable. Variables of an Ansible
inventory serve other playbooks too: only one that looks like a typo of a known name is named.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchkit.base.errors import UsageError
from patchkit.base.yamlsource import plain_scalar, read_yaml

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SPECIAL = {"python"}  # -e python=PATH: the target interpreter


@dataclass(frozen=True)
class Given:
    """One variable from outside the recipe: its value, whether it is text still to be read
    (-e KEY=VALUE), and where it came from (for messages)."""

    value: Any
    text: bool
    origin: str


def parse_extra_vars(items: list[str] | None) -> dict[str, Given]:
    """Every `-e`, in order (a later one wins): `KEY=VALUE`, `@FILE` (a YAML or JSON mapping), or
    a JSON object `{"k": ...}`. UsageError naming the argument (and the file's place)."""
    out: dict[str, Given] = {}
    for item in items or []:
        if item.startswith("@"):
            out.update(_from_file(item))
        elif item.lstrip().startswith("{"):
            try:
                data = json.loads(item)
            except ValueError as exc:
                raise UsageError(f"-e {item!r}: not valid JSON: {exc}") from None
            if not isinstance(data, dict):
                raise UsageError(f"-e {item!r}: a JSON object of variables, like '{{\"port\": 8001}}'")
            for key, value in data.items():
                _check_name(key, f"-e {item!r}")
                out[key] = Given(value, False, "-e JSON")
        else:
            key, sep, value = item.partition("=")
            if not sep or not _NAME.match(key):
                raise UsageError(f"-e {item!r}: expected KEY=VALUE, @FILE.yml or a JSON object")
            out[key] = Given(value, True, "-e")
    return out


def _from_file(item: str) -> dict[str, Given]:
    path = Path(item[1:])
    if not item[1:]:
        raise UsageError("-e @: name the file of variables, like -e @vars.yml")
    try:
        found = path.is_file()
    except OSError as exc:  # a name too long
        raise UsageError(f"-e {item}: {exc.strerror or exc}") from None
    if not found:
        raise UsageError(f"-e {item}: no such file")
    loaded = read_yaml(path).build()  # the loader's errors name FILE:LINE:COL
    if not isinstance(loaded.data, dict):
        raise UsageError(f"{path}:1:1: a file of variables is a mapping (name: value)")
    for key in loaded.data:
        _check_name(key, str(loaded.mark_for((key,))))
    return {key: Given(value, False, f"-e @{path}") for key, value in loaded.data.items()}


def _check_name(key: object, where: str) -> None:
    if not isinstance(key, str) or not _NAME.match(key):
        raise UsageError(f"{where}: {key!r} is not a variable name")


# The declaration's place, for messages: name -> "FILE:LINE:COL: vars.NAME" (RecipeSource.declared_at).
DeclaredAt = Callable[[str], str]


def typed(name: str, value: Any, declared: dict[str, Any], origin: str, text: bool = False,
          declared_at: DeclaredAt | None = None) -> Any:
    """`value` as the recipe's variable `name` takes it: text read as a YAML scalar when the
    default is a number or boolean; UsageError (naming `origin`, and the declaration's place
    with `declared_at`) when the type differs."""
    if name not in declared:
        return value
    default = declared[name]
    if isinstance(default, bool):
        kinds: tuple[type, ...] = (bool,)
        wanted = "true or false"
    elif isinstance(default, int):
        kinds, wanted = (int,), "an integer"
    elif isinstance(default, float):
        kinds, wanted = (int, float), "a number"
    elif isinstance(default, list):
        kinds, wanted = (list,), "a list"
    elif isinstance(default, dict):
        kinds, wanted = (dict,), "a mapping"
    elif isinstance(default, str) and not text:
        kinds, wanted = (str,), "a string"
    else:
        return value
    if text:
        value = plain_scalar(value) if not isinstance(default, (list, dict)) else value
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        shown = f"-e {name}={value}" if text else f"{origin}: {name}={json.dumps(value, default=str)}"
        at = f"{declared_at(name)}: " if declared_at else ""
        raise UsageError(f"{at}{shown}: expected {wanted}, like the recipe's default {default!r}")
    return value


def layered(declared: dict[str, Any], host_vars: dict[str, Any], extra: dict[str, Given],
            host: str | None = None, host_origin: str = "the inventory",
            declared_at: DeclaredAt | None = None) -> dict[str, Any]:
    """The variables one host's templates see, by the precedence above, each type-checked."""
    where = f"{host_origin}: host {host}: vars" if host else host_origin
    out = dict(declared)
    for name, value in host_vars.items():
        out[name] = typed(name, value, declared, where, declared_at=declared_at)
    for name, given in extra.items():
        out[name] = typed(name, given.value, declared, given.origin, given.text, declared_at)
    return out


@dataclass(frozen=True)
class Unused:
    name: str
    origin: str
    hint: str | None

    def __str__(self) -> str:
        tail = f" (did you mean {self.hint!r}?)" if self.hint else ""
        return f"variable {self.name!r} from {self.origin} is used by no step of the recipe{tail}"


def unused(given: dict[str, str], known: set[str], typos_only: Collection[str] = ()) -> list[Unused]:
    """Of the variables `given` (name -> where from), those the recipe does not know (declares
    or uses), each with the closest known name. Names in `typos_only` are named only when one
    is close (they may serve someone else, like an Ansible inventory's)."""
    out = []
    for name, origin in given.items():
        if name in known or name in SPECIAL:
            continue
        close = difflib.get_close_matches(name, sorted(set(known) | set(SPECIAL)), n=1)  # -e pyhton= too
        hint = close[0] if close else None
        if name in typos_only and hint is None:
            continue
        out.append(Unused(name, origin, hint))
    return out
