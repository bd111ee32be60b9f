"""Pure CST edit operations, registered by the name a recipe uses for them.

specs.py holds what a recipe writes; each operation's module (list_insert.py, ...) holds
its libcst engine, imported only when an edit is computed.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, model_validator

from patchkit.edits.model import EditBug, EditError, EditResult, EditSpec, Verdict
from patchkit.edits.specs import (
    CallKwarg,
    CodemodEdit,
    DiffEdit,
    DictSet,
    ListInsert,
    ListRemove,
    ReplaceFunction,
    SetValue,
)

__all__ = ["Edit", "EditBug", "EditError", "EditResult", "EditSpec", "Verdict", "EDIT_KINDS"]

EDIT_KINDS: dict[str, type[EditSpec]] = {
    "list_insert": ListInsert,
    "list_remove": ListRemove,
    "set_value": SetValue,
    "dict_set": DictSet,
    "call_kwarg": CallKwarg,
    "codemod": CodemodEdit,
    "replace_function": ReplaceFunction,
    "diff": DiffEdit,
}


class Edit(BaseModel):
    """Exactly one edit operation, written as `{kind: {params}}` in a recipe."""

    model_config = ConfigDict(extra="forbid", strict=True)

    list_insert: ListInsert | None = None
    list_remove: ListRemove | None = None
    set_value: SetValue | None = None
    dict_set: DictSet | None = None
    call_kwarg: CallKwarg | None = None
    codemod: CodemodEdit | None = None
    replace_function: ReplaceFunction | None = None
    diff: DiffEdit | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> "Edit":
        chosen = [k for k in EDIT_KINDS if getattr(self, k) is not None]
        if len(chosen) != 1:
            raise ValueError(f"give exactly one edit operation, one of: {', '.join(EDIT_KINDS)}")
        return self

    @property
    def kind(self) -> str:
        return next(k for k in EDIT_KINDS if getattr(self, k) is not None)

    @property
    def op(self) -> EditSpec:
        spec: EditSpec = getattr(self, self.kind)
        return spec

    def apply(self, source: str) -> EditResult:
        return self.op.apply(source)
