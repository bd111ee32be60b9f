"""The shared vocabulary of edit ops: what an edit points at, and what it puts there.

Every op that finds its target in the file says it in these words (`Where`, `Choose`,
`Pick`): what the target is (`target`, `names`, `callee`, `arg`), where inside its value the
edit goes (`path`), and which of several matching places are edited (`within`, `nested`,
`occurrence`, `all`); by default a target must match exactly one place. An op that writes a
value says which one with `WantsValue`. Pydantic only: no op, no engine, no libcst.
"""

from __future__ import annotations

import ast
import datetime
import keyword
import re
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from patchkit.edits.model import MODULE_SCOPE, Scalar, ValueType, a_type, type_name

QUALNAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def parse_python(source: str, mode: str = "exec") -> ast.AST:
    """ast.parse, with the parser's own give-ups on deeply nested code (`1+1+...`, `-----1`:
    RecursionError or MemoryError, raised at once) reported as the SyntaxError they are."""
    try:
        return ast.parse(source, mode=mode)
    except (RecursionError, MemoryError):
        raise SyntaxError("too deeply nested to parse", ("<recipe>", 1, 1, None)) from None


def _check_plain(value: Any, where: str) -> None:
    """A YAML value we can write as a Python literal: no dates, no custom tags."""
    if isinstance(value, (list, tuple)):
        for item in value:
            _check_plain(item, where)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_plain(key, where)
            _check_plain(item, where)
    elif isinstance(value, (datetime.date, datetime.time)):
        raise ValueError(f"{where} {value!r} is a date (YAML reads it so): quote it, or write expr: ...")
    elif not isinstance(value, (str, int, float, bool, bytes, type(None))):
        raise ValueError(f"{where} {value!r} is not a literal (string, number, bool, null, list, dict)")


class WantsValue(BaseModel):
    model_config = ConfigDict(strict=True, defer_build=True)  # a mixin: built as the op that has it
    kind: ClassVar[str]  # the op's name (EditSpec.kind): its messages name it

    value: Any = Field(None, description="a literal (string, number, bool, null, list, dict)")
    expr: str | None = Field(None, description="Python expression source, for non-literals")
    type: ValueType | None = Field(None, description=(
        "the new value's type, said outright: replacing a literal of another type (a bool with a string, "
        "None with an int) is then meant and not warned about, and a string such as \"no\" where the code "
        "has a bool is kept (without `type: str` that is refused: did you mean false?)"))

    @model_validator(mode="after")
    def _one_of_value_or_expr(self) -> WantsValue:
        given = ("value" in self.model_fields_set) + (self.expr is not None)
        if given != 1:
            raise ValueError("give exactly one of `value` or `expr`")
        if self.expr is not None:
            try:
                parse_python(self.expr.strip(), mode="eval")
            except SyntaxError as exc:  # a recipe error, not a target that is missing
                raise ValueError(f"expr {self.expr!r} is not a Python expression: {exc.msg}") from None
        else:
            _check_plain(self.value, "value")
        self._check_type()
        return self

    def _check_type(self) -> None:
        """`type` is the value's own (or the literal `expr`'s): it states a type, never converts."""
        if self.type is None:
            return
        if self.expr is not None:
            try:
                given = ast.literal_eval(self.expr.strip())
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                return  # not a literal: its type is known when it runs
            what = f"expr {self.expr.strip()!r}"
        else:
            given, what = self.value, f"value {self.value!r}"
        actual = type_name(given)
        if actual != self.type:
            hint = f" (write {float(given)!r})" if actual == "int" and self.type == "float" else ""
            raise ValueError(f"{what} is {a_type(actual or type(given).__name__)}, not {a_type(self.type)} "
                             f"as `type: {self.type}` says{hint}")

    def describe(self) -> str:
        return self.expr if self.expr is not None else repr(self.value)


class Pick(BaseModel):
    """When a target matches several places: by default that is an error naming them all."""

    model_config = ConfigDict(defer_build=True)  # a mixin: built as the op that has it

    occurrence: int | None = Field(
        None, ge=1, description="the target matches several places: edit the Nth (1-based, in source order)")
    all: bool = Field(False, description="the target matches several places: edit every one of them")

    @model_validator(mode="after")
    def _one_way_to_pick(self) -> Pick:
        if self.occurrence is not None and self.all:
            raise ValueError("give `occurrence` or `all`, not both")
        return self


class Choose(Pick):
    """Which of the places a target matches are edited: exactly one, unless told."""

    within: str | None = Field(
        None, description="only this scope, named exactly: `Class`, `Class.method`, `func`, or `<module>` "
                          "for the top level; scopes nested inside it count only with `nested: true`")
    nested: bool = Field(False, description="with `within`: the scopes nested inside it count too")

    @model_validator(mode="after")
    def _scope_is_a_scope(self) -> Choose:
        if self.nested and self.within is None:
            raise ValueError("`nested` applies to a `within` scope: give `within` too")
        if self.within is not None and self.within != MODULE_SCOPE and not QUALNAME.match(self.within):
            raise ValueError(f"within {self.within!r} is not a scope like Class.method, func or <module>")
        return self


