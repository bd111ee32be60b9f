"""list_remove: make sure values are not elements of a list/tuple/set display (every display
of a `+`/`|` chain), compared by type and value."""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from patchkit.edits.base import EditResult, Layout, literal_key
from patchkit.edits.model import Scalar
from patchkit.edits.paths import (
    COLLECTIONS,
    WHAT,
    Edited,
    check_set_collisions,
    displays,
    element_values,
    replace_parts,
    through,
    unique,
)
from patchkit.edits.places import run_value_edit
from patchkit.edits.sequence import Seq, remove_item
from patchkit.edits.targets import Where


def run(where: Where, source: str, values: Sequence[Scalar]) -> EditResult:
    return run_value_edit(where, Remover(values), source)


class Remover:
    def __init__(self, values: Sequence[Scalar]) -> None:
        self.values = values

    def edit(self, value: cst.BaseExpression, layout: Layout) -> Edited:
        return through(value, self._edit)

    def _edit(self, value: cst.BaseExpression) -> Edited:
        parts = displays(value, COLLECTIONS, WHAT)
        unwanted = unique(self.values)
        check_set_collisions(parts, unwanted)
        keys = {literal_key(v) for v in unwanted}
        removed: list[object] = []
        new: dict[int, cst.BaseExpression] = {}
        for part in parts:
            values = element_values(part)
            doomed = [i for i, (ok, v) in enumerate(values) if ok and literal_key(v) in keys]
            if not doomed:
                continue
            node: Seq = part
            for i in reversed(doomed):
                node = remove_item(node, i)
            removed.extend(values[i][1] for i in doomed)
            new[id(part)] = node
        if not removed:
            return None
        return replace_parts(value, new), "removed " + ", ".join(repr(v) for v in removed)
