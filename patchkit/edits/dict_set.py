"""dict_set: make a key of a dict literal (assigned to a name) map to a value."""

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
    same_expression,
)
from patchkit.edits.sequence import insert_item
from patchkit.edits.values import wanted_node

if TYPE_CHECKING:
    from patchkit.edits.specs import DictSet


def run(spec: DictSet, source: str) -> EditResult:
    return run_assignment_editor(source, _DictSetter(spec))


class _DictSetter(AssignmentEditor):
    def __init__(self, spec: DictSet) -> None:
        super().__init__(spec.names, spec.within)
        self.spec = spec

    def edit_value(self, value: cst.BaseExpression) -> cst.BaseExpression:
        if not isinstance(value, cst.Dict):
            raise EditError(f"the value is not a dict literal (libcst node: {type(value).__name__})")
        pairs = [e for e in value.elements if isinstance(e, cst.DictElement)]
        strings = [e.key for e in pairs] + [e.value for e in pairs]  # whose quotes to follow
        for i, element in enumerate(value.elements):
            if not isinstance(element, cst.DictElement):
                continue
            ok, key = literal_of(element.key)
            if ok and key == self.spec.key:
                wanted = wanted_node(self.spec, quote_style([element.value, *strings]))
                if same_expression(element.value, wanted):
                    return value
                self.note(f"set key {self.spec.key!r} to {self.spec.describe()}")
                elements = list(value.elements)
                elements[i] = element.with_changes(value=wanted)
                return value.with_changes(elements=elements)
        self.note(f"added key {self.spec.key!r}: {self.spec.describe()}")
        quote = quote_style(strings)
        new = cst.DictElement(literal_node(self.spec.key, quote), wanted_node(self.spec, quote))
        return insert_item(value, new, len(value.elements))
