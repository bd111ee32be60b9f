"""The machinery of the edit fuzz tier (tests/real/test_edit_fuzz.py): real vLLM files, the
places each target kind can match there (found with `ast`, independently of the engines),
the checks every random edit must pass, and the registry of per-op generators.

An op's generator sits beside its golden cases, tests/unit/edit_cases/OP/fuzz.py, and
defines `draw(info, rng) -> Case | None` (a random edit of the op in that file, None when
the file offers no target for it), or `ELSEWHERE = "where it is fuzzed instead"`.

The checks, for every op:
- the result compiles;
- a second apply says `already` and changes nothing;
- nothing outside the edited expression changed: the text before its first character and
  after its last is byte-identical (comments, quotes, blank lines, everything);
- the edited expression means what was asked, read back with `ast` by the case's own
  `holds` (the generator's: the value is an element, the key maps to the value, the call
  passes the keyword ...), or the case's own `check` (replace_function: the body);
- the target matched exactly one place: `within` names its scope, `occurrence` its rank
  among same-named places there, as the ambiguity rule asks.
"""

from __future__ import annotations

import ast
import importlib.util
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from fixtures.vllm_envs import release_tree
from patchkit.edits import EDIT_KINDS, Edit, EditResult
from patchkit.edits import tree
from patchkit.edits.base import literal_key

CASES = Path(__file__).resolve().parent / "unit" / "edit_cases"

RELEASES = ["0.16.0", "0.32.0"]
FILES_PER_RELEASE = 150
MAX_FILE_BYTES = 80_000  # the few larger files cost seconds per edit; they add no new shapes
FRESH = "pk_fuzz"

# Refusals the engine documents (the edit cannot be made as asked, and says why).
REFUSALS = (
    "only element of an unparenthesized tuple",
    "only element of a set literal",
    "are one element of a set in Python",
    "are one key in Python",
    "has no fixed positions",
    "is an augmented assignment",  # set_value on `x += v`: v is not x's value
    "setting the value would set",  # set_value on one name of `x = y = v`
)


# ------------------------------------------------------------------ finding targets


@dataclass
class Place:
    kind: str  # assignment | call | return | default | function
    key: str  # what names it: target dump, callee dump, "return", function qualname + param
    scope: str
    node: ast.AST  # the expression whose span the edit may change
    start: tuple[int, int, int, int]  # for source order (outer before inner)
    text: str = ""  # the target / callee as written
    arg: str = ""
    holder: ast.AST | None = None


@dataclass
class FileInfo:
    path: Path
    source: str
    places: list[Place] = field(default_factory=list)

    def unique_in_file(self, place: Place) -> bool:
        """Nothing else in the file has this target: `within` may be left out."""
        def name(p: Place) -> str:
            return p.arg if p.kind == "default" else p.key
        return sum(1 for p in self.places if p.kind == place.kind and name(p) == name(place)) == 1

    def rank(self, place: Place) -> tuple[int, int]:
        """(1-based rank, count) of `place` among the places of its kind, key and scope."""
        same = [p for p in self.places if (p.kind, p.key, p.scope) == (place.kind, place.key, place.scope)]
        same.sort(key=lambda p: p.start)
        return same.index(place) + 1, len(same)


def _order(node: ast.AST) -> tuple[int, int, int, int]:
    return (node.lineno, node.col_offset, -node.end_lineno, -node.end_col_offset)  # type: ignore[attr-defined]


