"""dict_set's fuzz generator (tests/edit_fuzz.py): a dict display maps a key it has (or a new one)
to another value."""

from __future__ import annotations

import ast
import random
from typing import Any

from patchkit.edits.base import literal_key
from tests.edit_fuzz import FRESH, Case, FileInfo, Place, dict_value, displays, draw_value, literal_or_none


def make(info: FileInfo, place: Place, spec: dict[str, Any], node: ast.AST, rng: random.Random) -> Case:
    part = displays(node, (ast.Dict,))[-1]
    keys = [k for k in part.keys if k is not None and literal_or_none(k)[0]]  # type: ignore[attr-defined]
    key: Any = FRESH
    if keys and rng.random() < 0.5:
        key = literal_or_none(rng.choice(keys))[1]
        if not isinstance(key, (str, int, float, bool, type(None))):
            key = FRESH
    value: Any = rng.choice([FRESH, 3, None])
    current = dict_value(node, key)
    if current is not None and literal_or_none(current) == (True, value):
        value = "different"
    def holds(node: ast.AST) -> bool:
        ok, got = literal_or_none(dict_value(node, key))
        return ok and literal_key(got) == literal_key(value)

    return Case(info, place, {"dict_set": {**spec, "key": key, "value": value}}, holds, (key, value))


def draw(info: FileInfo, rng: random.Random) -> Case | None:
    return draw_value(info, rng, (ast.Dict,), make)
