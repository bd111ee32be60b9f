"""Inside a value: `path` steps (like subscripts) and the displays an op edits.

A path step is read the way Python would subscript the value:
- on a dict display, a key (the last of duplicate keys: the one Python keeps);
- on a list or tuple display, an index (negative counts from the end);
- on a call, a keyword name or the position of a positional argument;
- a `lambda:` on the way is looked through (`field(default_factory=lambda: [...])`).

The list and dict ops then edit the display they reach, looking through a `lambda:` and
through `+` (lists, tuples) or `|` (sets, dicts) chains: in `BASE + ["a"]` the display is
`["a"]`. Every function here rebuilds only what it walked through.
"""

from __future__ import annotations

from typing import Callable, Protocol, Sequence, TypeVar

import libcst as cst

from patchkit.edits.base import EditError, EditRefused, Layout, literal_key, literal_of, python_equal, snippet
from patchkit.edits.model import Scalar
from patchkit.edits.sequence import Seq

D = TypeVar("D", bound=cst.BaseExpression)  # a kind of display (list, dict...)

Edited = tuple[cst.BaseExpression, str] | None  # (new node, what was done), None: already in place


class ValueOp(Protocol):
    def edit(self, value: cst.BaseExpression, layout: Layout) -> Edited: ...


def kind_of(node: cst.CSTNode) -> str:
    names = {cst.List: "a list", cst.Tuple: "a tuple", cst.Set: "a set", cst.Dict: "a dict", cst.Call: "a call"}
    return names.get(type(node), f"`{snippet(node, 40)}`")


def edit_at(value: cst.BaseExpression, path: Sequence[Scalar], op: ValueOp, layout: Layout) -> Edited:
    """Apply `op` to the part of `value` that `path` leads to; rebuild the way back."""
    if not path:
        return op.edit(value, layout)
    if isinstance(value, cst.Lambda):
        return through(value, lambda body: edit_at(body, path, op, layout))
    step, rest = path[0], path[1:]
    child, put = _child(value, step)
    try:
        inner = edit_at(child, rest, op, layout)
    except EditRefused:
        raise  # says what it refuses whatever the path
    except EditError as exc:
        raise EditError(f"at {step!r}: {exc}") from None
    return None if inner is None else (put(inner[0]), inner[1] + _later_double_stars(value, step))


def _later_double_stars(node: cst.BaseExpression, key: Scalar) -> str:
    """A warning when a `**o` after the key's entry may map the key at run time."""
    if not isinstance(node, cst.Dict):
        return ""
    index = dict_key_index(node, key)
    later = [f"`**{snippet(e.value, 30)}`" for e in node.elements[(index or 0) + 1:]
             if isinstance(e, cst.StarredDictElement)]
    return f" (warning: {', '.join(later)} after {key!r} may override it at run time)" if later else ""


def through(value: cst.BaseExpression, edit: Callable[[cst.BaseExpression], Edited]) -> Edited:
    """`edit` applied to a lambda's body (`lambda: [...]`), or to the value itself."""
    if isinstance(value, cst.Lambda):
        inner = edit(value.body)
        return None if inner is None else (value.with_changes(body=inner[0]), inner[1])
    return edit(value)


def _replace(items: Sequence[cst.CSTNode], index: int, new: cst.CSTNode) -> list[cst.CSTNode]:
    items = list(items)
    items[index] = new
    return items


def _child(node: cst.BaseExpression, step: Scalar) -> tuple[cst.BaseExpression, Callable[[cst.BaseExpression], cst.BaseExpression]]:
    if isinstance(node, cst.Dict):
        index = dict_key_index(node, step)
        if index is None:
            keys = [snippet(e.key, 30) for e in node.elements if isinstance(e, cst.DictElement)]
            raise EditError(f"the dict has no key {step!r} (keys: {', '.join(keys) or 'none'})")
        element = node.elements[index]
        return element.value, lambda new: node.with_changes(
            elements=_replace(node.elements, index, element.with_changes(value=new)))
    if isinstance(node, (cst.List, cst.Tuple)):
        if isinstance(step, bool) or not isinstance(step, int):
            raise EditError(f"{kind_of(node)} is indexed by position (0, 1, -1, ...), not by {step!r}")
        elements = list(node.elements)
        if any(isinstance(e, cst.StarredElement) for e in elements):
            raise EditError(f"{kind_of(node)} with a *starred element has no fixed positions")
        if not -len(elements) <= step < len(elements):
            raise EditError(f"{kind_of(node)} has {len(elements)} elements, no index {step}")
        index = step % len(elements)
        item = elements[index]
        return item.value, lambda new: node.with_changes(
            elements=_replace(elements, index, item.with_changes(value=new)))
    if isinstance(node, cst.Call):
        index = call_arg_index(node, step)
        if index is None:
            raise EditError(f"the call passes no {_arg_words(step)}")
        arg = node.args[index]
        return arg.value, lambda new: node.with_changes(args=_replace(node.args, index, arg.with_changes(value=new)))
    if isinstance(node, cst.BinaryOperation):  # `BASE | {k: v}`: the last dict holding the key
        for part in reversed(chain(node, (cst.BitOr, cst.Add))):
            if isinstance(part, cst.Dict) and dict_key_index(part, step) is not None:
                child, put = _child(part, step)
                return child, lambda new: replace_part(node, part, put(new))
    raise EditError(f"cannot take {step!r} of {kind_of(node)}")


