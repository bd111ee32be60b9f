"""codemod: run a user's own libcst transformer from a Python file next to the recipe."""

from __future__ import annotations

import importlib.util
import hashlib
from pathlib import Path
from typing import Any

import libcst as cst
from pydantic import Field, PrivateAttr

from patchkit.edits.base import EditError, EditResult, EditSpec, parse_module


class CodemodEdit(EditSpec):
    """`file` (relative to the recipe, may not leave its folder) defines `transformer`,
    a libcst CSTTransformer or Codemod subclass, built with `args` as keyword arguments.
    A transformer may set `self.not_found = "why"` to report that its target is absent."""

    file: str
    transformer: str = Field(description="class name in `file`")
    args: dict[str, Any] = Field(default_factory=dict)
    _base_dir: Path | None = PrivateAttr(None)

    def bind(self, base_dir: Path) -> "CodemodEdit":
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

    def _load(self) -> type:
        from libcst.codemod import Codemod  # 0.3 s to import: only when a recipe uses it

        path = self.module_path()
        name = "patchkit_codemod_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as exc:  # the user's file: any error is theirs to read
            raise EditError(f"codemod file {path} failed to load: {type(exc).__name__}: {exc}") from exc
        cls = getattr(module, self.transformer, None)
        if not isinstance(cls, type) or not issubclass(cls, (cst.CSTTransformer, Codemod)):
            raise EditError(f"{path} has no libcst CSTTransformer or Codemod class named {self.transformer}")
        return cls

    def apply(self, source: str) -> EditResult:
        from libcst.codemod import Codemod, CodemodContext, SkipFile

        cls = self._load()
        module = parse_module(source)
        try:
            if issubclass(cls, Codemod):
                transformer = cls(CodemodContext(), **self.args)
                try:
                    new = transformer.transform_module(module)
                except SkipFile as skip:
                    return EditResult("not_found", source, f"{self.transformer} skipped the file: {skip}")
            else:
                transformer = cls(**self.args)
                new = module.visit(transformer)
        except EditError:
            raise
        except Exception as exc:
            raise EditError(f"codemod {self.transformer} failed: {type(exc).__name__}: {exc}") from exc
        not_found = getattr(transformer, "not_found", None)
        if new.code != source:
            return EditResult("changed", new.code, f"{self.transformer} changed the file")
        if not_found:
            return EditResult("not_found", source, str(not_found))
        return EditResult("already", source, "already in place")