class _Finder(ast.NodeVisitor):
    """Every place each target kind can match, with the scope the engine must give it:
    a def's or class's decorators, bases, defaults and annotations are in the enclosing
    scope; its body is in its own."""

    def __init__(self, info: FileInfo) -> None:
        self.info = info
        self.scope: list[str] = []

    @property
    def where(self) -> str:
        return ".".join(self.scope) or "<module>"

    def _scoped(self, node: ast.AST, name: str, outside: list[ast.AST], body: list[ast.stmt]) -> None:
        for child in outside:
            self.visit(child)
        self.scope.append(name)
        for stmt in body:
            self.visit(stmt)
        self.scope.pop()

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._scoped(node, node.name, [*node.decorator_list, *node.bases, *node.keywords], node.body)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        qualname = ".".join([*self.scope, node.name])
        a = node.args
        params = [*a.posonlyargs, *a.args]
        defaults = dict(zip([p.arg for p in params][len(params) - len(a.defaults):], a.defaults))
        defaults.update({p.arg: d for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None})
        self.info.places.append(Place("function", qualname, self.where, node, _order(node), text=qualname))
        for name, default in defaults.items():
            self.info.places.append(Place("default", f"{qualname}:{name}", qualname, default, _order(default),
                                          arg=name))
        outside: list[ast.AST] = [*node.decorator_list, *a.defaults, *[d for d in a.kw_defaults if d]]
        outside += [x.annotation for x in [*params, *a.kwonlyargs, a.vararg, a.kwarg] if x and x.annotation]
        if node.returns:
            outside.append(node.returns)
        self._scoped(node, node.name, outside, node.body)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def _assignment(self, holder: ast.AST, targets: list[ast.expr], value: ast.expr) -> None:
        for target in targets:
            if isinstance(target, (ast.Name, ast.Attribute, ast.Subscript)):
                self.info.places.append(Place("assignment", ast.dump(target), self.where, value, _order(holder),
                                              text=ast.unparse(target), holder=holder))

    def visit_Assign(self, node: ast.Assign) -> None:
        self._assignment(node, node.targets, node.value)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self._assignment(node, [node.target], node.value)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.op, (ast.Add, ast.BitOr)):
            self._assignment(node, [node.target], node.value)
        self.generic_visit(node)

    def visit_Return(self, node: ast.Return) -> None:
        if node.value is not None:
            self.info.places.append(Place("return", "return", self.where, node.value, _order(node)))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        self.info.places.append(Place("call", ast.dump(node.func), self.where, node, _order(node),
                                      text=ast.unparse(node.func)))
        self.generic_visit(node)


@lru_cache(maxsize=None)
def sample_files(version: str, count: int = FILES_PER_RELEASE) -> tuple[FileInfo, ...]:
    root = release_tree(version)
    paths = sorted(p for p in (root / "vllm").rglob("*.py") if 200 < p.stat().st_size < MAX_FILE_BYTES)
    chosen = random.Random(f"patchkit-fuzz-{version}").sample(paths, min(count, len(paths)))
    return tuple(load(p) for p in sorted(chosen))


def load(path: Path) -> FileInfo:
    info = FileInfo(path, path.read_text(encoding="utf-8"))
    _Finder(info).visit(ast.parse(info.source))
    # A chained assignment (`a = b = v`) is one place per target name; keep one per holder+key.
    seen: set[tuple[int, str]] = set()
    unique = []
    for p in info.places:
        ident = (id(p.holder) if p.holder is not None else id(p.node), p.key)
        if ident not in seen:
            seen.add(ident)
            unique.append(p)
    info.places = unique
    return info


# --------------------------------------------------------------------- the checks

DISPLAYS = (ast.List, ast.Tuple, ast.Set)


def displays(node: ast.AST, kinds: tuple[type, ...]) -> list[ast.AST]:
    if isinstance(node, ast.Lambda):
        node = node.body
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.BitOr)):
        return displays(node.left, kinds) + displays(node.right, kinds)
    return [node] if isinstance(node, kinds) else []


def literal_elements(node: ast.AST) -> list[tuple[bool, Any]]:
    out = []
    for e in getattr(node, "elts", []):
        try:
            out.append((True, ast.literal_eval(e)))
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            out.append((False, None))
    return out


def literal_keys(node: ast.AST) -> set[Any]:
    return {literal_key(v) for part in displays(node, DISPLAYS) for ok, v in literal_elements(part) if ok}


