"""YAML loading that remembers where every value came from.

pydantic tells us *which* field is wrong (a loc tuple); this module maps that loc
back to file:line:column so every error a user sees points at their text.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import yaml
from pydantic import ValidationError

from patchkit.errors import UsageError

Loc = tuple[str | int, ...]
_VAR = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


@dataclass(frozen=True)
class Mark:
    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


def source_error(mark: Mark, field: str, problem: str) -> UsageError:
    """A problem in a user's YAML file, with its place: `file:line:col: field: problem`."""
    return UsageError(f"{mark}: {field}: {problem}" if field else f"{mark}: {problem}")


@dataclass
class LoadedYaml:
    data: Any
    marks: dict[Loc, Mark]
    file: str

    def mark_for(self, loc: Iterable[str | int]) -> Mark:
        loc = tuple(loc)
        while loc and loc not in self.marks:
            loc = loc[:-1]
        return self.marks.get(loc, Mark(self.file, 1, 1))

    def validate(self, model: Callable[..., Any], data: Any | None = None) -> Any:
        """Validate with pydantic; turn its errors into SourceErrors naming the place."""
        try:
            return model(data if data is not None else self.data)
        except ValidationError as exc:
            raise self.error_from(exc) from None

    def error_from(self, exc: ValidationError) -> UsageError:
        errors = exc.errors()
        misspelt = _misspellings(errors)
        lines = []
        seen: set[Loc] = set()
        for err in errors:
            loc = _clean_loc(err["loc"])
            if loc in seen or (err["type"] == "missing" and loc in misspelt.values()):
                continue  # a union reports one error per member; a misspelt key's error says it all
            seen.add(loc)
            field = _loc_text(loc)
            msg = err["msg"]
            if err["type"] == "value_error":
                msg = msg.removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = f"unknown key {loc[-1]!r}"
                if loc in misspelt:
                    msg += f" (did you mean {misspelt[loc][-1]!r}?)"
                field = _loc_text(loc[:-1])
            elif err["type"] == "missing":
                msg = f"missing required key {loc[-1]!r}"
                field = _loc_text(loc[:-1])
            lines.append(f"{self.mark_for(loc)}: {field + ': ' if field else ''}{msg}")
        return UsageError("\n".join(lines))


def _misspellings(errors: list[Any]) -> dict[Loc, Loc]:
    """Unknown key -> the missing required key it is close to, in the same mapping."""
    missing = [_clean_loc(e["loc"]) for e in errors if e["type"] == "missing"]
    out: dict[Loc, Loc] = {}
    for err in errors:
        if err["type"] != "extra_forbidden":
            continue
        loc = _clean_loc(err["loc"])
        here = {str(m[-1]): m for m in missing if m[:-1] == loc[:-1]}
        close = difflib.get_close_matches(str(loc[-1]), list(here), n=1)
        if close:
            out[loc] = here[close[0]]
    return out


def _clean_loc(loc: tuple[Any, ...]) -> Loc:
    """Drop pydantic's union member tags (like 'str' or 'function-after[...]')."""
    return tuple(p for p in loc if isinstance(p, int) or ("[" not in p and p not in _TYPE_TAGS))


_TYPE_TAGS = {"str", "int", "float", "bool", "none", "list[str]", "dict[str,any]"}


def _loc_text(loc: Loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def load_yaml(
    path: Path,
    variables: dict[str, Any] | None = None,
    template_skip: Iterable[str] = (),
) -> LoadedYaml:
    """Read YAML, keeping marks; substitute `{{ var }}` in strings (except under the
    top-level keys in `template_skip`). Unknown variables are errors at their place."""
    file = str(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise UsageError(f"{file}: cannot read: {exc.strerror}") from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{file}:{mark.line + 1}:{mark.column + 1}" if mark else file
        raise UsageError(f"{where}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    marks: dict[Loc, Mark] = {}
    builder = _Builder(file, marks, variables, set(template_skip))
    data = builder.build(root, ()) if root is not None else {}
    return LoadedYaml(data, marks, file)


class _Builder:
    def __init__(self, file: str, marks: dict[Loc, Mark], variables: dict[str, Any] | None, skip: set[str]):
        self.file = file
        self.marks = marks
        self.variables = variables
        self.skip = skip
        self.constructor = yaml.SafeLoader("")

    def mark(self, node: yaml.Node) -> Mark:
        return Mark(self.file, node.start_mark.line + 1, node.start_mark.column + 1)

    def build(self, node: yaml.Node, loc: Loc) -> Any:
        self.marks[loc] = self.mark(node)
        if isinstance(node, yaml.MappingNode):
            out: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                key = self.constructor.construct_object(key_node)
                if not isinstance(key, (str, int)):
                    raise source_error(self.mark(key_node), _loc_text(loc), f"keys must be strings, got {key!r}")
                if key in out:
                    raise source_error(self.mark(key_node), _loc_text(loc), f"duplicate key {key!r}")
                out[key] = self.build(value_node, loc + (key,))
                self.marks[loc + (key,)] = self.mark(key_node)
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, loc + (i,)) for i, item in enumerate(node.value)]
        value = self.constructor.construct_object(node)
        if isinstance(value, str) and self.variables is not None and not (loc and loc[0] in self.skip):
            return self.substitute(value, node, loc)
        return value

    def substitute(self, text: str, node: yaml.Node, loc: Loc) -> Any:
        assert self.variables is not None
        for name in _VAR.findall(text):
            if name not in self.variables:
                known = ", ".join(sorted(self.variables)) or "none"
                raise source_error(self.mark(node), _loc_text(loc), f"undefined variable {name!r} (defined: {known})")
        whole = _VAR.fullmatch(text.strip())
        if whole:
            return self.variables[whole.group(1)]  # keep the type: port stays an int
        return _VAR.sub(lambda m: str(self.variables[m.group(1)]), text)
