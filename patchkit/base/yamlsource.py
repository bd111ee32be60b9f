"""YAML loading that remembers where every value came from, and refuses what it cannot
read safely.

pydantic tells us *which* field is wrong (a loc tuple); this module maps that loc
back to file:line:column so every error a user sees points at their text. Whatever a file
holds, each problem is one line, `file:line:col: field: problem`, and every problem is
listed (up to MAX_LISTED) in the file's order: bytes that are not UTF-8,
control characters, tags beyond the core ones, merge keys, alias bombs, nesting too deep,
a file too big, a broken `{{ template }}`. An alias is paid for (its values, in full)
before it is expanded, so a hostile file costs little more than its size.
"""

from __future__ import annotations

import difflib
import hashlib
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, TypeVar

import yaml
from pydantic import BaseModel, ValidationError
from yaml.composer import Composer
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

from patchkit.base.errors import UsageError

try:  # libyaml: about 5x faster, which keeps a file of MAX_BYTES under a second
    from yaml._yaml import CParser  # what yaml.cyaml re-exports
    _LIBYAML = True
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    _LIBYAML = False

M = TypeVar("M")  # what a document validates into (a pydantic model)

MAX_BYTES = 512 << 10        # a larger recipe or inventory is refused unread
MAX_DEPTH = 32               # nesting of mappings and lists, aliases expanded
MAX_ALIASES = 1000           # alias uses (*name) in one file
MAX_ALIAS_VALUES = 10_000    # values aliases (and whole-value variables) add once expanded
MAX_NUMBER_CHARS = 100       # int("1:2:3:...") is quadratic; no field wants a longer number
MAX_TEMPLATE_GROWTH = MAX_BYTES  # characters `{{ var }}` substitution may add to one file
MAX_MESSAGE_CHARS = 1000
MAX_ERRORS = 1000            # pydantic errors weighed to find the problems of a file
MAX_LISTED = 20              # problems a message lists, one line each

Loc = tuple[str | int, ...]

_TAG = "tag:yaml.org,2002:"
_STR, _INT, _FLOAT, _BOOL, _NULL = (_TAG + t for t in ("str", "int", "float", "bool", "null"))
_MAP, _SEQ = _TAG + "map", _TAG + "seq"
_BOOLS = {"true": True, "false": False}

# `{{ name }}`, or a literal brace pair written `{{ '{{' }}` / `{{ '}}' }}`.
_TEMPLATE = re.compile(r"""\{\{\s*(?:([A-Za-z_][A-Za-z0-9_]*)|'(\{\{|\}\})'|"(\{\{|\}\})")\s*\}\}""")
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


@dataclass(frozen=True)
class Mark:
    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


def source_error(mark: Mark, field: str, problem: str) -> UsageError:
    """A problem in a user's YAML file, with its place: `file:line:col: field: problem`."""
    return _error(f"{mark}: {field}: {problem}" if field else f"{mark}: {problem}")


def _error(message: str) -> UsageError:
    return UsageError(_one_line(message))


def _one_line(message: str) -> str:
    """Always one line: a control character (or a file name holding one) is shown escaped;
    a huge value quoted in it is cut, keeping the place and field (head) and the reason (tail)."""
    message = _UNPRINTABLE.sub(lambda m: repr(m.group())[1:-1], message)
    if len(message) > MAX_MESSAGE_CHARS:
        message = f"{message[:700]} [...] {message[-250:]}"
    return message


