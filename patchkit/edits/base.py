"""What every edit operation shares: parsing, literals compared the way Python does, scopes.

An edit is pure: source text in, new source text plus a verdict out. It never
touches a host; that is what lets us run it against every vLLM release in tests.
"""

from __future__ import annotations

import ast
import difflib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import libcst as cst

from patchkit.edits.model import (  # re-exported: the edits import them from here
    MODULE_SCOPE as MODULE_SCOPE,
    EditBug as EditBug,
    EditError as EditError,
    EditRefused as EditRefused,
    EditResult as EditResult,
    EditSpec as EditSpec,
    Scalar as Scalar,
    Verdict as Verdict,
)
from patchkit.edits.tree import SourceTree, Walk

_EMPTY = cst.Module(body=[])


def parse_module(source: str) -> cst.Module:
    """The file's tree: parsed once per distinct text (SourceTree.of)."""
    return SourceTree.of(source).module


def code_of(node: cst.CSTNode) -> str:
    return _EMPTY.code_for_node(node)


def snippet(node: cst.CSTNode, width: int = 70) -> str:
    """The first line of a node's code, shortened: for messages that name a place."""
    lines = code_of(node).strip().splitlines() or [""]
    text = lines[0].strip()
    if len(lines) > 1 or len(text) > width:
        text = text[:width].rstrip() + " …"
    return text


def literal_of(node: cst.BaseExpression) -> tuple[bool, object]:
    """(True, value) when `node` is a plain literal we can compare by meaning."""
    try:  # in parentheses: an implicit concatenation may span lines ("a "\n "b")
        return True, ast.literal_eval("(\n" + code_of(node).strip() + "\n)")
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False, None


def literal_key(value: object) -> object:
    """A value's identity as a literal: type and value, so `1`, `1.0` and `True` differ
    (and so do `[1]` and `[True]`), while `'a'` and `"a"` are one string."""
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(literal_key(v) for v in value))
    if isinstance(value, (set, frozenset)):
        return ("set", frozenset(literal_key(v) for v in value))
    if isinstance(value, dict):
        return ("dict", frozenset((literal_key(k), literal_key(v)) for k, v in value.items()))
    return (type(value).__name__, value)


def same_literal(a: object, b: object) -> bool:
    return literal_key(a) == literal_key(b)


def python_equal(a: object, b: object) -> bool:
    """Equal as a set element or dict key is (`1`, `1.0` and `True` are one key)."""
    try:
        return bool(a == b) and hash(a) == hash(b)
    except TypeError:  # unhashable: not a key at all
        return False


def quote_style(elements: Sequence[cst.BaseExpression]) -> str:
    for value in elements:
        if isinstance(value, cst.SimpleString) and value.prefix == "":
            return value.quote[0]
    return '"'


@dataclass(frozen=True)
class Layout:
    """What new code must fit where it goes: the file's indentation step, and the quotes of
    enclosing f-strings (before Python 3.12 an f-string's braces may not reuse its quote)."""

    unit: str = "    "
    avoid: str = ""

    def quote(self, preferred: str) -> str:
        if preferred not in self.avoid:
            return preferred
        other = "'" if preferred == '"' else '"'
        if other in self.avoid:
            raise EditError("cannot write a string inside these nested f-strings (both quotes are taken)")
        return other


def literal_code(value: object, quote: str = '"', avoid: str = "") -> str:
    """Python source for a literal value, strings in the given quote style."""
    if isinstance(value, str):
        if any(q in value for q in avoid):
            raise EditError(f"{value!r} cannot be written inside an f-string's braces (its quotes)")
        for q in (quote, "'" if quote == '"' else '"'):
            if q not in avoid and q not in value and "\\" not in value and value.isprintable():
                return f"{q}{value}{q}"
        text = repr(value)
        if avoid and ("\\" in text or text[0] in avoid):
            raise EditError(f"{value!r} cannot be written inside an f-string's braces (its quotes or backslashes)")
        return text
    if isinstance(value, float) and not math.isfinite(value):
        raise EditError(f"{value!r} has no literal in Python; write it as expr: float('{value!r}')")
    if isinstance(value, list):
        return "[" + ", ".join(literal_code(v, quote, avoid) for v in value) + "]"
    if isinstance(value, tuple):
        items = [literal_code(v, quote, avoid) for v in value]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{literal_code(k, quote, avoid)}: {literal_code(v, quote, avoid)}"
                               for k, v in value.items()) + "}"
    text = repr(value)
    if avoid and any(q in text for q in avoid):
        raise EditError(f"{value!r} cannot be written inside an f-string's braces (its quotes)")
    return text


