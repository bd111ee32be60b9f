"""dict_set: make a dict display map a key to a value.

Keys compare by type and value; of duplicate keys the last is edited (Python keeps the
last), and the message says so. In a `|` chain (`BASE | {...}`) the last dict holding the
key is edited, and a new key goes into the last dict.
"""

from __future__ import annotations

import libcst as cst

from patchkit.edits.base import (
    EditResult,
    Layout,
    literal_key,
    literal_node,
    literal_of,
    parenthesized,
    quote_style,
    same_expression,
    snippet,
)
from patchkit.edits.model import Scalar
from patchkit.edits.paths import Edited, chain, dict_key_index, displays, replace_part, through
from patchkit.edits.places import run_value_edit
from patchkit.edits.sequence import insert_item
from patchkit.edits.targets import ValueAt
from patchkit.edits.values import type_trap, wanted_node


def run(spec: ValueAt, source: str, key: Scalar) -> EditResult:
    return run_value_edit(spec, DictSetter(spec, key), source)


class DictSetter:
    def __init__(self, spec: ValueAt, key: Scalar) -> None:
        self.spec, self.key = spec, key

    def edit(self, value: cst.BaseExpression, layout: Layout) -> Edited:
        return through(value, lambda node: self._edit(node, layout))

    def _edit(self, value: cst.BaseExpression, layout: Layout) -> Edited:
        parts: list[cst.Dict] = displays(value, (cst.Dict,), "a dict literal")
        pairs = [e for p in parts for e in p.elements if isinstance(e, cst.DictElement)]
        strings = [e.key for e in pairs] + [e.value for e in pairs]  # whose quotes to follow
        key = literal_key(self.key)
        holders = [(p, i) for p in parts if (i := dict_key_index(p, self.key)) is not None]
        if holders:
            part, index = holders[-1]
            element = part.elements[index]
            assert isinstance(element, cst.DictElement)
            wanted = wanted_node(self.spec, quote_style([element.value, *strings]), layout)
            if same_expression(element.value, wanted):
                return None
            warning = type_trap(self.spec, element.value, wanted, f"{self.spec.kind} key {self.key!r}")
            count = sum(1 for e in pairs if literal_of(e.key)[0] and literal_key(literal_of(e.key)[1]) == key)
            note = f"set key {self.key!r} to {self.spec.describe()}"
            if count > 1:
                note += f" (the last of its {count} entries: Python keeps the last)"
            note += warning + _override_warning(value, part, index)
            elements = list(part.elements)
            elements[index] = element.with_changes(value=parenthesized(wanted))
            return replace_part(value, part, part.with_changes(elements=elements)), note
        quote = layout.quote(quote_style(strings))
        new = cst.DictElement(literal_node(self.key, quote, layout.avoid),
                              parenthesized(wanted_node(self.spec, quote, layout)))
        part = parts[-1]
        node = insert_item(part, new, len(part.elements), layout.unit)
        note = f"added key {self.key!r}: {self.spec.describe()}"
        return replace_part(value, part, node), note + _override_warning(value, part, len(part.elements))


def _override_warning(value: cst.BaseExpression, part: cst.Dict, index: int) -> str:
    """What comes after the key's entry and may map the key at run time: `**o` later in its
    dict, or a later operand of the `|` chain that is not a display (`{'a': 1} | o`)."""
    later = [f"**{snippet(e.value, 30)}" for e in part.elements[index + 1:] if isinstance(e, cst.StarredDictElement)]
    operands = chain(value, (cst.Add, cst.BitOr))
    at = next(i for i, p in enumerate(operands) if p is part)
    for operand in operands[at + 1:]:
        if isinstance(operand, cst.Dict):
            later += [f"**{snippet(e.value, 30)}" for e in operand.elements if isinstance(e, cst.StarredDictElement)]
        else:
            later.append(f"| {snippet(operand, 30)}")
    if not later:
        return ""
    return f" (warning: {', '.join(f'`{w}`' for w in later)} after it may override it at run time)"
