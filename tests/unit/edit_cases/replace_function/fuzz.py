"""replace_function's fuzz generator (tests/edit_fuzz.py): a function gets one of BODIES; what
changed is checked against the function's body, not an expression."""

from __future__ import annotations

import ast
import io
import random
import tokenize
from typing import Any

from patchkit.edits import EditResult
from tests.edit_fuzz import Case, FileInfo, offsets

BODIES = [
    "return None",
    "pass",
    "# patched by the fuzz tier\nvalue = 1\nreturn value",
    'text = """\n  kept as written\n"""\nreturn text',
]


def body_span(source: str, fn: ast.FunctionDef) -> tuple[int, int]:
    """What replace_function may change: from after the def's colon (its comment stays) to
    the next line of code after the function (a body's trailing comments go with it)."""
    depth, colon = 0, None
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    for tok in tokens:
        if tok.start < (fn.lineno, fn.col_offset):
            continue
        if tok.type == tokenize.OP and tok.string in "([{":
            depth += 1
        elif tok.type == tokenize.OP and tok.string in ")]}":
            depth -= 1
        elif tok.type == tokenize.OP and tok.string == ":" and depth == 0:
            colon = tok.end
            break
    assert colon is not None
    starts, lines = offsets(source), source.splitlines(keepends=True)
    if fn.body[0].lineno == colon[0]:
        start = starts[colon[0] - 1] + colon[1]
    else:
        start = starts[colon[0]]
    line = fn.end_lineno  # type: ignore[assignment]
    while line < len(lines) and (not lines[line].strip() or lines[line].lstrip().startswith("#")):
        line += 1
    return start, starts[line]


def functions_named(tree: ast.AST, qualname: str) -> list[ast.FunctionDef]:
    found: list[ast.FunctionDef] = []

    def walk(node: ast.AST, scope: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = [*scope, child.name]
                if not isinstance(child, ast.ClassDef) and ".".join(inner) == qualname:
                    found.append(child)  # type: ignore[arg-type]
                walk(child, inner)
            else:
                walk(child, scope)

    walk(tree, [])
    return sorted(found, key=lambda f: (f.lineno, f.col_offset))


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
    return Case(info, place, {"replace_function": spec}, None, body, check=check_body)


def check_body(case: Case, first: EditResult) -> EditResult:
    """Only the body changed (from after the def's colon to the next code after it), and it is
    the wanted one (after the docstring it had)."""
    source, new, fn = case.info.source, first.source, case.place.node
    assert isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
    start, end = body_span(source, fn)  # type: ignore[arg-type]
    label = f"{case.info.path.name}: {case.spec}"
    assert new.startswith(source[:start]) and new.endswith(source[end:]), f"{label}\nchanged outside the body"
    rank, _ = case.info.rank(case.place)
    patched = functions_named(ast.parse(new), case.place.text)[rank - 1]
    wanted = ast.parse(case.want).body
    docstring = ast.get_docstring(fn, clean=False)
    if docstring is not None:
        wanted = [fn.body[0], *wanted]
    assert [ast.dump(s) for s in patched.body] == [ast.dump(s) for s in wanted], f"{label}\nnot the wanted body"
    return first
