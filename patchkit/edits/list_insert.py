"""list_insert: make sure values are elements of a list/tuple/set assigned to a name."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from patchkit.edits.base import (
    AssignmentEditor,
    EditError,
    EditResult,
    literal_node,
    literal_of,
    quote_style,
    run_assignment_editor,
)
from patchkit.edits.sequence import Seq, insert_item

if TYPE_CHECKING:
    from patchkit.edits.specs import ListInsert

COLLECTIONS = (cst.List, cst.Tuple, cst.Set)


def collection_of(value: cst.BaseExpression) -> cst.List | cst.Tuple | cst.Set:
    if not isinstance(value, COLLECTIONS):
        raise EditError(f"the value is not a list, tuple or set literal (libcst node: {type(value).__name__})")
    return value


def element_values(node: Seq) -> list[tuple[bool, object]]:
    return [literal_of(e.value) for e in node.elements]  # type: ignore[union-attr]


def run(spec: ListInsert, source: str) -> EditResult:
    return run_assignment_editor(source, _Inserter(spec))


class _Inserter(AssignmentEditor):
    def __init__(self, spec: ListInsert) -> None:
        super().__init__(spec.names, spec.within)
        self.spec = spec

    def edit_value(self, value: cst.BaseExpression) -> cst.BaseExpression:
        node = collection_of(value)
        present = [v for ok, v in element_values(node) if ok]
        missing = [v for v in dict.fromkeys(self.spec.values) if v not in present]
        if not missing:
            return value
        quote = quote_style([e.value for e in node.elements])
        index, where = self._position(node)
        for offset, v in enumerate(missing):
            node = insert_item(node, cst.Element(literal_node(v, quote)), index + offset)
        added = ", ".join(repr(v) for v in missing)
        self.note(f"added {added} {where}")
        return node

    def _position(self, node: Seq) -> tuple[int, str]:
        if self.spec.after is None:
            return len(node.elements), "at the end"
        for i, (ok, v) in enumerate(element_values(node)):
            if ok and v == self.spec.after:
                return i + 1, f"after {self.spec.after!r}"
        return len(node.elements), f"at the end ({self.spec.after!r} is not in the list)"
