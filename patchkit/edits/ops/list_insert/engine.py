"""list_insert: make sure values are elements of a list/tuple/set display.

The display is the target's value (or the part at `path`), looked through a `lambda:` and
through `+`/`|` chains: presence counts in every display of `BASE + ["a"] + ["b"]`, new
values go into the last one (or after `after`, wherever that is). Elements compare by type
and value: `1`, `1.0` and `True` are three elements.
"""

from __future__ import annotations

from typing import Sequence

import libcst as cst

from patchkit.edits.base import EditResult, Layout, literal_key, literal_node, quote_style
from patchkit.edits.model import Scalar
from patchkit.edits.paths import (
    COLLECTIONS,
    WHAT,
    Edited,
    check_set_collisions,
    displays,
    element_values,
    replace_part,
    through,
    unique,
)
from patchkit.edits.places import run_value_edit
from patchkit.edits.sequence import Seq, insert_item
from patchkit.edits.targets import Where


def run(where: Where, source: str, values: Sequence[Scalar], after: Scalar) -> EditResult:
    return run_value_edit(where, Inserter(values, after), source)


class Inserter:
    def __init__(self, values: Sequence[Scalar], after: Scalar) -> None:
        self.values, self.after = values, after

    def edit(self, value: cst.BaseExpression, layout: Layout) -> Edited:
        return through(value, lambda node: self._edit(node, layout))

    def _edit(self, value: cst.BaseExpression, layout: Layout) -> Edited:
        parts = displays(value, COLLECTIONS, WHAT)
        wanted = unique(self.values)
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
        if self.after is None:
            return last, len(last.elements), "at the end"
        anchor = literal_key(self.after)
        for part in parts:
            for i, (ok, v) in enumerate(element_values(part)):
                if ok and literal_key(v) == anchor:
                    return part, i + 1, f"after {self.after!r}"
        return last, len(last.elements), f"at the end ({self.after!r} is not in the list)"
