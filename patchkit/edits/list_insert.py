"""list_insert: make sure values are elements of a list/tuple/set display.

The display is the target's value (or the part at `path`), looked through a `lambda:` and
through `+`/`|` chains: presence counts in every display of `BASE + ["a"] + ["b"]`, new
values go into the last one (or after `after`, wherever that is). Elements compare by type
and value: `1`, `1.0` and `True` are three elements.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import libcst as cst

from patchkit.edits.base import (
    EditError,
    EditResult,
    Layout,
    literal_key,
    literal_node,
    literal_of,
    python_equal,
    quote_style,
)
from patchkit.edits.paths import Edited, displays, replace_part, through
from patchkit.edits.places import run_value_edit
from patchkit.edits.sequence import Seq, insert_item

if TYPE_CHECKING:
    from patchkit.edits.specs import ListInsert

COLLECTIONS: tuple[type[cst.List | cst.Tuple | cst.Set], ...] = (cst.List, cst.Tuple, cst.Set)
WHAT = "a list, tuple or set literal"


def element_values(node: Seq) -> list[tuple[bool, object]]:
    return [literal_of(e.value) if isinstance(e, cst.Element) else (False, None) for e in node.elements]


def unique(values: Sequence[object]) -> list[object]:
    """`values` without repeats, by type and value (dict.fromkeys would merge 1 and True)."""
    seen: set[object] = set()
    out = []
    for v in values:
        key = literal_key(v)
        if key not in seen:
            seen.add(key)
            out.append(v)
    return out


def check_set_collisions(parts: Sequence[cst.BaseExpression], values: Sequence[object]) -> None:
    """In a set, `1` and `True` are one element: refuse rather than write a no-op or lose one."""
    for part in parts:
        if not isinstance(part, cst.Set):
            continue
        for ok, element in element_values(part):
            for v in values:
                if ok and literal_key(element) != literal_key(v) and python_equal(element, v):
                    raise EditError(f"{v!r} and the set's element {element!r} are one element of a set in Python")


def run(spec: ListInsert, source: str) -> EditResult:
    return run_value_edit(spec, Inserter(spec), source)


class Inserter:
    def __init__(self, spec: ListInsert) -> None:
        self.spec = spec

    def edit(self, value: cst.BaseExpression, layout: Layout) -> Edited:
        return through(value, lambda node: self._edit(node, layout))

    def _edit(self, value: cst.BaseExpression, layout: Layout) -> Edited:
        parts = displays(value, COLLECTIONS, WHAT)
        wanted = unique(self.spec.values)
        check_set_collisions(parts, wanted)
        present = {literal_key(v) for part in parts for ok, v in element_values(part) if ok}
        missing = [v for v in wanted if literal_key(v) not in present]
        if not missing:
            return None
        part, index, where = self._position(parts)
        node = part
        quote = layout.quote(quote_style([e.value for p in parts for e in p.elements if isinstance(e, cst.Element)]))
        for offset, v in enumerate(missing):
            node = insert_item(node, cst.Element(literal_node(v, quote, layout.avoid)), index + offset, layout.unit)
        added = ", ".join(repr(v) for v in missing)
        return replace_part(value, part, node), f"added {added} {where}"

    def _position(self, parts: Sequence[Seq]) -> tuple[Seq, int, str]:
        last = parts[-1]
        if self.spec.after is None:
            return last, len(last.elements), "at the end"
        anchor = literal_key(self.spec.after)
        for part in parts:
            for i, (ok, v) in enumerate(element_values(part)):
                if ok and literal_key(v) == anchor:
                    return part, i + 1, f"after {self.spec.after!r}"
        return last, len(last.elements), f"at the end ({self.spec.after!r} is not in the list)"
