"""list_remove's fuzz generator (tests/edit_fuzz.py): an element a display has (a display with
no literal element gets a list_insert instead: the file is still exercised)."""

from __future__ import annotations

import ast
import random
from typing import Any

from patchkit.edits.base import literal_key
from tests.edit_fuzz import DISPLAYS, Case, FileInfo, Place, draw_value, insert_case, literal_keys, present_elements


def make(info: FileInfo, place: Place, spec: dict[str, Any], node: ast.AST, rng: random.Random) -> Case:
    present = present_elements(node)
    if not present:
        return insert_case(info, place, spec, node, rng)
    value = rng.choice(present)
    return Case(info, place, {"list_remove": {**spec, "values": [value]}},
                lambda node: literal_key(value) not in literal_keys(node), value)


def draw(info: FileInfo, rng: random.Random) -> Case | None:
    return draw_value(info, rng, DISPLAYS, make)
