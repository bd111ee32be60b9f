"""list_insert's fuzz generator (tests/edit_fuzz.py): a value a list, tuple or set display lacks."""

from __future__ import annotations

import random

from tests.edit_fuzz import DISPLAYS, Case, FileInfo, draw_value, insert_case


def draw(info: FileInfo, rng: random.Random) -> Case | None:
    return draw_value(info, rng, DISPLAYS, insert_case)
