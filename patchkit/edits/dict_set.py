"""dict_set: make a key of a dict literal (assigned to a name) map to a value."""

from __future__ import annotations

import libcst as cst
from pydantic import Field

from patchkit.edits.base import (
    AssignmentEditor,
    EditError,
    EditResult,
    EditSpec,
    Scalar,
    literal_node,
    literal_of,
    quote_style,
    run_assignment_editor,
    same_expression,
)
from patchkit.edits.sequence import insert_item
from patchkit.edits.values import WantsValue


class DictSet(EditSpec, WantsValue):
    """Ensure `names[key] == value` in the dict literal assigned to one of `names`."""

    names: list[str] = Field(min_length=1)
    key: Scalar
    within: str | None = None

    def apply(self, source: str) -> EditResult:
        return run_assignment_editor(source, _DictSetter(self))


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
                wanted = self.spec.wanted_node(quote_style([element.value, *strings]))
                if same_expression(element.value, wanted):
                    return value
                self.note(f"set key {self.spec.key!r} to {self.spec.describe()}")
                elements = list(value.elements)
                elements[i] = element.with_changes(value=wanted)
                return value.with_changes(elements=elements)
        self.note(f"added key {self.spec.key!r}: {self.spec.describe()}")
        quote = quote_style(strings)
        new = cst.DictElement(literal_node(self.spec.key, quote), self.spec.wanted_node(quote))
        return insert_item(value, new, len(value.elements))
