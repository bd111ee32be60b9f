"""call_kwarg: make calls to a named callee pass a keyword argument with a value."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from patchkit.edits.base import (
    EditResult,
    ScopedTransformer,
    parse_module,
    quote_style,
    same_expression,
)
from patchkit.edits.values import wanted_node

if TYPE_CHECKING:
    from patchkit.edits.specs import CallKwarg

_CLEAN_LINE = cst.TrailingWhitespace()


def callee_name(func: cst.BaseExpression) -> str:
    """`pkg.mod.f` -> "pkg.mod.f"; anything else (a call result, a subscript) -> ""."""
    if isinstance(func, cst.Name):
        return func.value
    if isinstance(func, cst.Attribute):
        inner = callee_name(func.value)
        return f"{inner}.{func.attr.value}" if inner else ""
    return ""


def run(spec: CallKwarg, source: str) -> EditResult:
    module = parse_module(source)
    editor = _KwargEditor(spec)
    new = module.visit(editor)
    if editor.edited:
        return EditResult("changed", new.code, "; ".join(editor.notes))
    if editor.unchanged:
        return EditResult("already", source, "already in place")
    where = f" within {spec.within}" if spec.within else ""
    parts = [f"no call to {spec.callee}{where}"]
    if editor.scope_hint():
        parts.append(editor.scope_hint())
    if editor.elsewhere:
        parts.append("found calls in " + ", ".join(sorted(editor.elsewhere)))
    return EditResult("not_found", source, "; ".join(parts))


class _KwargEditor(ScopedTransformer):
    def __init__(self, spec: CallKwarg) -> None:
        super().__init__(spec.within)
        self.spec = spec
        self.edited = 0
        self.unchanged = 0
        self.notes: list[str] = []
        self.elsewhere: set[str] = set()

    def _matches(self, call: cst.Call) -> bool:
        name = callee_name(call.func)
        return bool(name) and (name == self.spec.callee or name.rsplit(".", 1)[-1] == self.spec.callee)

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        if not self._matches(updated):
            return updated
        if not self.in_scope():
            self.elsewhere.add(self.qualname or "<module>")
            return updated
        wanted = wanted_node(self.spec, quote_style([a.value for a in updated.args]))
        for i, arg in enumerate(updated.args):
            if arg.keyword is not None and arg.keyword.value == self.spec.keyword:
                if same_expression(arg.value, wanted):
                    self.unchanged += 1
                    return updated
                args = list(updated.args)
                args[i] = arg.with_changes(value=wanted)
                return self._done(updated.with_changes(args=args), "set")
        new_arg = cst.Arg(
            value=wanted,
            keyword=cst.Name(self.spec.keyword),
            equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
        )
        return self._done(updated.with_changes(args=_append_arg(updated, new_arg)), "added")

    def _done(self, call: cst.Call, verb: str) -> cst.Call:
        self.edited += 1
        where = f" in {self.qualname}" if self.qualname else ""
        self.notes.append(f"{verb} {self.spec.keyword}={self.spec.describe()} in a call to {self.spec.callee}{where}")
        return call


def _append_arg(call: cst.Call, new: cst.Arg) -> list[cst.Arg]:
    args = list(call.args)
    if not args:
        return [new]
    last = args[-1]
    opening = call.whitespace_before_args
    indent = opening.last_line if isinstance(opening, cst.ParenthesizedWhitespace) else None
    for a in args:
        ws = a.comma.whitespace_after if isinstance(a.comma, cst.Comma) else None
        if indent is None and isinstance(ws, cst.ParenthesizedWhitespace):
            indent = ws.last_line
    trailing = isinstance(last.comma, cst.Comma)
    end_ws = last.comma.whitespace_after if trailing else last.whitespace_after_arg
    if indent is not None and isinstance(end_ws, cst.ParenthesizedWhitespace):
        # One argument per line: new argument on its own line, closing paren where it was.
        moved = cst.ParenthesizedWhitespace(first_line=end_ws.first_line, indent=True, last_line=indent)
        closing = cst.ParenthesizedWhitespace(
            first_line=_CLEAN_LINE, empty_lines=end_ws.empty_lines, indent=True, last_line=end_ws.last_line
        )
        args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=moved), whitespace_after_arg=cst.SimpleWhitespace(""))
        if trailing:
            args.append(new.with_changes(comma=cst.Comma(whitespace_after=closing)))
        else:
            args.append(new.with_changes(whitespace_after_arg=closing))
        return args
    sep = args[-2].comma if len(args) >= 2 and isinstance(args[-2].comma, cst.Comma) else cst.Comma(
        whitespace_after=cst.SimpleWhitespace(" ")
    )
    args[-1] = last.with_changes(comma=sep, whitespace_after_arg=cst.SimpleWhitespace(""))
    args.append(new.with_changes(whitespace_after_arg=last.whitespace_after_arg))
    return args
