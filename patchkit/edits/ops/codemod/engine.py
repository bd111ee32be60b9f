"""codemod: run a user's own libcst transformer from a Python file next to the recipe."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Any

import libcst as cst

from patchkit.edits.base import EditError, EditResult, parse_module

if TYPE_CHECKING:
    from libcst.codemod import Codemod


def _load(path: Path, transformer: str) -> type[cst.CSTTransformer] | type[Codemod]:
    from libcst.codemod import Codemod  # 0.3 s to import: only when a recipe uses it

    name = "patchkit_codemod_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
    module_spec = importlib.util.spec_from_file_location(name, path)
    assert module_spec and module_spec.loader
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:  # the user's file: any error is theirs to read
        raise EditError(f"codemod file {path} failed to load: {type(exc).__name__}: {exc}") from exc
    cls = getattr(module, transformer, None)
    if not isinstance(cls, type) or not issubclass(cls, (cst.CSTTransformer, Codemod)):
        raise EditError(f"{path} has no libcst CSTTransformer or Codemod class named {transformer}")
    return cls


def run(source: str, path: Path, transformer: str, args: dict[str, Any]) -> EditResult:
    """`transformer`, a class in the file at `path` (checked by the spec), built with `args`, run on `source`."""
    from libcst.codemod import Codemod, CodemodContext, SkipFile

    cls = _load(path, transformer)
    module = parse_module(source)
    try:
        if issubclass(cls, Codemod):
            codemod = cls(CodemodContext(), **args)
            instance: object = codemod
            try:
                new = codemod.transform_module(module)
            except SkipFile as skip:
                return EditResult("not_found", source, f"{transformer} skipped the file: {skip}")
        else:
            visitor = cls(**args)
            instance = visitor
            new = module.visit(visitor)
    except EditError:
        raise
    except Exception as exc:
        raise EditError(f"codemod {transformer} failed: {type(exc).__name__}: {exc}") from exc
    not_found = getattr(instance, "not_found", None)
    if new.code != source:
        return EditResult("changed", new.code, f"{transformer} changed the file")
    if not_found:
        return EditResult("not_found", source, str(not_found))
    return EditResult("already", source, "already in place")
