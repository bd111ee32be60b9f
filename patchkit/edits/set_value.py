"""set_value: make the right-hand side of an assignment equal a value."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from patchkit.edits.base import (
    AssignmentEditor,
    EditResult,
    quote_style,
    run_assignment_editor,
    same_expression,
)
from patchkit.edits.values import wanted_node

if TYPE_CHECKING:
    from patchkit.edits.specs import SetValue


def run(spec: SetValue, source: str) -> EditResult:
    return run_assignment_editor(source, _Setter(spec))


class _Setter(AssignmentEditor):
    def __init__(self, spec: SetValue) -> None:
        super().__init__(spec.names, spec.within)
        self.spec = spec

    def edit_value(self, value: cst.BaseExpression) -> cst.BaseExpression:
        wanted = wanted_node(self.spec, quote_style([value]))
        if same_expression(value, wanted):
            return value
        old = cst.Module(body=[]).code_for_node(value)
        self.note(f"set {'/'.join(self.names)} = {self.spec.describe()} (was {old})")
        return wanted.with_changes(lpar=value.lpar, rpar=value.rpar)