@dataclass
class LoadedYaml:
    data: Any
    marks: dict[Loc, tuple[int, int]]  # (line, column) of every key and value
    file: str

    def mark_for(self, loc: Iterable[str | int]) -> Mark:
        loc = tuple(loc)
        while loc and loc not in self.marks:
            loc = loc[:-1]
        return Mark(self.file, *self.marks.get(loc, (1, 1)))

    def validate(self, model: Callable[[Any], M], data: Any | None = None) -> M:
        """Validate with pydantic; turn its errors into a UsageError listing every problem.
        `model` is a pydantic model's `model_validate` (its fields suggest names for unknown keys)."""
        data = data if data is not None else self.data
        try:
            return model(data)
        except ValidationError as exc:
            root = getattr(model, "__self__", None)
            raise self.error_from(exc, data, root if isinstance(root, type) else None) from None

    def error_from(self, exc: ValidationError, data: Any, root: type | None = None) -> UsageError:
        """Every problem, one line each in the file's order (`file:line:col: field: problem`),
        at most MAX_LISTED; of a huge number of errors only the first MAX_ERRORS (in pydantic's
        order) are weighed. With `root` (the model validated), an unknown key is matched
        against the keys that model allows there."""
        by_loc: dict[Loc, list[Any]] = {}
        errors = exc.errors(include_url=False)
        for err in errors[:MAX_ERRORS]:
            by_loc.setdefault(_clean_loc(err["loc"], data, err["type"]), []).append(err)
        misspelt = _misspellings(by_loc)
        problems = [(self.mark_for(loc), loc, errs) for loc, errs in by_loc.items()
                    if not (errs[0]["type"] == "missing" and loc in misspelt.values())]
        problems.sort(key=lambda p: (p[0].line, p[0].column))
        lines = []
        for mark, loc, errs in problems[:MAX_LISTED]:
            close = misspelt.get(loc)
            outer = None
            if close is None and errs[0]["type"] == "extra_forbidden" and root is not None and loc:
                close = _allowed_close(root, loc, data)
                outer = None if close else _allowed_above(root, loc)
            field, message = _describe_problem(loc, errs, close)
            if outer is not None:  # `verify:` indented under `patch:`: a key of the mapping holding it
                message += f" here; it is a key of the level of `{outer}:`: dedent it"
            lines.append(_one_line(f"{mark}: {field}: {message}" if field else f"{mark}: {message}"))
        if len(errors) > MAX_ERRORS:
            lines[-1] += " (and many more problems)"
        elif len(problems) > MAX_LISTED:
            lines[-1] += f" (and {len(problems) - MAX_LISTED} more problems)"
        return UsageError("\n".join(lines))


def _allowed_close(root: type, loc: Loc, data: Any) -> Loc | None:
    """The allowed key nearest to the unknown key at `loc` (not one the mapping has already)."""
    allowed: list[str] = []
    for model in _models_at(root, loc[:-1]):
        accepted = getattr(model, "accepted_keys", None)  # a model that reads more keys than its fields names them
        allowed += accepted() if accepted else [field.alias or name for name, field in model.model_fields.items()]
    here = data
    for part in loc[:-1]:  # a cleaned loc: every part is in the data
        here = here[part] if isinstance(here, (dict, list)) else None  # type: ignore[index]
    given = set(here) if isinstance(here, dict) else set()
    close = difflib.get_close_matches(str(loc[-1]), [k for k in dict.fromkeys(allowed) if k not in given], n=1)
    return loc[:-1] + (close[0],) if close else None


def _allowed_above(root: type, loc: Loc) -> str | None:
    """When the unknown key at `loc` is a key a mapping enclosing it allows: the key of that
    mapping the unknown one sits under (to dedent it to), else None."""
    key = loc[-1]
    for depth in range(len(loc) - 2, -1, -1):
        if not isinstance(loc[depth], str):
            continue  # a list item: its mapping is the one at the index, checked next round
        for model in _models_at(root, loc[:depth]):
            if any(key in (name, field.alias) for name, field in model.model_fields.items()):
                return str(loc[depth])
    return None


def _models_at(root: type, loc: Loc) -> list[type[BaseModel]]:
    """The pydantic models a value at `loc` may be, following field annotations from `root`."""
    kinds: list[Any] = [root]
    for part in loc:
        following: list[Any] = []
        for kind in (k for t in kinds for k in _members(t)):
            if isinstance(kind, type) and issubclass(kind, BaseModel) and isinstance(part, str):
                field = next((f for n, f in kind.model_fields.items() if part in (n, f.alias)), None)
                if field is not None:
                    following.append(field.annotation)
            elif typing.get_origin(kind) is list and isinstance(part, int):
                following += typing.get_args(kind)[:1]
            elif typing.get_origin(kind) is dict and isinstance(part, str):
                following += typing.get_args(kind)[1:2]
        kinds = following
    return [k for t in kinds for k in _members(t) if isinstance(k, type) and issubclass(k, BaseModel)]


