"""The edit contract without libcst: parameters (pydantic), verdicts, results.

Kept free of libcst so that loading and validating a recipe stays fast; the
libcst engines are imported only when an edit is computed.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict

Verdict = Literal["changed", "already", "not_found"]
Scalar = str | int | float | bool | None
MODULE_SCOPE = "<module>"  # how messages and `within` name the top level of a file

# The types of Python literals, by the names a recipe's `type:` and messages use.
ValueType = Literal["str", "int", "float", "bool", "None", "bytes", "complex", "list", "tuple", "dict", "set"]
_TYPE_NAMES: dict[type, ValueType] = {
    str: "str", int: "int", float: "float", bool: "bool", type(None): "None", bytes: "bytes",
    complex: "complex", list: "list", tuple: "tuple", dict: "dict", set: "set", frozenset: "set"}
_A_TYPE = {"str": "a string", "int": "an int", "float": "a float", "bool": "a bool", "None": "None",
           "complex": "a complex number", "list": "a list", "tuple": "a tuple", "dict": "a dict", "set": "a set"}


def type_name(value: object) -> ValueType | None:
    """The literal type of a value (`True` is a bool, not an int); None for a non-literal."""
    return _TYPE_NAMES.get(type(value))


def a_type(name: str) -> str:
    """A type's name in a sentence: "a string", "an int", "None"."""
    return _A_TYPE.get(name, name)


@dataclass(frozen=True)
class EditResult:
    verdict: Verdict
    source: str
    message: str
    # A `not_found` that is a refusal: the target is there, but what the recipe asks for is
    # almost surely not what it means (`value: no` for a bool); the step fails on it.
    refused: bool = False


AMBIGUOUS = " is ambiguous: "  # what the message of a target matching several places says


def is_ambiguity(message: str) -> bool:
    """Does an edit's not_found message say its target matches several places?"""
    return AMBIGUOUS in message


class EditError(Exception):
    """The source cannot be edited as asked (not a parse error of ours: theirs)."""


class EditRefused(EditError):
    """The target is found, but the edit is refused whatever else matches: the recipe asks for
    what it almost surely does not mean (a place's `refusal`, see places.py)."""


class EditBug(EditError):
    """An edit produced text that is not Python: a bug of patchkit's, never written anywhere."""


class EditSpec(BaseModel):
    """Base of every edit's parameters; subclasses implement `apply`. `kind` is the name a
    recipe writes the op under (`{list_insert: {...}}`); the registry (edits/__init__.py) lists the ops."""

    # strict: a recipe's `names: [1]` is not ["1"]; deferred: built at an op's first use (BUILT_ON_USE)
    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)
    kind: ClassVar[str] = ""

    def apply(self, source: str) -> EditResult:  # pragma: no cover - abstract
        raise NotImplementedError

    def bind(self, base_dir: Path) -> Self:
        """Where files the op names (`file:`) are found: the recipe's folder. An op without
        files has nothing to bind."""
        return self


BOM = "\ufeff"


def keeping_bom(apply: Callable[[str], EditResult], source: str) -> EditResult:
    """`apply` on the source after its UTF-8 byte order mark, which is not Python (libcst drops
    it), and the mark kept in front of the result."""
    if not source.startswith(BOM):
        return apply(source)
    result = apply(source[len(BOM):])
    return dataclasses.replace(result, source=BOM + result.source)


def _compiles(source: str, flags: int = 0) -> SyntaxError | None:
    try:
        compile(source, "<patched>", "exec", flags=flags, dont_inherit=True)
    except SyntaxError as exc:
        return exc
    except ValueError as exc:  # a NUL byte
        return SyntaxError(str(exc))
    return None


def _parses(source: str) -> SyntaxError | None:
    try:
        ast.parse(source)
    except SyntaxError as exc:
        return exc
    except ValueError as exc:
        return SyntaxError(str(exc))
    return None


def compile_error(before: str, after: str, first_line: int = 1, flags: int = 0) -> str | None:
    """Why `after` (an edit of `before`) is not Python, as this interpreter compiles it; None
    when it is. Judged against the original: a file that already fails to compile here
    (newer syntax, `return` at module level) is held only to parsing, or not at all when
    this Python cannot parse it either (the host's own syntax check still runs before
    anything is kept). `before`/`after` may be one statement of a file (tree.py), starting
    at its line `first_line`, compiled with the file's `from __future__` flags."""
    error = _compiles(after, flags)
    if error is None:
        return None
    if _compiles(before, flags) is not None:
        if _parses(before) is not None:
            return None
        error = _parses(after)
        if error is None:
            return None
    line = ""
    if error.lineno:
        lines = after.splitlines()
        if 0 < error.lineno <= len(lines):
            line = f": `{lines[error.lineno - 1].strip()[:120]}`"
    number = error.lineno + first_line - 1 if error.lineno else error.lineno
    return f"{error.msg}, line {number}{line}"
