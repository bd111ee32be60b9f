"""call_kwarg: make a call to a callee pass a keyword argument with a value.

The callee is matched as written, by meaning (`super().__init__`, `", ".join`); one call
must match (see places.py for `occurrence`/`all`). A bare generator argument gets its own
parentheses when a keyword joins it: `sum(x for x in y)` -> `sum((x for x in y), k=1)`.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from patchkit.edits.base import EditResult, parenthesized, quote_style, same_expression, snippet
from patchkit.edits.paths import Edited
from patchkit.edits.places import CallLocator, run_locator
from patchkit.edits.targets import CallValue
from patchkit.edits.values import type_trap, wanted_node

_CLEAN_LINE = cst.TrailingWhitespace()


def run(spec: CallValue, source: str, callees: Sequence[str], keyword: str) -> EditResult:
    return run_locator(source, lambda: _KwargLocator(spec, callees, keyword))


class _KwargLocator(CallLocator):
    def __init__(self, spec: CallValue, callees: Sequence[str], keyword: str) -> None:
        super().__init__(spec, callees)
        self.spec, self.keyword = spec, keyword

    def describe(self) -> str:
        return f"call to {' or '.join(self.callees)}"

    def rebuild(self, node: cst.CSTNode) -> Edited:
        assert isinstance(node, cst.Call)
        wanted = parenthesized(wanted_node(self.spec, quote_style([a.value for a in node.args]), self.layout))
        what = f"{self.keyword}={self.spec.describe()} in a call to {self.callees[0]}"
        for i, arg in enumerate(node.args):
            if arg.keyword is not None and arg.keyword.value == self.keyword:
                if same_expression(arg.value, wanted):
                    return None
                warning = type_trap(self.spec, arg.value, wanted, f"{self.spec.kind} {self.keyword}")
                args = list(node.args)
                args[i] = arg.with_changes(value=wanted)
                return node.with_changes(args=args), f"set {what}" + warning
        new_arg = cst.Arg(
            value=wanted,
            keyword=cst.Name(self.keyword),
            equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
        )
        return node.with_changes(**_append_arg(node, new_arg, self.layout.unit)), f"added {what}" + _unpacked_warning(
            node, self.keyword)


def _unpacked_warning(call: cst.Call, keyword: str) -> str:
    """A `**mapping` the call passes may carry the keyword too: once the keyword is written
    out as well, such a call raises TypeError (got multiple values for keyword argument)."""
    unpacked = [f"**{snippet(a.value, 30)}" for a in call.args if a.star == "**"]
    if not unpacked:
        return ""
    return (f" (warning: if {', '.join(f'`{u}`' for u in unpacked)} holds {keyword!r} too, the call now raises "
            f"TypeError: multiple values for keyword argument {keyword!r})")


def _append_arg(call: cst.Call, new: cst.Arg, unit: str) -> dict[str, object]:
    """The call's changed fields with `new` as its last argument, laid out like the others."""
    args = [_own_parens(a) for a in call.args]
    opening = call.whitespace_before_args
    if not args:
        if isinstance(opening, cst.ParenthesizedWhitespace):
            # `f(\n)`: the argument on a line of its own, one indent deeper than the paren.
            inner = opening.with_changes(empty_lines=[], last_line=cst.SimpleWhitespace(opening.last_line.value + unit))
            closing = opening.with_changes(first_line=_CLEAN_LINE)
            return {"args": [new.with_changes(comma=cst.Comma(whitespace_after=closing))], "whitespace_before_args": inner}
        return {"args": [new]}
    return {"args": _append_to(args, opening, new)}


def _own_parens(arg: cst.Arg) -> cst.Arg:
    """A generator that was a call's only argument needs parentheses once it is not."""
    if isinstance(arg.value, cst.GeneratorExp) and not arg.value.lpar:
        return arg.with_changes(value=arg.value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()]))
    return arg


def _append_to(args: list[cst.Arg], opening: cst.BaseParenthesizableWhitespace, new: cst.Arg) -> list[cst.Arg]:
    last = args[-1]
    indent = opening.last_line if isinstance(opening, cst.ParenthesizedWhitespace) else None
    for a in args:
        ws = a.comma.whitespace_after if isinstance(a.comma, cst.Comma) else None
        if indent is None and isinstance(ws, cst.ParenthesizedWhitespace):
            indent = ws.last_line
    trailing = isinstance(last.comma, cst.Comma)
    end_ws = last.comma.whitespace_after if isinstance(last.comma, cst.Comma) else last.whitespace_after_arg
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
    # `f(a, )`: the user's trailing comma stays the last thing before the paren
    args.append(new.with_changes(whitespace_after_arg=last.whitespace_after_arg, comma=last.comma))
    return args