def _arg_words(arg: Scalar) -> str:
    return f"keyword {arg}" if isinstance(arg, str) else f"positional argument {arg}"


def call_arg_index(call: cst.Call, arg: Scalar) -> int | None:
    """Where `arg` (a keyword name, or a 0-based position) sits in the call's arguments."""
    if isinstance(arg, str):
        return next((i for i, a in enumerate(call.args) if a.keyword is not None and a.keyword.value == arg), None)
    if isinstance(arg, bool) or not isinstance(arg, int):
        return None
    position = 0
    for i, a in enumerate(call.args):
        if a.keyword is not None or a.star == "**":
            continue
        if a.star == "*":
            raise EditError(f"a *{snippet(a.value, 20)} argument comes before position {arg}: its position is unknown")
        if position == arg:
            return i
        position += 1
    return None


def dict_key_index(node: cst.Dict, key: Scalar) -> int | None:
    """The element Python keeps for `key` (the last of duplicates), compared by type and value.

    A key equal to `key` only as Python compares keys (`1`, `1.0`, `True`) is refused: the
    dict would hold one of them under the other's spelling."""
    wanted = literal_key(key)
    found = None
    for i, element in enumerate(node.elements):
        if not isinstance(element, cst.DictElement):
            continue
        ok, value = literal_of(element.key)
        if not ok:
            continue
        if literal_key(value) == wanted:
            found = i
        elif python_equal(value, key):
            raise EditError(f"key {key!r} and the dict's key {value!r} are one key in Python; "
                            f"write the key as the dict does ({value!r})")
    return found


def chain(node: cst.BaseExpression, operators: tuple[type, ...]) -> list[cst.BaseExpression]:
    """The operands of `a + b + c`, left to right, parentheses aside (`(a\n + [b])` is
    common, and concatenation does not care how it is grouped); [node] for anything else."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, operators):
        return [*chain(node.left, operators), *chain(node.right, operators)]
    return [node]


def displays(node: cst.BaseExpression, kinds: tuple[type[D], ...], what: str) -> list[D]:
    """The displays of `kinds` in `node` or in its `+`/`|` chain; an error naming what is there."""
    parts = [p for p in chain(node, (cst.Add, cst.BitOr)) if isinstance(p, kinds)]
    if not parts:
        raise EditError(f"the value is not {what} (libcst node: {type(node).__name__})")
    return parts


def replace_parts(node: cst.BaseExpression, new: dict[int, cst.BaseExpression]) -> cst.BaseExpression:
    """`node` (a display or a chain as `chain` reads it) with the parts keyed by id replaced."""
    if id(node) in new:
        return new[id(node)]
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Add, cst.BitOr)):
        return node.with_changes(left=replace_parts(node.left, new), right=replace_parts(node.right, new))
    return node


def replace_part(node: cst.BaseExpression, part: cst.BaseExpression, new: cst.BaseExpression) -> cst.BaseExpression:
    return replace_parts(node, {id(part): new})


# The elements of list, tuple and set displays (list_insert, list_remove), compared as literals.
COLLECTIONS: tuple[type[cst.List | cst.Tuple | cst.Set], ...] = (cst.List, cst.Tuple, cst.Set)
WHAT = "a list, tuple or set literal"


def element_values(node: Seq) -> list[tuple[bool, object]]:
    return [literal_of(e.value) if isinstance(e, cst.Element) else (False, None) for e in node.elements]


def unique(values: Sequence[object]) -> list[object]:
    """`values` without repeats, by type and value (dict.fromkeys would merge 1 and True)."""
    seen: set[object] = set()
    out = []
    for v in values:
        key = literal_key(v)
        if key not in seen:
            seen.add(key)
            out.append(v)
    return out


def check_set_collisions(parts: Sequence[cst.BaseExpression], values: Sequence[object]) -> None:
    """In a set, `1` and `True` are one element: refuse rather than write a no-op or lose one."""
    for part in parts:
        if not isinstance(part, cst.Set):
            continue
        for ok, element in element_values(part):
            for v in values:
                if ok and literal_key(element) != literal_key(v) and python_equal(element, v):
                    raise EditError(f"{v!r} and the set's element {element!r} are one element of a set in Python")
