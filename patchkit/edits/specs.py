"""The parameters of every edit operation, as a recipe writes them (pydantic, no libcst).

`apply` imports the operation's libcst engine on first use, so loading and
validating recipes stays fast.
"""

from __future__ import annotations

import ast
import re
import textwrap
from importlib import import_module
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from patchkit.edits.model import EditError, EditResult, EditSpec, Scalar


def _parse(source: str, mode: str = "exec") -> ast.AST:
    """ast.parse, with the parser's own give-ups on deeply nested code (`1+1+...`, `-----1`:
    RecursionError or MemoryError, raised at once) reported as the SyntaxError they are."""
    try:
        return ast.parse(source, mode=mode)
    except (RecursionError, MemoryError):
        raise SyntaxError("too deeply nested to parse", ("<recipe>", 1, 1, None)) from None


class _Engine(EditSpec):
    """An edit whose work is done by `patchkit.edits.<engine>.run(spec, source)`."""

    _engine: str = ""

    def apply(self, source: str) -> EditResult:
        return import_module(f"patchkit.edits.{self._engine}").run(self, source)


class WantsValue(BaseModel):
    model_config = ConfigDict(strict=True)

    value: Any = Field(None, description="a literal (string, number, bool, null, list, dict)")
    expr: str | None = Field(None, description="Python expression source, for non-literals")

    @model_validator(mode="after")
    def _one_of_value_or_expr(self) -> WantsValue:
        given = ("value" in self.model_fields_set) + (self.expr is not None)
        if given != 1:
            raise ValueError("give exactly one of `value` or `expr`")
        if self.expr is not None:
            try:
                _parse(self.expr.strip(), mode="eval")
            except SyntaxError as exc:  # a recipe error, not a target that is missing
                raise ValueError(f"expr {self.expr!r} is not a Python expression: {exc.msg}") from None
        return self

    def describe(self) -> str:
        return self.expr if self.expr is not None else repr(self.value)


class ListInsert(_Engine):
    """Ensure `values` are elements of the collection assigned to one of `names`."""

    _engine = "list_insert"
    names: list[str] = Field(min_length=1, description="assignment targets to look for; every one assigned in scope is edited")
    values: list[Scalar] = Field(min_length=1, description="literals that must be elements")
    within: str | None = Field(None, description="only inside this scope, e.g. Class.method")
    after: Scalar = Field(None, description="insert after this element; missing: append, and say so")


class ListRemove(_Engine):
    """Ensure `values` are not elements of the collection assigned to one of `names`."""

    _engine = "list_remove"
    names: list[str] = Field(min_length=1)
    values: list[Scalar] = Field(min_length=1)
    within: str | None = None


class SetValue(_Engine, WantsValue):
    """Ensure `names = <value>` (within a scope), compared by meaning."""

    _engine = "set_value"
    names: list[str] = Field(min_length=1)
    within: str | None = None


class DictSet(_Engine, WantsValue):
    """Ensure `names[key] == value` in the dict literal assigned to one of `names`."""

    _engine = "dict_set"
    names: list[str] = Field(min_length=1)
    key: Scalar
    within: str | None = None


class CallKwarg(_Engine, WantsValue):
    """Ensure every call to `callee` (last dotted part or full name) passes `keyword=value`."""

    _engine = "call_kwarg"
    callee: str = Field(description="function name, e.g. SamplingParams or torch.compile")
    keyword: str
    within: str | None = None


class CodemodEdit(_Engine):
    """`file` (relative to the recipe, may not leave its folder) defines `transformer`,
    a libcst CSTTransformer or Codemod subclass, built with `args` as keyword arguments.
    A transformer may set `self.not_found = "why"` to report that its target is absent."""

    _engine = "codemod"
    file: str
    transformer: str = Field(description="class name in `file`")
    args: dict[str, Any] = Field(default_factory=dict)
    _base_dir: Path | None = PrivateAttr(None)

    def bind(self, base_dir: Path) -> CodemodEdit:
        self._base_dir = base_dir
        return self

    def module_path(self) -> Path:
        base = (self._base_dir or Path.cwd()).resolve()
        path = (base / self.file).resolve()
        if not path.is_relative_to(base):
            raise EditError(f"codemod file {self.file} is outside the recipe's folder {base}")
        if not path.is_file():
            raise EditError(f"codemod file {path} does not exist")
        return path


_QUALNAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


class ReplaceFunction(_Engine):
    """Ensure the body of function `function` (a qualname: `func`, `Class.method`,
    `outer.inner`) is `body`, compared by meaning (AST). Decorators, signature and
    everything outside the body stay byte-identical; `body` is re-indented to fit."""

    _engine = "replace_function"
    function: str = Field(description="qualified name, e.g. Class.method, func or outer.inner")
    body: str = Field(description="Python source of the new body, dedented; re-indented to the function's indentation")
    keep_docstring: bool = Field(True, description="keep the function's docstring when `body` has none of its own")

    @model_validator(mode="after")
    def _valid_target_and_body(self) -> ReplaceFunction:
        if not _QUALNAME.match(self.function):
            raise ValueError(f"function {self.function!r} is not a qualified name like Class.method or func")
        try:
            tree = _parse(self.body_source)
        except SyntaxError as exc:  # a recipe error, not a target that is missing
            raise ValueError(
                f"body of {self.function} is not valid Python: {exc.msg} (body line {exc.lineno})"
            ) from None
        if not tree.body:
            raise ValueError(f"body of {self.function} has no statements (write `pass` for an empty body)")
        return self

    @property
    def body_source(self) -> str:
        """`body` as parseable module text: dedented when written indented, ending in a newline."""
        text = self.body
        first = next((line for line in text.splitlines() if line.strip()), "")
        if first[:1] in (" ", "\t"):
            text = textwrap.dedent(text)
        return text if text.endswith("\n") else text + "\n"

    def has_docstring(self) -> bool:
        return ast.get_docstring(ast.parse(self.body_source), clean=False) is not None