def _members(kind: Any) -> list[Any]:
    """A type with Annotated and unions (Optional too) taken apart."""
    origin = typing.get_origin(kind)
    if origin is typing.Annotated:
        return _members(typing.get_args(kind)[0])
    if origin is typing.Union or origin is types.UnionType:
        return [m for arg in typing.get_args(kind) for m in _members(arg)]
    return [kind]


_TYPE_WORDS = {
    "string_type": "a string", "int_type": "an integer", "float_type": "a number",
    "bool_type": "a boolean (true or false)", "list_type": "a list", "dict_type": "a mapping",
    "model_type": "a mapping", "model_attributes_type": "a mapping", "none_required": "null",
}


def _describe_problem(loc: Loc, errs: list[Any], close: Loc | None) -> tuple[str, str]:
    err = errs[0]
    kind = err["type"]
    if kind == "extra_forbidden" and loc:
        message = f"unknown key {loc[-1]!r}"
        if close:
            message += f" (did you mean {close[-1]!r}?)"
        return _loc_text(loc[:-1]), message
    if kind == "missing" and loc:
        return _loc_text(loc[:-1]), f"missing required key {loc[-1]!r}"
    wanted = [_TYPE_WORDS[e["type"]] for e in errs if e["type"] in _TYPE_WORDS]
    if len(wanted) == len(errs):  # a type error, or one per member of a union
        wanted = list(dict.fromkeys(wanted))
        expected = wanted[0] if len(wanted) == 1 else f"{', '.join(wanted[:-1])} or {wanted[-1]}"
        return _loc_text(loc), f"expected {expected}, got {_shown(err.get('input'))}"
    message = err["msg"].removeprefix("Value error, ") if kind == "value_error" else err["msg"]
    if kind != "value_error" and isinstance(err.get("input"), (str, int, float, bool)):
        message += f" (got {_shown(err['input'])})"
    return _loc_text(loc), message


def _shown(value: Any) -> str:
    """A value as a user wrote it: true, null, 8, 'text', a mapping."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return repr(value if len(value) <= 60 else value[:57] + "...")
    names: dict[type, str] = {dict: "a mapping", list: "a list"}
    return names.get(type(value), type(value).__name__)


def _misspellings(by_loc: dict[Loc, list[Any]]) -> dict[Loc, Loc]:
    """Unknown key -> the missing required key it is close to, in the same mapping."""
    missing: dict[Loc, dict[str, Loc]] = {}
    for loc, errs in by_loc.items():
        if errs[0]["type"] == "missing":
            missing.setdefault(loc[:-1], {})[str(loc[-1])] = loc
    out: dict[Loc, Loc] = {}
    for loc, errs in by_loc.items():
        here = missing.get(loc[:-1])
        if here and errs[0]["type"] == "extra_forbidden":
            close = difflib.get_close_matches(str(loc[-1]), list(here), n=1)
            if close:
                out[loc] = here[close[0]]
    return out


def _clean_loc(loc: tuple[Any, ...], data: Any, kind: str) -> Loc:
    """The part of pydantic's loc that names the user's data: follow it through the data,
    dropping what is not there (union member tags like 'str', 'function-after[...]',
    '[key]'). A key named like a tag (`str:`) is in the data, so it stays."""
    out: list[str | int] = []
    node = data
    for i, part in enumerate(loc):
        if isinstance(node, dict) and isinstance(part, str) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        elif not (i == len(loc) - 1 and kind == "missing"):
            continue
        out.append(part)
    return tuple(out)


def _loc_text(loc: Loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


# ---------------------------------------------------------------------------- reading


def _core_schema() -> dict[str, list[tuple[str, re.Pattern[str]]]]:
    """YAML 1.2's core schema, keyed by first character as PyYAML's Resolver wants: `no`,
    `off`, `on`, `yes`, `y` and `n` are strings, `017` is 17, `0o17` is 15, `1_000`, `0b1`
    and `1:30` are strings; timestamps, `<<` and `=` are plain text (a merge key is refused
    by name where keys are read)."""
    table: dict[str, list[tuple[str, re.Pattern[str]]]] = {}

    def add(tag: str, regexp: str, first: Iterable[str]) -> None:
        compiled = re.compile(regexp)
        for char in first:
            table.setdefault(char, []).append((tag, compiled))

    add(_BOOL, r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF")
    add(_NULL, r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""])
    add(_INT, r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", "-+0123456789")
    add(_FLOAT, r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$", "-+.0123456789")
    return table


class _Resolver(Resolver):
    """YAML 1.2 core-schema implicit types (PyYAML resolves YAML 1.1's)."""

    yaml_implicit_resolvers: dict[str, list[tuple[str, re.Pattern[str]]]] = _core_schema()

    def resolve(self, kind: type, value: Any, implicit: Any) -> str:
        if kind is ScalarNode and implicit[0]:  # the hot path, done with less Python than Resolver's
            for tag, regexp in self.yaml_implicit_resolvers.get(value[:1], ()):
                if regexp.match(value):
                    return tag
            return _STR
        resolved: str = super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]  # untyped in the stubs
        return resolved


