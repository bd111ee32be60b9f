"""replace_function's parameters, as a recipe writes them."""

from __future__ import annotations

import ast
import textwrap
from typing import ClassVar

from pydantic import Field, model_validator

from patchkit.edits.model import EditResult
from patchkit.edits.ops import EngineSpec
from patchkit.edits.targets import QUALNAME, Pick, parse_python


class ReplaceFunction(EngineSpec, Pick):
    """Ensure the body of function `function` (a qualname: `func`, `Class.method`,
    `outer.inner`) is `body`, compared by meaning (AST). Decorators, signature and
    everything outside the body stay byte-identical; `body` is re-indented to fit."""

    kind: ClassVar[str] = "replace_function"
    function: str = Field(description="qualified name, e.g. Class.method, func or outer.inner")
    body: str = Field(description="Python source of the new body, dedented; re-indented to the function's indentation")
    keep_docstring: bool = Field(True, description="keep the function's docstring when `body` has none of its own")

    @model_validator(mode="after")
    def _valid_target_and_body(self) -> ReplaceFunction:
        if not QUALNAME.match(self.function):
            raise ValueError(f"function {self.function!r} is not a qualified name like Class.method or func")
        try:
            tree = parse_python(self.body_source)
        except SyntaxError as exc:  # a recipe error, not a target that is missing
            raise ValueError(
                f"body of {self.function} is not valid Python: {exc.msg} (body line {exc.lineno})"
            ) from None
        if not isinstance(tree, ast.Module) or not tree.body:
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

    def compute(self, source: str) -> EditResult:
        from patchkit.edits.ops.replace_function.engine import run

        return run(self, source, self.function, self.body_source, self.keep_docstring and not self.has_docstring())