def _target_expression(text: str) -> ast.expr:
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        raise ValueError(f"{text!r} is not an assignment target like x, self.x or d['k']") from None
    if not isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)):
        raise ValueError(f"{text!r} is not an assignment target like x, self.x or d['k']")
    return node


def check_callee(value: str | list[str] | None) -> None:
    texts = [value] if isinstance(value, str) else value or []
    if not texts and value is not None:
        raise ValueError("callee: give at least one")
    for text in texts:
        try:
            ast.parse(text.strip(), mode="eval")
        except SyntaxError:
            raise ValueError(f"callee {text!r} is not a Python expression like f, mod.f or super().__init__") from None


def check_identifier(value: str, field: str, noun: str = "a Python name", alternative: str = "") -> None:
    """A keyword argument's or parameter's name: an identifier, and not one of Python's keywords."""
    if not value.isidentifier():
        raise ValueError(f"{field} {value!r} is not {noun}{alternative}")
    if keyword.iskeyword(value):
        raise ValueError(f"{field} {value!r} is a Python keyword: no call can pass it and no parameter has it")


Target = Literal["assignment", "call_arg", "return", "default"]


class Where(Choose):
    """What the target is, and where inside its value the edit goes."""

    target: Target = Field(
        "assignment", description="assignment: a value assigned to one of `names` (=, :, +=, |=); "
                                  "call_arg: argument `arg` of calls to `callee`; return: the value of a "
                                  "return statement (in `within`); default: the default of parameter `arg`")
    names: list[str] | None = Field(
        None, min_length=1,
        description="target: assignment. Targets as written in the code, alternatives: `x`, `self.x`, "
                    "`Config.x`, `d['k']`; a bare `x` matches only a bare `x`")
    callee: str | list[str] | None = Field(
        None, description="target: call_arg. The called expression as written: `setup`, `torch.compile`, "
                          "`super().__init__`, `', '.join`; a list gives alternatives")
    arg: str | int | None = Field(
        None, description="call_arg: a keyword name or a position (0-based, positional arguments); "
                          "default: the parameter's name")
    path: list[Scalar] = Field(
        default_factory=list,
        description="steps into the value, like subscripts: a dict key, a list/tuple index, a call's keyword "
                    "or position; a `lambda:` on the way is looked through, e.g. [default_factory]")

    @field_validator("names")
    @classmethod
    def _names_are_targets(cls, value: list[str] | None) -> list[str] | None:
        for name in value or []:
            _target_expression(name)
        return value

    @field_validator("callee")
    @classmethod
    def _callee_is_an_expression(cls, value: str | list[str] | None) -> str | list[str] | None:
        check_callee(value)
        return value

    @field_validator("arg")
    @classmethod
    def _arg_is_a_name_or_position(cls, value: str | int | None) -> str | int | None:
        if isinstance(value, bool) or (isinstance(value, int) and value < 0):
            raise ValueError("`arg` is a keyword name or a position 0, 1, ...")
        if isinstance(value, str):
            check_identifier(value, "`arg`", "a keyword name", " (or write a position: 0, 1, ...)")
        return value

    @model_validator(mode="after")
    def _fields_fit_the_target(self) -> Where:
        needs = {"assignment": {"names"}, "call_arg": {"callee", "arg"}, "return": set(), "default": {"arg"}}
        own = needs[self.target]
        for field in ("names", "callee", "arg"):
            given = getattr(self, field) is not None
            if field in own and not given:
                raise ValueError(f"target: {self.target} needs `{field}`")
            if field not in own and given:
                raise ValueError(f"`{field}` does not apply to target: {self.target}")
        if self.target == "default" and not isinstance(self.arg, str):
            raise ValueError("target: default names the parameter: `arg` is its name")
        return self

    @property
    def callees(self) -> list[str]:
        return [self.callee] if isinstance(self.callee, str) else list(self.callee or [])

    def describe_target(self) -> str:
        if self.target == "assignment":
            return "assignment to " + " or ".join(self.names or [])
        if self.target == "call_arg":
            kind = f"keyword {self.arg}" if isinstance(self.arg, str) else f"positional argument {self.arg}"
            return f"{kind} of a call to {' or '.join(self.callees)}"
        if self.target == "return":
            return "return statement with a value"
        return f"parameter {self.arg} with a default"


class ValueAt(Where, WantsValue):
    """A value put at a target (set_value, dict_set)."""

    model_config = ConfigDict(defer_build=True)  # a mixin: built as the op that has it


class CallValue(Choose, WantsValue):
    """A value passed to calls that are chosen the way targets are (call_kwarg)."""

    model_config = ConfigDict(defer_build=True)  # a mixin: built as the op that has it
