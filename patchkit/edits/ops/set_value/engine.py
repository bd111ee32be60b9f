"""set_value: make the target's value (or the part of it at `path`) equal a value."""

from __future__ import annotations

import libcst as cst

from patchkit.edits.base import EditResult, Layout, code_of, parenthesized, quote_style, same_expression
from patchkit.edits.paths import Edited
from patchkit.edits.places import run_value_edit
from patchkit.edits.targets import ValueAt
from patchkit.edits.values import type_trap, wanted_node


def run(spec: ValueAt, source: str) -> EditResult:
    return run_value_edit(spec, Setter(spec), source)


def label(spec: ValueAt) -> str:
    if spec.target == "assignment":
        text = "/".join(spec.names or [])
    elif spec.target == "call_arg":
        text = f"{spec.callees[0]}({spec.arg}=)" if isinstance(spec.arg, str) else f"{spec.callees[0]}(#{spec.arg})"
    elif spec.target == "return":
        text = "return"
    else:
        text = f"the default of {spec.arg}"
    return text + "".join(f"[{step!r}]" for step in spec.path)


def name_of(spec: ValueAt) -> str:
    """What the edit sets, as short as a refusal names it: `detokenize`, `x`, `setup(#0)`."""
    if spec.target == "assignment":
        text = "/".join(spec.names or [])
    elif isinstance(spec.arg, str):
        text = spec.arg
    elif spec.target == "call_arg":
        text = f"{spec.callees[0]}(#{spec.arg})"
    else:
        text = "return"
    return text + "".join(f"[{step!r}]" for step in spec.path)


def strings_of(value: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The value and, for a display, its items and keys: whose quotes a new value follows."""
    items: list[object] = [value]
    for element in getattr(value, "elements", []):
        items += [getattr(element, "key", None), getattr(element, "value", None)]
    return [i for i in items if isinstance(i, cst.BaseExpression)]


class Setter:
    replaces_value = True  # the value is replaced whole (an augmented or chained assignment refuses)

    def __init__(self, spec: ValueAt) -> None:
        self.spec = spec

    def edit(self, value: cst.BaseExpression, layout: Layout) -> Edited:
        wanted = wanted_node(self.spec, quote_style(strings_of(value)), layout)
        if same_expression(value, wanted):
            return None
        warning = type_trap(self.spec, value, wanted, f"{self.spec.kind} {name_of(self.spec)}")
        if value.lpar and (type(wanted) is type(value) or not isinstance(value, (cst.Tuple, cst.GeneratorExp))):
            # a tuple's or generator's parentheses are its own: `("p")` would read like a tuple
            wanted = wanted.with_changes(lpar=value.lpar, rpar=value.rpar)
        elif not isinstance(value, cst.Tuple):  # a bare tuple sits where a bare tuple may
            wanted = parenthesized(wanted)
        return wanted, f"set {label(self.spec)} = {self.spec.describe()} (was {code_of(value)})" + warning
