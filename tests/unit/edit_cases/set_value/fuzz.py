"""set_value's fuzz generator (tests/edit_fuzz.py): any value (or part of one) made another literal."""

from __future__ import annotations

import ast
import random
from typing import Any

from patchkit.edits.base import literal_key
from tests.edit_fuzz import FRESH, Case, FileInfo, Place, draw_value, literal_or_none


def make(info: FileInfo, place: Place, spec: dict[str, Any], node: ast.AST, rng: random.Random) -> Case:
    value = rng.choice([FRESH, 7, [1, "a"], {"k": None}, False])
    if literal_or_none(node) == (True, value):
        value = "different"
    def holds(node: ast.AST) -> bool:
        ok, got = literal_or_none(node)
        return ok and literal_key(got) == literal_key(value)

    return Case(info, place, {"set_value": {**spec, "value": value}}, holds, value)


def draw(info: FileInfo, rng: random.Random) -> Case | None:
    return draw_value(info, rng, None, make)