def dict_value(node: ast.AST, key: Any) -> ast.AST | None:
    found = None
    for part in displays(node, (ast.Dict,)):
        for k, v in zip(part.keys, part.values):  # type: ignore[attr-defined]
            try:
                if k is not None and literal_key(ast.literal_eval(k)) == literal_key(key):
                    found = v
            except (ValueError, TypeError, SyntaxError):
                pass
    return found


def literal_or_none(node: ast.AST | None) -> tuple[bool, Any]:
    try:
        return True, ast.literal_eval(node)  # type: ignore[arg-type]
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def offsets(source: str) -> list[int]:
    starts, total = [0], 0
    for line in source.splitlines(keepends=True):
        total += len(line)
        starts.append(total)
    return starts


def span(source: str, node: ast.AST) -> tuple[int, int]:
    """Character offsets of `node` (ast columns count UTF-8 bytes)."""
    lines, starts = source.splitlines(keepends=True), offsets(source)

    def at(line: int, col: int) -> int:
        return starts[line - 1] + len(lines[line - 1].encode("utf-8")[:col].decode("utf-8"))

    return at(node.lineno, node.col_offset), at(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]


@dataclass
class Case:
    info: FileInfo
    place: Place
    spec: dict[str, Any]
    holds: Meaning | None  # what the edited expression (at the spec's path) must mean, read back with ast
    want: Any = None  # what was asked (a value, a key and its value, a body): for messages and `check`
    origin: Place | None = None  # the place as found, when `place` is only its span
    check: Check | None = None  # what else the op promises of a change (None: check_expression)

    @property
    def shape(self) -> str:
        params = self.spec[next(iter(self.spec))]
        kind = params.get("target", "call" if "keyword" in params else
                          "function" if "function" in params else "assignment")
        return (kind + (" +path" if params.get("path") else "") + (" +occurrence" if "occurrence" in params else "")
                + ("" if "within" in params or kind == "function" else " -within"))


def run_case(case: Case) -> EditResult | str:
    """Apply, check every promise; returns the result, or the refusal it documents."""
    source = case.info.source
    edit = Edit.model_validate(case.spec)
    first = edit.apply(source)
    label = f"{case.info.path.name}: {case.spec}"
    check_moved_spans(first, label)
    plain = plain_route(edit, source)
    assert (plain.verdict, plain.source, plain.message) == (first.verdict, first.source, first.message), \
        f"{label}\nthe fast route (pruned pass, spliced text) differs from the plain one:\n{first}\n{plain}"
    if first.verdict == "not_found":
        refusal = next((r for r in REFUSALS if r in first.message), None)
        assert refusal, f"{label}\n-> not_found: {first.message}"
        return refusal
    assert first.verdict == "changed", f"{label}\n-> {first.verdict}: {first.message}"
    compile(first.source, str(case.info.path), "exec", dont_inherit=True)
    second = edit.apply(first.source)
    assert (second.verdict, second.source == first.source) == ("already", True), \
        f"{label}\nnot idempotent: {second.verdict}: {second.message}"
    return (case.check or check_expression)(case, first)


def check_expression(case: Case, first: EditResult) -> EditResult:
    """Nothing outside the edited expression changed, the expression (at the spec's path) means
    what the case asks, and without `occurrence` the same edit is refused as ambiguous."""
    source = case.info.source
    label = f"{case.info.path.name}: {case.spec}"
    start, end = span(source, case.place.node)
    new = first.source
    assert new.startswith(source[:start]) and new.endswith(source[end:]), \
        f"{label}\nchanged outside the target: {first.message}"
    region = new[start:len(new) - (len(source) - end)]
    node = ast.parse("(\n" + region + "\n)", mode="eval").body
    params = case.spec[next(iter(case.spec))]
    steps = ([params["arg"]] if params.get("target") == "call_arg" else []) + params.get("path", [])
    for step in steps:
        node = step_into(node, step)
    assert case.holds is not None and case.holds(node), f"{label}\nthe edit does not mean what was asked:\n{region}"
    if "occurrence" in params:  # without it, the same target is ambiguous, and nothing changes
        unpicked = {k: v for k, v in params.items() if k != "occurrence"}
        vague = Edit.model_validate({next(iter(case.spec)): unpicked}).apply(source)
        _, count = case.info.rank(case.origin or case.place)
        assert (vague.verdict, vague.source) == ("not_found", source), f"{label}\nnot refused without occurrence"
        assert f"is ambiguous: it matches {count} places" in vague.message, f"{label}\n{vague.message}"
    return first


