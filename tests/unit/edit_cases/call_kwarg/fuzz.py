"""call_kwarg's fuzz generator (tests/edit_fuzz.py): a call passes a keyword it has (or a new one)
with another value."""

from __future__ import annotations

import ast
import random

from patchkit.edits.base import literal_key
from tests.edit_fuzz import FRESH, Case, FileInfo, choose, literal_or_none


def draw(info: FileInfo, rng: random.Random) -> Case | None:
    calls = [p for p in info.places if p.kind == "call"]
    if not calls:
        return None
    place = rng.choice(calls)
    call = place.node
    assert isinstance(call, ast.Call)
    existing = [k.arg for k in call.keywords if k.arg]
    keyword = rng.choice(existing) if existing and rng.random() < 0.4 else FRESH
    value = rng.choice([1, True, None, "x y", 2.5])
    current = next((k.value for k in call.keywords if k.arg == keyword), None)
    if current is not None and literal_or_none(current) == (True, value):
        value = "different"
    spec = choose({"callee": place.text, "keyword": keyword, "value": value}, info, place)
    def holds(node: ast.AST) -> bool:
        assert isinstance(node, ast.Call)
        got = next((k.value for k in node.keywords if k.arg == keyword), None)
        ok, literal = literal_or_none(got)
        return ok and literal_key(literal) == literal_key(value)

    return Case(info, place, {"call_kwarg": spec}, holds, (keyword, value))
