"""list_remove: make sure values are not elements of a list/tuple/set assigned to a name."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from patchkit.edits.base import AssignmentEditor, EditResult, run_assignment_editor
from patchkit.edits.list_insert import collection_of, element_values
from patchkit.edits.sequence import remove_item

if TYPE_CHECKING:
    from patchkit.edits.specs import ListRemove


def run(spec: ListRemove, source: str) -> EditResult:
    return run_assignment_editor(source, _Remover(spec))


class _Remover(AssignmentEditor):
    def __init__(self, spec: ListRemove) -> None:
        super().__init__(spec.names, spec.within)
        self.spec = spec

    def edit_value(self, value: cst.BaseExpression) -> cst.BaseExpression:
        node = collection_of(value)
        doomed = [i for i, (ok, v) in enumerate(element_values(node)) if ok and v in self.spec.values]
        if not doomed:
            return value
        removed = [element_values(node)[i][1] for i in doomed]
        for i in reversed(doomed):
            node = remove_item(node, i)
        self.note("removed " + ", ".join(repr(v) for v in removed))
        return node
