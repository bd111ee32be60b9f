"""replace_function's fuzz generator (tests/edit_fuzz.py): a function gets one of BODIES."""

from __future__ import annotations

import ast
import random
from typing import Any

from tests.edit_fuzz import BODIES, Case, FileInfo


def draw(info: FileInfo, rng: random.Random) -> Case | None:
    functions = [p for p in info.places if p.kind == "function"]
    if not functions:
        return None
    place = rng.choice(functions)
    body = rng.choice(BODIES)
    fn = place.node
    assert isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
    own = fn.body[1:] if ast.get_docstring(fn, clean=False) is not None else fn.body
    if ast.dump(ast.Module(body=own, type_ignores=[])) == ast.dump(ast.parse(body)):
        body = BODIES[(BODIES.index(body) + 1) % len(BODIES)]  # already its body (`pass`): a change
    spec: dict[str, Any] = {"function": place.text, "body": body}
    rank, count = info.rank(place)
    if count > 1:
        spec["occurrence"] = rank
    return Case(info, place, {"replace_function": spec}, "body", body)
