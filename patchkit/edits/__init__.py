"""Pure CST edit operations, registered by the name a recipe uses for them.

Each op is a package of ops/: `spec.py` (what a recipe writes) and `engine.py` (its libcst
engine, imported only when an edit is computed). targets.py is the vocabulary they share
(what an edit points at); model.py the contract (EditSpec, EditResult, errors).

Adding an op: ops/NAME/spec.py (an `EngineSpec` with a `kind` and a `compute` that imports
its engine, handing it the vocabulary and its own fields), ops/NAME/engine.py, its import and a line in
`OPS`, and its tests: a folder of data cases tests/unit/edit_cases/NAME/ (a change and a
refusal at least) with the op's fuzz generator, fuzz.py, beside them; tests that go through
`OPS` ask for both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, TypeVar

from pydantic import BaseModel, ConfigDict, create_model, model_validator

from patchkit.base.built_on_use import BUILT_ON_USE, SchemaOfBuiltOnUse
from patchkit.edits.model import EditBug, EditError, EditResult, EditSpec, Verdict
from patchkit.edits.ops.call_kwarg.spec import CallKwarg
from patchkit.edits.ops.codemod.spec import CodemodEdit
from patchkit.edits.ops.dict_set.spec import DictSet
from patchkit.edits.ops.diff.spec import DiffEdit
from patchkit.edits.ops.list_insert.spec import ListInsert
from patchkit.edits.ops.list_remove.spec import ListRemove
from patchkit.edits.ops.replace_function.spec import ReplaceFunction
from patchkit.edits.ops.set_value.spec import SetValue

__all__ = ["Edit", "EditBug", "EditError", "EditResult", "EditSpec", "Verdict", "EDIT_KINDS", "OPS"]

# The edit operations, in the order messages and the JSON Schema list them: the one registry.
OPS: tuple[type[EditSpec], ...] = (
    ListInsert,
    ListRemove,
    SetValue,
    DictSet,
    CallKwarg,
    CodemodEdit,
    ReplaceFunction,
    DiffEdit,
)


def _kinds(ops: tuple[type[EditSpec], ...]) -> dict[str, type[EditSpec]]:
    kinds: dict[str, type[EditSpec]] = {}
    for op in ops:
        if not op.kind or op.kind in kinds:
            raise TypeError(f"edit op {op.__name__}: kind {op.kind!r} is empty or taken")
        kinds[op.kind] = op
    return kinds


EDIT_KINDS: dict[str, type[EditSpec]] = _kinds(OPS)

S = TypeVar("S", bound=EditSpec)


# `Edit` is this class with one optional field per op of `OPS` (create_model, below); mypy
# sees this class, and reads an op through `op`, `of(Spec)` or the two typed names below.
class EditChoice(SchemaOfBuiltOnUse):
    """Exactly one edit operation, written as `{kind: {params}}` in a recipe."""

    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)

    @model_validator(mode="after")
    def _exactly_one(self) -> EditChoice:
        chosen = [k for k in EDIT_KINDS if self.__dict__.get(k) is not None]
        if len(chosen) != 1:
            raise ValueError(f"give exactly one edit operation, one of: {', '.join(EDIT_KINDS)}")
        return self

    @property
    def kind(self) -> str:
        return self.op.kind

    @property
    def op(self) -> EditSpec:
        chosen: EditSpec = next(v for v in (self.__dict__.get(k) for k in EDIT_KINDS) if v is not None)
        return chosen

    def of(self, op: type[S]) -> S | None:
        """The op when it is of this type (`edit.of(DiffEdit)`), else None."""
        spec = self.op
        return spec if isinstance(spec, op) else None

    if TYPE_CHECKING:  # fields at run time (one per op); mypy's type of the two the patch step reads by name
        @property
        def diff(self) -> DiffEdit | None: ...

        @property
        def codemod(self) -> CodemodEdit | None: ...

    def apply(self, source: str) -> EditResult:
        return self.op.apply(source)


if TYPE_CHECKING:
    Edit = EditChoice
else:
    Edit = create_model("Edit", __base__=EditChoice, __module__=__name__, __doc__=EditChoice.__doc__,
                        **{kind: (Annotated[op | None, BUILT_ON_USE], None) for kind, op in EDIT_KINDS.items()})