class _TooDeep(yaml.composer.ComposerError):
    pass


class _NestingComposer(Composer):
    """PyYAML's own composer recurses once per level; libyaml's stops at 1000 levels itself."""

    _depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        if self._depth >= MAX_DEPTH:
            event: yaml.Event = self.peek_event()  # type: ignore[attr-defined]  # the Parser's, a sibling base
            mark: yaml.Mark = event.start_mark  # type: ignore[assignment]  # libyaml's own Mark type has the same fields
            raise _TooDeep(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
        self._depth += 1
        try:
            node = super().compose_node(parent, index)
            assert node is not None  # None only at the end of a stream, never for a node asked for
            return node
        finally:
            self._depth -= 1


class _PyLoader(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser, _NestingComposer, _Resolver):
    """Pure PyYAML, for a PyYAML built without libyaml (about 5x slower)."""

    def __init__(self, stream: str):
        yaml.reader.Reader.__init__(self, stream)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)
        Composer.__init__(self)
        _Resolver.__init__(self)


if _LIBYAML:
    class _CLoader(CParser, _Resolver):
        pass

_Loader: type = _CLoader if _LIBYAML else _PyLoader


@dataclass
class Document:
    """A YAML file read and composed within the limits, not yet turned into values."""

    file: str
    text: str
    sha256: str
    root: Node | None

    def build(self, variables: dict[str, Any] | None = None, literal: Iterable[str] = (),
              only: str | None = None) -> LoadedYaml:
        """Values with marks. With `variables`, `{{ var }}` in strings is substituted, except
        under the top-level keys in `literal` (there only `{{ '{{' }}` is read, a variable is
        an error). `only`: build just that top-level key of a mapping."""
        marks: dict[Loc, tuple[int, int]] = {}
        builder = _Builder(self, marks, variables, set(literal))
        root = self.root
        if root is None:
            return LoadedYaml({}, marks, self.file)
        if only is not None and isinstance(root, MappingNode) and root.tag == _MAP:
            pairs = [(k, v) for k, v in root.value if isinstance(k, ScalarNode) and k.value == only]
            root = MappingNode(_MAP, pairs[:1], root.start_mark, root.end_mark)
        try:
            data = builder.build(root, ())
        except UsageError as fatal:  # a limit: the reading stops there
            builder.problems.append(str(fatal))
        if builder.problems:
            raise _listed(self.file, builder.problems)
        return LoadedYaml(data, marks, self.file)


