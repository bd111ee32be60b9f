"""codemod's parameters, as a recipe writes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, PrivateAttr

from patchkit.edits.model import EditError, EditResult
from patchkit.edits.ops import EngineSpec


class CodemodEdit(EngineSpec):
    """`file` (relative to the recipe, may not leave its folder) defines `transformer`,
    a libcst CSTTransformer or Codemod subclass, built with `args` as keyword arguments.
    A transformer may set `self.not_found = "why"` to report that its target is absent."""

    kind: ClassVar[str] = "codemod"
    file: str
    transformer: str = Field(description="class name in `file`")
    args: dict[str, Any] = Field(default_factory=dict)
    _base_dir: Path | None = PrivateAttr(None)

    def not_python(self, error: str) -> EditError:
        return EditError(f"codemod {self.transformer} produced Python that does not compile ({error}); "
                         "nothing was changed")

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

    def compute(self, source: str) -> EditResult:
        from patchkit.edits.ops.codemod.engine import run

        return run(source, self.module_path(), self.transformer, self.args)
