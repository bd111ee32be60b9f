"""set_value: make the right-hand side of an assignment equal a value."""

from __future__ import annotations

import libcst as cst
from pydantic import Field

from patchkit.edits.base import AssignmentEditor, EditResult, EditSpec, quote_style, run_assignment_editor, same_expression
from patchkit.edits.values import WantsValue


class SetValue(EditSpec, WantsValue):
    """Ensure `names = <value>` (within a scope), compared by meaning."""

    names: list[str] = Field(min_length=1)
    within: str | None = None

    def apply(self, source: str) -> EditResult:
        return run_assignment_editor(source, _Setter(self))


class _Setter(AssignmentEditor):
    def __init__(self, spec: SetValue) -> None:
        super().__init__(spec.names, spec.within)
        self.spec = spec

    def edit_value(self, value: cst.BaseExpression) -> cst.BaseExpression:
        wanted = self.spec.wanted_node(quote_style([value]))
        if same_expression(value, wanted):
            return value
        old = cst.Module(body=[]).code_for_node(value)
        self.note(f"set {'/'.join(self.names)} = {self.spec.describe()} (was {old})")
        return wanted.with_changes(lpar=value.lpar, rpar=value.rpar)