def _listed(file: str, problems: list[str]) -> UsageError:
    """Problems found while building, one line each, in the file's order, at most MAX_LISTED
    (an alias re-reads its anchor's text: its problem is listed once)."""
    def place(line: str) -> tuple[int, int]:
        found = re.match(r"(\d+):(\d+):", line[len(file) + 1:])
        return (int(found.group(1)), int(found.group(2))) if found else (0, 0)

    lines = sorted(dict.fromkeys(problems), key=place)
    listed = lines[:MAX_LISTED]
    if len(lines) > MAX_LISTED:
        listed[-1] += f" (and {len(lines) - MAX_LISTED} more problems)"
    return UsageError("\n".join(listed))


def read_yaml(path: Path) -> Document:
    """Read a YAML file (UTF-8, at most MAX_BYTES) and compose it within the limits."""
    file = str(path)
    try:
        with path.open("rb") as stream:
            raw = stream.read(MAX_BYTES + 1)
    except OSError as exc:
        raise _error(f"{file}: cannot read: {exc.strerror or exc}") from None
    return parse_yaml(file, raw)


def parse_yaml(file: str, raw: bytes) -> Document:
    """`read_yaml` of bytes read already (a pipe can be read only once); `file` names them."""
    if len(raw) > MAX_BYTES:
        raise _error(f"{file}:1:1: larger than {MAX_BYTES // 1024} KiB: not read (a recipe or inventory is small)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = len(raw[raw.rfind(b"\n", 0, exc.start) + 1:exc.start].decode("utf-8", "replace")) + 1
        raise _error(f"{file}:{line}:{column}: not UTF-8 text (byte 0x{raw[exc.start]:02x})") from None
    return Document(file, text, hashlib.sha256(raw).hexdigest(), _compose(file, text))


def _compose(file: str, text: str) -> Node | None:
    """The node graph; an alias is a second reference to its anchor's node, expanded (and
    paid for) only by the builder."""
    loader = None
    try:
        loader = _Loader(text)  # PyYAML's Reader checks the characters here already
        node: Node | None = loader.get_single_node()
        return node
    except _TooDeep as exc:
        raise _error(f"{_place(file, exc.problem_mark)}: {exc.problem}") from None
    except yaml.reader.ReaderError as exc:
        index = text.find(chr(exc.character)) if isinstance(exc.character, int) else -1
        raise _error(f"{_offset_place(file, text, max(index, 0))}: not valid YAML: "
                     f"character {_char(exc.character)} is not allowed") from None
    except yaml.MarkedYAMLError as exc:
        tab = _tab_at(text, exc.problem_mark)
        if tab is not None:
            raise _error(f"{_offset_place(file, text, tab)}: not valid YAML: a tab in the indentation "
                         "(YAML indents with spaces only)") from None
        if exc.problem_mark and text[exc.problem_mark.index:exc.problem_mark.index + 1] == "\t":
            raise _error(f"{_place(file, exc.problem_mark)}: not valid YAML: a tab character here "
                         "(YAML wants spaces)") from None
        problem = exc.problem or exc.context or "cannot be read"
        if problem == "found undefined alias" and exc.problem_mark:  # libyaml leaves out the name
            alias = re.match(r"\*([^\s,\[\]{}]+)", text[exc.problem_mark.index:])
            problem += f" {alias.group(1)!r}" if alias else ""
        if exc.context and exc.problem and exc.context_mark and exc.problem_mark:
            problem += f" ({exc.context} at {exc.context_mark.line + 1}:{exc.context_mark.column + 1})"
        mark = exc.problem_mark or exc.context_mark
        raise _error(f"{_place(file, mark) if mark else f'{file}:1:1'}: not valid YAML: {problem}") from None
    except yaml.YAMLError as exc:  # no place given: the start of the file
        raise _error(f"{file}:1:1: not valid YAML: {exc}") from None
    finally:
        if loader is not None:
            loader.dispose()


def _tab_at(text: str, mark: yaml.Mark | None) -> int | None:
    """Where a tab in the indentation of the problem's line is, when that is the problem
    (libyaml and PyYAML say `found character that cannot start any token`)."""
    if mark is None:
        return None
    start = text.rfind("\n", 0, mark.index) + 1
    indent = re.match(r"[ \t]*", text[start:]).group()  # type: ignore[union-attr]  # [ \t]* always matches
    if "\t" in indent and start + len(indent) >= mark.index:
        return start + indent.index("\t")
    return None


def _char(code: Any) -> str:
    return f"U+{code:04X}" if isinstance(code, int) else repr(code)


def _place(file: str, mark: yaml.Mark | None) -> str:
    if mark is None:
        return f"{file}:1:1"
    return f"{file}:{mark.line + 1}:{mark.column + 1}"


def _offset_place(file: str, text: str, index: int) -> str:
    return f"{file}:{text.count(chr(10), 0, index) + 1}:{index - text.rfind(chr(10), 0, index)}"


def load_yaml(
    path: Path,
    variables: dict[str, Any] | None = None,
    template_skip: Iterable[str] = (),
) -> LoadedYaml:
    """Read YAML, keeping marks; substitute `{{ var }}` in strings (not under the top-level
    keys in `template_skip`, where a variable is an error). Every problem names its place."""
    return read_yaml(path).build(variables, template_skip)


def plain_scalar(text: str) -> Any:
    """What `text` means written as a plain YAML value (8000, 0.3, true, null or the text)."""
    node = ScalarNode(_Resolver().resolve(ScalarNode, text, (True, False)), text)
    try:
        return _scalar_value(node)
    except ValueError:
        return text


def _scalar_value(node: ScalarNode) -> Any:
    """A scalar of a core tag as a Python value; ValueError with the reason otherwise."""
    tag, text = node.tag, node.value
    if tag == _STR:
        return text
    if tag == _NULL:
        return None
    if tag == _BOOL:
        if text.lower() not in _BOOLS:
            raise ValueError(f"{text!r} is not a boolean (true or false)")
        return _BOOLS[text.lower()]
    if tag in (_INT, _FLOAT):
        kind = "an integer" if tag == _INT else "a number"
        if len(text) > MAX_NUMBER_CHARS:
            raise ValueError(f"number longer than {MAX_NUMBER_CHARS} characters")
        try:
            return _core_int(text) if tag == _INT else _core_float(text)
        except ValueError:
            raise ValueError(f"{text!r} is not {kind}") from None
    raise ValueError(f"YAML tag {_short_tag(tag)} is not allowed (only plain strings, numbers, "
                     "booleans, null, mappings and lists)")


_DECIMAL = re.compile(r"[-+]?[0-9]+")
_FLOAT_TEXT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")


def _core_int(text: str) -> int:
    """An integer as YAML 1.2 writes it: decimal (a leading 0 is decimal too), 0o octal, 0x hex."""
    if text.startswith(("0o", "0x")):
        return int(text[2:], 8 if text[1] == "o" else 16)
    if not _DECIMAL.fullmatch(text):  # int() would take `1_000` and ` 1`
        raise ValueError(text)
    return int(text, 10)


def _core_float(text: str) -> float:
    special = {".inf": "inf", "+.inf": "inf", "-.inf": "-inf", ".nan": "nan"}
    if text.lower() in special:
        return float(special[text.lower()])
    if not _FLOAT_TEXT.fullmatch(text):
        raise ValueError(text)  # float() would take `1_0.5`, `infinity` and ` 1`
    return float(text)


def _short_tag(tag: str) -> str:
    return "!!" + tag.removeprefix(_TAG) if tag.startswith(_TAG) else tag if tag.startswith("!") else f"!<{tag}>"


_BUILDING = -1


class _Builder:
    """Nodes to values. An alias is a second reference to its anchor's node: its whole
    expanded cost is charged before it is built again, so a bomb is refused unexpanded."""

    def __init__(self, doc: Document, marks: dict[Loc, tuple[int, int]], variables: dict[str, Any] | None,
                 literal: set[str]):
        self.doc = doc
        self.marks = marks
        self.variables = variables
        self.literal = literal
        self.values = 0  # values built so far
        self.cost: dict[int, int] = {}  # id(mapping or list node) -> values it expanded to
        self.alias_uses = 0
        self.alias_values = 0
        self.expanding = 0  # > 0 while an alias is re-built (paid for at its top)
        self.grown = 0  # characters added by substitution
        self.copied = 0  # values added by whole-value substitution of lists and mappings
        self.problems: list[str] = []  # one line each; the building goes on to find the others

    def note(self, problem: UsageError) -> None:
        self.problems.append(str(problem))

    def mark(self, node: Node) -> Mark:
        return Mark(self.doc.file, *self.place(node))

    @staticmethod
    def place(node: Node) -> tuple[int, int]:
        return node.start_mark.line + 1, node.start_mark.column + 1

    def refuse(self, node: Node, loc: Loc, problem: str) -> UsageError:
        return source_error(self.mark(node), _loc_text(loc), problem)

    def build(self, node: Node, loc: Loc, depth: int = 1) -> Any:
        if depth > MAX_DEPTH:
            raise self.refuse(node, loc, f"nested deeper than {MAX_DEPTH} levels")
        self.values += 1
        self.marks[loc] = self.place(node)
        if isinstance(node, ScalarNode):
            return self.scalar(node, loc)
        cost = self.cost.get(id(node))
        if cost is None:  # the node's first (anchor's own) appearance
            self.cost[id(node)] = _BUILDING
            before = self.values
            value = self.collection(node, loc, depth)
            self.cost[id(node)] = self.values - before + 1
            return value
        if cost == _BUILDING:
            raise self.refuse(node, loc, "an alias is used inside the value it names (a loop)")
        if not self.expanding:
            self.alias_uses += 1
            self.alias_values += cost
            if self.alias_uses > MAX_ALIASES:
                raise self.refuse(node, loc, f"more than {MAX_ALIASES} aliases")
            if self.alias_values > MAX_ALIAS_VALUES:
                raise self.refuse(node, loc, f"aliases expand to more than {MAX_ALIAS_VALUES} values (an alias bomb?)")
        self.expanding += 1
        try:
            return self.collection(node, loc, depth)
        finally:
            self.expanding -= 1

    def collection(self, node: Node, loc: Loc, depth: int) -> Any:
        if isinstance(node, MappingNode):
            if node.tag != _MAP:
                self.note(self.refuse(node, loc, f"YAML tag {_short_tag(node.tag)} is not allowed on a mapping"))
                return None
            out: dict[str, Any] = {}
            for key_node, value_node in node.value:
                key = self.key(key_node, loc)
                if key is None:
                    continue
                if key in out:
                    self.note(source_error(self.mark(key_node), _loc_text(loc), f"duplicate key {key!r}"))
                    continue
                out[key] = self.build(value_node, loc + (key,), depth + 1)
                self.marks[loc + (key,)] = self.place(key_node)
            return out
        if node.tag != _SEQ:
            self.note(self.refuse(node, loc, f"YAML tag {_short_tag(node.tag)} is not allowed on a list"))
            return None
        return [self.build(item, loc + (i,), depth + 1) for i, item in enumerate(node.value)]

    def scalar(self, node: ScalarNode, loc: Loc) -> Any:
        try:
            value = _scalar_value(node)
        except ValueError as exc:
            self.note(self.refuse(node, loc, str(exc)))
            return None
        if isinstance(value, str) and self.variables is not None and "{{" in value:
            return self.substitute(value, node, loc, references=not (loc and loc[0] in self.literal))
        return value

    def key(self, node: Node, loc: Loc) -> str | None:
        """A key is its text: `yes:`, `null:` and `1:` are the keys 'yes', 'null' and '1'.
        None (the problem noted): not a key we read; the pair is left out."""
        problem = None
        if not isinstance(node, ScalarNode):
            problem = "a key must be a plain string, not a mapping or list"
        elif not node.style and node.value == "<<":  # plain style: None from PyYAML, "" from libyaml
            problem = "merge keys (<<) are not supported: write the keys out"
        elif node.tag not in (_STR, _INT, _FLOAT, _BOOL, _NULL):
            problem = f"YAML tag {_short_tag(node.tag)} is not allowed"
        if problem is not None:
            self.note(source_error(self.mark(node), _loc_text(loc), problem))
            return None
        return str(node.value)  # a scalar node's value is its text

    def substitute(self, text: str, node: ScalarNode, loc: Loc, references: bool) -> Any:
        assert self.variables is not None
        parts: list[str] = []
        pos = 0
        for nth, start in enumerate(_all(text, "{{")):
            if start < pos:
                continue  # inside the reference just read: `{{ '{{' }}`
            found = _TEMPLATE.match(text, start)
            if not found:
                return self.bad_template(node, loc, text, nth, f"broken template {_fragment(text, start)!r}: "
                                          "a variable is written {{ name }}")
            name, brace = found.group(1), found.group(2) or found.group(3)
            if name is not None:
                if not references:
                    return self.bad_template(node, loc, text, nth, f"{{{{ {name} }}}}: variables are not "
                                              f"substituted inside {loc[0]}")
                if name not in self.variables:
                    known = ", ".join(sorted(self.variables)) or "none"
                    return self.bad_template(node, loc, text, nth, f"undefined variable {name!r} (defined: {known})")
                if found.span() == (0, len(text)) or text.strip() == found.group():
                    return self.whole(self.variables[name], node, loc)  # keep the type: port stays an int
            parts += [text[pos:start], brace or str(self.variables[name])]
            pos = found.end()
        result = "".join(parts) + text[pos:]
        self.grown += max(0, len(result) - len(text))
        if self.grown > MAX_TEMPLATE_GROWTH:
            raise self.refuse(node, loc, f"templates make the file more than {MAX_TEMPLATE_GROWTH // 1024} KiB larger")
        return result

    def whole(self, value: Any, node: ScalarNode, loc: Loc) -> Any:
        if isinstance(value, (dict, list)):
            self.copied += _count(value)
            if self.copied > MAX_ALIAS_VALUES:
                raise self.refuse(node, loc, f"variables expand to more than {MAX_ALIAS_VALUES} values")
        return value

    def bad_template(self, node: ScalarNode, loc: Loc, value: str, nth: int, problem: str) -> str:
        """Note the problem; the value stays as written, and the building goes on."""
        self.note(self.template_error(node, loc, value, nth, problem))
        return value

    def template_error(self, node: ScalarNode, loc: Loc, value: str, nth: int, problem: str) -> UsageError:
        """At the nth `{{` of the value, found in the file's text of the scalar (quotes,
        escapes and block indentation move it; braces they do not)."""
        raw = self.doc.text[node.start_mark.index:node.end_mark.index]
        starts = list(_all(raw, "{{"))
        if len(starts) == len(list(_all(value, "{{"))):
            index = node.start_mark.index + starts[nth]
            line = self.doc.text.count("\n", 0, index) + 1
            mark = Mark(self.doc.file, line, index - self.doc.text.rfind("\n", 0, index))
        else:
            mark = self.mark(node)
        return source_error(mark, _loc_text(loc), problem)


def _all(text: str, needle: str) -> Iterable[int]:
    """Start of every occurrence of `needle`, overlapping ones included ('{{{' has two '{{')."""
    start = text.find(needle)
    while start != -1:
        yield start
        start = text.find(needle, start + 1)


def _fragment(text: str, start: int) -> str:
    end = text.find("}}", start + 2)
    piece = text[start:end + 2] if end != -1 and end - start <= 30 else text[start:start + 20]
    return piece.split("\n")[0]


def _count(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + sum(_count(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(_count(v) for v in value)
    return 1