def literal_node(value: object, quote: str = '"', avoid: str = "") -> cst.BaseExpression:
    """A CST node for a Python value, strings in the given quote style."""
    code = literal_code(value, quote, avoid)
    if isinstance(value, str):
        return cst.SimpleString(code)
    return cst.parse_expression(code)


def expression_node(expr: str) -> cst.BaseExpression:
    try:
        return cst.parse_expression(expr.strip())
    except cst.ParserSyntaxError as exc:
        raise EditError(f"expr {expr!r} is not a Python expression: {exc.message}") from exc


def needs_parens(node: cst.BaseExpression) -> bool:
    """Expressions that change meaning or stop parsing between commas, e.g. `f(k=1, 2)`."""
    if node.lpar:
        return False
    return isinstance(node, (cst.Tuple, cst.GeneratorExp, cst.NamedExpr, cst.Yield))


def parenthesized(node: cst.BaseExpression) -> cst.BaseExpression:
    if needs_parens(node):
        return node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return node


def same_expression(a: cst.BaseExpression, b: cst.BaseExpression) -> bool:
    """Equal by meaning: literals by type and value, anything else by code ignoring layout."""
    ok_a, val_a = literal_of(a)
    ok_b, val_b = literal_of(b)
    if ok_a and ok_b:
        return same_literal(val_a, val_b)
    return ast_dump(a) == ast_dump(b)


def ast_dump(node: cst.BaseExpression) -> str:
    """The expression's AST, dumped: equal for code that differs only in layout and quotes."""
    return ast.dump(ast.parse("(\n" + code_of(node).strip() + "\n)", mode="eval").body)


def scope_matches(qualname: str, within: str | None, nested: bool) -> bool:
    """`within` names one scope exactly (`<module>` for the top level); the scopes nested
    inside it count only with `nested`. No `within`: the whole file."""
    if within is None:
        return True
    wanted = "" if within == MODULE_SCOPE else within
    if qualname == wanted:
        return True
    return nested and (wanted == "" or qualname.startswith(wanted + "."))


class ScopedTransformer(Walk, cst.CSTTransformer):
    """Tracks the qualified name (Class.method) of the scope being visited.

    A def's or class's decorators, arguments, defaults and bases belong to the enclosing
    scope (that is where Python evaluates them); only its body is inside it. With
    `start_walk(tree, needles)` it skips the statements no needle occurs in (tree.py).
    """

    def __init__(self, within: str | None, nested: bool = False) -> None:
        super().__init__()
        self.within = within
        self.nested = nested
        self.scope: list[str] = []
        self.scopes_seen: set[str] = set()
        self.start_walk(None)

    def on_visit(self, node: cst.CSTNode) -> bool:
        return self.walk_visit(node) and super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> Any:
        if not self.walk_leave(original_node):
            return updated_node
        return super().on_leave(original_node, updated_node)

    @property
    def qualname(self) -> str:
        return ".".join(self.scope)

    @property
    def scope_name(self) -> str:
        return self.qualname or MODULE_SCOPE

    def in_scope(self) -> bool:
        return scope_matches(self.qualname, self.within, self.nested)

    def is_nested_in_within(self) -> bool:
        """Inside a scope nested in `within` (what `nested: true` would add)."""
        return self.within is not None and not self.nested and scope_matches(self.qualname, self.within, True)

    def _seen(self, name: str) -> None:
        self.scopes_seen.add(".".join([*self.scope, name]))

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._seen(node.name.value)

    def visit_ClassDef_body(self, node: cst.ClassDef) -> None:
        self.scope.append(node.name.value)

    def leave_ClassDef_body(self, node: cst.ClassDef) -> None:
        self.scope.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._seen(node.name.value)

    def visit_FunctionDef_body(self, node: cst.FunctionDef) -> None:
        self.scope.append(node.name.value)

    def leave_FunctionDef_body(self, node: cst.FunctionDef) -> None:
        self.scope.pop()

    def scope_hint(self) -> str:
        """Why `within` may not have matched: it does not exist, or close names do."""
        if not self.within or self.within == MODULE_SCOPE or self.within in self.scopes_seen:
            return ""
        close = difflib.get_close_matches(self.within, sorted(self.scopes_seen), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        return f"there is no scope {self.within}{hint}"
