"""What every edit operation shares: the verdict, the result, scope-aware matching.

An edit is pure: source text in, new source text plus a verdict out. It never
touches a host; that is what lets us run it against every vLLM release in tests.
"""

from __future__ import annotations

import ast
import difflib
from dataclasses import dataclass, field
from typing import Sequence

import libcst as cst

from patchkit.edits.model import EditError, EditResult, EditSpec, Scalar, Verdict  # noqa: F401 (re-exported)


def parse_module(source: str) -> cst.Module:
    try:
        return cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        raise EditError(f"the file does not parse: {exc.message} (line {exc.raw_line})") from exc


def literal_of(node: cst.BaseExpression) -> tuple[bool, object]:
    """(True, value) when `node` is a plain literal we can compare by meaning."""
    try:
        return True, ast.literal_eval(cst.Module(body=[]).code_for_node(node).strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False, None


def quote_style(elements: Sequence[cst.BaseExpression]) -> str:
    for value in elements:
        if isinstance(value, cst.SimpleString) and value.prefix == "":
            return value.quote[0]
    return '"'


def literal_node(value: object, quote: str = '"') -> cst.BaseExpression:
    """A CST node for a Python value, strings in the given quote style."""
    if isinstance(value, str):
        if quote not in value and "\\" not in value and "\n" not in value:
            return cst.SimpleString(f"{quote}{value}{quote}")
        return cst.SimpleString(repr(value))
    return cst.parse_expression(repr(value))


def expression_node(expr: str) -> cst.BaseExpression:
    try:
        return cst.parse_expression(expr)
    except cst.ParserSyntaxError as exc:
        raise EditError(f"expr {expr!r} is not a Python expression: {exc.message}") from exc


def same_expression(a: cst.BaseExpression, b: cst.BaseExpression) -> bool:
    """Equal by meaning: literals by value, anything else by code ignoring layout."""
    ok_a, val_a = literal_of(a)
    ok_b, val_b = literal_of(b)
    if ok_a and ok_b:
        return type(val_a) is type(val_b) and val_a == val_b
    return ast.dump(_ast_of(a)) == ast.dump(_ast_of(b))


def _ast_of(node: cst.BaseExpression) -> ast.AST:
    return ast.parse(cst.Module(body=[]).code_for_node(node).strip(), mode="eval")


class ScopedTransformer(cst.CSTTransformer):
    """Tracks the qualified name (Class.method) of the scope being visited."""

    def __init__(self, within: str | None) -> None:
        super().__init__()
        self.within = within
        self.scope: list[str] = []
        self.scopes_seen: set[str] = set()

    @property
    def qualname(self) -> str:
        return ".".join(self.scope)

    def in_scope(self) -> bool:
        if not self.within:
            return True
        q = self.qualname
        return q == self.within or q.startswith(self.within + ".")

    def _enter(self, name: str) -> None:
        self.scope.append(name)
        self.scopes_seen.add(self.qualname)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._enter(node.name.value)

    def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef) -> cst.ClassDef:
        self.scope.pop()
        return updated

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._enter(node.name.value)

    def leave_FunctionDef(
        self, original: cst.FunctionDef, updated: cst.FunctionDef
    ) -> cst.FunctionDef:
        self.scope.pop()
        return updated

    def scope_hint(self) -> str:
        """Why `within` may not have matched: it does not exist, or close names do."""
        if not self.within or self.within in self.scopes_seen:
            return ""
        close = difflib.get_close_matches(self.within, sorted(self.scopes_seen), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        return f"there is no scope {self.within}{hint}"


def assigned_names(target: cst.BaseAssignTargetExpression | cst.BaseExpression) -> list[str]:
    """`x = ...` -> [x]; `self.x = ...` -> [x]; `a = b = ...` handled by caller."""
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, cst.Attribute):
        return [target.attr.value]
    return []


@dataclass
class AssignmentMatches:
    """What an assignment-targeting transformer saw, for verdicts and near misses."""

    edited: int = 0
    unchanged: int = 0
    problems: list[str] = field(default_factory=list)
    names_in_scope: dict[str, str] = field(default_factory=dict)  # name -> value kind
    names_elsewhere: dict[str, str] = field(default_factory=dict)  # name -> scope
    notes: list[str] = field(default_factory=list)  # what each edit did, for the message


class AssignmentEditor(ScopedTransformer):
    """Finds assignments to `names` (within a scope) and rewrites their value.

    Subclasses implement `edit_value(value) -> new value`, returning the same
    object when nothing needs to change, or raising EditError when the value is
    not of a shape they can edit.
    """

    def __init__(self, names: Sequence[str], within: str | None) -> None:
        super().__init__(within)
        self.names = list(names)
        self.matches = AssignmentMatches()

    def edit_value(self, value: cst.BaseExpression) -> cst.BaseExpression:  # pragma: no cover
        raise NotImplementedError

    def _handle(self, targets: list[str], value: cst.BaseExpression | None) -> cst.BaseExpression | None:
        if value is None:
            return None
        if not self.in_scope():
            for name in targets:
                if name in self.names:
                    self.matches.names_elsewhere.setdefault(name, self.qualname or "<module>")
            return None
        if not any(name in self.names for name in targets):
            for name in targets:
                self.matches.names_in_scope.setdefault(name, type(value).__name__)
            return None
        try:
            new_value = self.edit_value(value)
        except EditError as exc:
            self.matches.problems.append(f"{'/'.join(targets)}: {exc}")
            return None
        if new_value is value:
            self.matches.unchanged += 1
            return None
        self.matches.edited += 1
        return new_value

    def note(self, text: str) -> None:
        where = f" in {self.qualname}" if self.qualname else ""
        self.matches.notes.append(text + where)

    def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
        names = [n for t in updated.targets for n in assigned_names(t.target)]
        new_value = self._handle(names, updated.value)
        return updated if new_value is None else updated.with_changes(value=new_value)

    def leave_AnnAssign(self, original: cst.AnnAssign, updated: cst.AnnAssign) -> cst.AnnAssign:
        new_value = self._handle(assigned_names(updated.target), updated.value)
        return updated if new_value is None else updated.with_changes(value=new_value)

    def not_found_message(self) -> str:
        looked_for = " or ".join(self.names)
        where = f" within {self.within}" if self.within else ""
        if self.matches.problems:
            parts = [f"cannot edit {looked_for}{where}: " + "; ".join(self.matches.problems)]
        else:
            parts = [f"no assignment to {looked_for}{where}"]
        hint = self.scope_hint()
        if hint:
            parts.append(hint)
        if self.matches.names_elsewhere:
            parts.append(
                "found "
                + ", ".join(f"{n} in {s}" for n, s in sorted(self.matches.names_elsewhere.items()))
            )
        collection_kinds = {"List", "Tuple", "Set", "Dict"}
        similar = [
            name
            for name, kind in self.matches.names_in_scope.items()
            if kind in collection_kinds or difflib.get_close_matches(name, self.names, n=1, cutoff=0.6)
        ]
        if similar:
            parts.append("found " + ", ".join(sorted(similar)))
        return "; ".join(parts)


def run_assignment_editor(source: str, editor: AssignmentEditor) -> EditResult:
    module = parse_module(source)
    new_module = module.visit(editor)
    m = editor.matches
    if m.edited:
        return EditResult("changed", new_module.code, "; ".join(m.notes))
    if m.unchanged:
        return EditResult("already", source, "already in place")
    return EditResult("not_found", source, editor.not_found_message())
