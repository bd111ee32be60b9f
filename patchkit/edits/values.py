"""The CST node for what a `value`/`expr` edit wants (see targets.WantsValue), and what replacing
a literal of one type with one of another says (`type_trap`)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import libcst as cst

from patchkit.edits.base import EditError, EditRefused, Layout, expression_node, literal_node, literal_of
from patchkit.edits.model import a_type, type_name

if TYPE_CHECKING:
    from patchkit.edits.targets import WantsValue

# Words YAML 1.1 (and so Ansible) reads as booleans; YAML 1.2 (patchkit) keeps them strings.
BOOL_WORDS = {"yes": True, "on": True, "true": True, "no": False, "off": False, "false": False}


def wanted_node(spec: WantsValue, quote: str = '"', layout: Layout = Layout()) -> cst.BaseExpression:
    """`expr` parsed, or `value` written in the file's quote style; inside an f-string's
    braces, in a quote the f-string does not use (or an EditError when it cannot be)."""
    if spec.expr is not None:
        if layout.avoid and ("\\" in spec.expr or any(q in spec.expr for q in layout.avoid)):
            raise EditError(f"expr {spec.expr!r} cannot go inside an f-string's braces (its quotes or backslashes)")
        return expression_node(spec.expr)
    return literal_node(spec.value, layout.quote(quote), layout.avoid)


def _kind(name: str | None) -> str | None:
    return "number" if name in ("int", "float") else name  # 1 -> 1.5 keeps the kind


def type_trap(spec: WantsValue, old: cst.BaseExpression, wanted: cst.BaseExpression, what: str) -> str:
    """What replacing the literal `old` with `wanted` says of their types: "" when the kind stays
    (int and float are one), when either is not a literal, or when the recipe says `type:`;
    else a warning for the message. A string like "no" where the code has a bool is refused
    (EditRefused, naming the edit by `what`): a YAML 1.1 reflex, and a string is truthy."""
    if spec.type is not None:
        return ""
    ok_old, old_value = literal_of(old)
    ok_new, new_value = literal_of(wanted)
    if not (ok_old and ok_new):
        return ""
    was, now = type_name(old_value), type_name(new_value)
    if was is None or now is None or _kind(was) == _kind(now):
        return ""
    if was == "bool" and spec.expr is None and isinstance(spec.value, str):
        word = BOOL_WORDS.get(spec.value.strip().lower())
        if word is not None:
            raise EditRefused(f"{what}: value {json.dumps(spec.value, ensure_ascii=False)} is a string where the "
                              f"code has a bool; did you mean {'true' if word else 'false'}? "
                              "(say type: str to keep the string)")
    return (f" (warning: the code has {a_type(was)} there, the new value is {a_type(now)}: "
            f"say type: {now} if that is meant)")