def check_moved_spans(result: EditResult, label: str) -> None:
    """A spliced result's statement spans are moved from the original's, not read by `ast`
    again: each must be where `ast` puts that statement in the new text."""
    moved = tree._CACHE.get(result.source)
    if result.verdict != "changed" or moved is None or not isinstance(moved._spans, dict):
        return
    truth = tree._spans_of(moved.text, moved.module)
    assert truth is not None, label
    wrong = {k: (v, truth[k]) for k, v in moved._spans.items() if k in truth and truth[k] != v}
    assert not wrong, f"{label}\nmoved spans differ from ast's (moved, ast): {list(wrong.values())[:5]}"


def plain_route(edit: Edit, source: str) -> EditResult:
    """The edit as the plain route computes it: a pass over every node, the module printed."""
    tree.FAST = False
    tree._CACHE.clear()
    try:
        return edit.apply(source)
    finally:
        tree.FAST = True
        tree._CACHE.clear()


def step_into(node: ast.AST, step: Any) -> ast.AST:
    if isinstance(node, ast.Lambda):
        node = node.body
    if isinstance(node, ast.Call):
        if isinstance(step, str):
            return next(k.value for k in node.keywords if k.arg == step)
        return [a for a in node.args][step]
    if isinstance(node, (ast.List, ast.Tuple)):
        return node.elts[step]
    value = dict_value(node, step)
    assert value is not None, f"no key {step!r}"
    return value


# ------------------------------------------------------------------- drawing cases


def choose(spec: dict[str, Any], info: FileInfo, place: Place) -> dict[str, Any]:
    """`within` the place's exact scope, `occurrence` when its name repeats there."""
    rank, count = info.rank(place)
    if info.unique_in_file(place) and place.start[0] % 2:
        return spec  # the whole file: it is the only place
    spec["within"] = place.scope
    if count > 1:
        spec["occurrence"] = rank
    return spec


def where(info: FileInfo, place: Place, path: list[Any] | None = None) -> dict[str, Any]:
    if place.kind == "assignment":
        spec: dict[str, Any] = {"names": [place.text]}
    elif place.kind == "return":
        spec = {"target": "return"}
    elif place.kind == "default":
        spec = {"target": "default", "arg": place.arg}
    else:
        raise AssertionError(place.kind)
    if path:
        spec["path"] = path
    return choose(spec, info, place)


def reachable(place: Place) -> list[tuple[list[Any], ast.AST]]:
    """(path, node) pairs inside the place's value: itself, dict values, list items, keywords."""
    out: list[tuple[list[Any], ast.AST]] = [([], place.node)]
    node = place.node.body if isinstance(place.node, ast.Lambda) else place.node
    if isinstance(node, ast.Dict):
        keys = {}
        for k, v in zip(node.keys, node.values):
            ok, key = literal_or_none(k)
            if ok and isinstance(key, (str, int, float, bool, type(None))):
                keys[literal_key(key)] = (key, v)  # the last of duplicates
        out += [([key], v) for key, v in keys.values()]
    elif isinstance(node, (ast.List, ast.Tuple)) and not any(isinstance(e, ast.Starred) for e in node.elts):
        out += [([i], e) for i, e in enumerate(node.elts)]
    elif isinstance(node, ast.Call):
        out += [([k.arg], k.value) for k in node.keywords if k.arg]
    return out


def draw_value(info: FileInfo, rng: random.Random, kinds: tuple[type, ...] | None, make: MakeCase) -> Case | None:
    """An edit of a value an assignment, return, default or call argument holds (or a part of
    it, by `path`): one holding a display of `kinds` (None: any value), made by `make`."""
    value_places = [p for p in info.places if p.kind in ("assignment", "return", "default")]
    options = [(p, path, n) for p in value_places for path, n in reachable(p)
               if kinds is None or displays(n, kinds)]
    options += call_arg_options(info, kinds)
    if not options:
        return None
    place, path, node = rng.choice(options)
    spec = where(info, place, path) if place.kind != "call" else call_arg_spec(info, place, path)
    origin = place
    if place.kind == "call":  # the path's first step was the argument itself
        place = Place("call_arg", place.key, place.scope, place.node, place.start)
    case = make(info, place, spec, node, rng)
    if case is not None:
        case.origin = origin
    return case


def present_elements(node: ast.AST) -> list[Any]:
    """The literal elements of the displays in `node` (of a `+`/`|` chain too)."""
    return [v for part in displays(node, DISPLAYS) for ok, v in literal_elements(part)
            if ok and isinstance(v, (str, int, float, bool, type(None)))]


def insert_case(info: FileInfo, place: Place, spec: dict[str, Any], node: ast.AST, rng: random.Random) -> Case:
    """list_insert of a value the display lacks, after one it has half the time."""
    present = present_elements(node)
    value = rng.choice([FRESH, 12345, 1.5])
    if literal_key(value) in {literal_key(v) for v in present}:
        value = FRESH
    params = {**spec, "values": [value]}
    if present and rng.random() < 0.5:
        params["after"] = rng.choice(present)
    return Case(info, place, {"list_insert": params}, lambda node: literal_key(value) in literal_keys(node), value)


def call_arg_options(info: FileInfo, kinds: tuple[type, ...] | None) -> list[tuple[Place, list[Any], ast.AST]]:
    out = []
    for p in info.places:
        if p.kind != "call":
            continue
        call = p.node
        assert isinstance(call, ast.Call)
        positional = []
        for a in call.args:
            if isinstance(a, ast.Starred):
                break
            positional.append(a)
        args: list[tuple[Any, ast.AST]] = [(i, a) for i, a in enumerate(positional)]
        args += [(k.arg, k.value) for k in call.keywords if k.arg]
        out += [(p, [arg], n) for arg, n in args if kinds is None or displays(n, kinds)]
    return out


def call_arg_spec(info: FileInfo, place: Place, path: list[Any]) -> dict[str, Any]:
    return choose({"target": "call_arg", "callee": place.text, "arg": path[0]}, info, place)


# ------------------------------------------------------------------- the generators

Generator = Callable[[FileInfo, random.Random], "Case | None"]
Meaning = Callable[[ast.AST], bool]
Check = Callable[["Case", EditResult], EditResult]
MakeCase = Callable[[FileInfo, Place, dict[str, Any], ast.AST, random.Random], "Case | None"]


@lru_cache(maxsize=None)
def op_module(op: str) -> Any:
    """tests/unit/edit_cases/OP/fuzz.py, loaded (None when the op has none)."""
    path = CASES / op / "fuzz.py"
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location(f"edit_fuzz_{op}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def generators() -> dict[str, Generator]:
    """The ops of the registry (patchkit.edits.OPS) with a generator, in its order."""
    return {op: op_module(op).draw for op in EDIT_KINDS if op_module(op) is not None and hasattr(op_module(op), "draw")}


def fuzzed_elsewhere() -> dict[str, str]:
    """The ops fuzzed elsewhere, and where."""
    return {op: op_module(op).ELSEWHERE for op in EDIT_KINDS
            if op_module(op) is not None and hasattr(op_module(op), "ELSEWHERE")}


def draw_case(op: str, info: FileInfo, rng: random.Random) -> Case | None:
    """A random edit of kind `op` in this file, or None when the file offers no target for it."""
    generator = generators().get(op)
    if generator is None:
        raise AssertionError(missing_generator(op))
    return generator(info, rng)


def missing_generator(op: str) -> str:
    return (f"edit op {op} has no fuzz generator: add {CASES.relative_to(CASES.parents[2])}/{op}/fuzz.py with "
            "draw(info, rng) (or ELSEWHERE naming where it is fuzzed)")
