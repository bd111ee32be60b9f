"""replace_function: make a function's body equal a wanted body, compared by meaning.

Only the body block changes. The decorators, the `def` line (signature, the comment after
its colon), the comments above the def and everything else in the file stay
byte-identical. The wanted body is parsed as its own module and grafted in as CST nodes,
so it takes the function's indentation (tabs or spaces, any depth) while the contents of
its multi-line strings are kept exactly.

Docstrings: with `keep_docstring` (the default), a function's docstring stays in front of
a wanted body that has none of its own; a wanted body with a docstring always brings it.
"Already in place" means the function's body equals, by AST, the body this op would
write: formatting and comments do not count.
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Sequence
import libcst as cst

from patchkit.edits.base import EditError, EditResult, snippet
from patchkit.edits.places import dead_code_warning, how_to_choose
from patchkit.edits.targets import Pick
from patchkit.edits.tree import Location, SourceTree, Walk, replacement


def run(pick: Pick, source: str, qualname: str, body: str, keep_old_docstring: bool) -> EditResult:
    """The body of function `qualname` made `body` (module text); the old docstring stays in
    front when `keep_old_docstring` (asked for, and `body` has none of its own)."""
    tree = SourceTree.of(source)
    module = tree.module
    defs = _Definitions(tree, qualname.rsplit(".", 1)[-1])  # only the defs of that name
    module.visit(defs)
    matches = [(scope, node) for name, scope, node in defs.functions if name == qualname]
    if not matches:
        defs = _Definitions(tree)  # every def: for the names a message suggests
        module.visit(defs)
        return EditResult("not_found", source, _not_found_message(qualname, defs))
    if pick.occurrence is not None:
        if pick.occurrence > len(matches):
            return EditResult("not_found", source, (
                f"occurrence {pick.occurrence} asked, but {qualname} is defined {len(matches)} "
                f"time{'s' if len(matches) > 1 else ''}: {_listing(module, matches)}"))
        matches = [matches[pick.occurrence - 1]]
    elif len(matches) > 1 and not pick.all:
        return EditResult("not_found", source, (
            f"function {qualname} is ambiguous: it is defined {len(matches)} times: "
            f"{_listing(module, matches)}; {how_to_choose([])}"))
    replaced: dict[int, tuple[cst.FunctionDef, cst.FunctionDef]] = {}
    notes = []
    for _scope, function in matches:
        block, kept_docstring = _new_block(function, body, keep_old_docstring, qualname)
        new_function = function.with_changes(body=block)
        if _body_meaning(module, function) == _body_meaning(module, new_function):
            continue
        replaced[id(function)] = (function, new_function)
        kind = "async function" if function.asynchronous else "function"
        old_n, new_n = _line_count(module, function.body), _line_count(module, block)
        note = f"replaced the body of {kind} {qualname} ({old_n} -> {new_n} lines)"
        if kept_docstring:
            note += "; kept its docstring"
        notes.append(note)
    if not notes:
        return EditResult("already", source, "already in place")
    message = "; ".join(notes)
    if pick.occurrence is not None:
        message += f" (occurrence {pick.occurrence})"
    elif len(matches) > 1:
        rest = len(matches) - len(notes)
        message += f" ({len(notes)} of {len(matches)} definitions changed (all: true)" + (
            f", {rest} already in place)" if rest else ")")
    message += dead_code_warning([defs.dead_of[key] for key in replaced])
    edits = [replacement(defs.where_of[key], function, new) for key, (function, new) in replaced.items()]
    if all(edits) and tree.can_replace(edits):  # type: ignore[arg-type]
        return EditResult("changed", tree.replace(edits)[0], message)  # type: ignore[arg-type]
    swapped = {key: new for key, (_, new) in replaced.items()}  # defs inside replaced defs
    return EditResult("changed", tree.adopt(module.visit(_Swap(swapped))), message)


class _Swap(cst.CSTTransformer):
    """Replaces nodes of the original tree, found by identity, in one pass."""

    def __init__(self, new: dict[int, cst.FunctionDef]) -> None:
        super().__init__()
        self.new = new

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> cst.CSTNode:  # type: ignore[override]
        return self.new.get(id(original_node), updated_node)


def _listing(module: cst.Module, matches: list[tuple[str, cst.FunctionDef]]) -> str:
    from libcst.metadata import MetadataWrapper, PositionProvider  # a full pass: for messages only

    positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    return "; ".join(
        f"{i}) line {positions[node].start.line} in {scope}: `{snippet(node)}`"
        for i, (scope, node) in enumerate(matches, 1)
    )


class _Definitions(Walk, cst.CSTVisitor):
    """Every function (by qualified name, in source order) and class name in a module;
    given a `name`, only the statements where it occurs are visited."""

    def __init__(self, tree: SourceTree, name: str = "") -> None:
        super().__init__()
        self.scope: list[str] = []
        self.functions: list[tuple[str, str, cst.FunctionDef]] = []  # qualname, enclosing scope, node
        self.classes: set[str] = set()
        self.where_of: dict[int, Location | None] = {}
        self.dead_of: dict[int, str] = {}  # the branch a def sits in that never runs (Walk.never_runs)
        self.start_walk(tree, [name] if name else [])

    def on_visit(self, node: cst.CSTNode) -> bool:
        return self.walk_visit(node) and super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if self.walk_leave(original_node):
            super().on_leave(original_node)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.scope.append(node.name.value)
        self.classes.add(".".join(self.scope))

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.scope.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.functions.append((".".join([*self.scope, node.name.value]), ".".join(self.scope) or "<module>", node))
        self.where_of[id(node)] = self.where()
        self.dead_of[id(node)] = self.never_runs()
        self.scope.append(node.name.value)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.scope.pop()


def _not_found_message(wanted: str, defs: _Definitions) -> str:
    names = list(dict.fromkeys(name for name, _, _ in defs.functions))
    message = f"no function {wanted}"
    if wanted in defs.classes:
        message += f" ({wanted} is a class: name one of its methods, e.g. {wanted}.__init__)"
    last = wanted.rsplit(".", 1)[-1]
    same_name = [name for name in names if name.rsplit(".", 1)[-1] == last]
    close = difflib.get_close_matches(wanted, names, n=3, cutoff=0.6)
    near = list(dict.fromkeys(same_name + close))[:5]
    if near:
        return f"{message}; did you mean {', '.join(near)}?"
    if not names:
        return f"{message}; the file defines no functions"
    return message


class _BlankLinesWithoutIndent(cst.CSTTransformer):
    """Blank lines of the wanted body, parsed at column 0, would take the function's
    indentation once grafted in (trailing whitespace): mark them unindented."""

    def leave_EmptyLine(self, original_node: cst.EmptyLine, updated_node: cst.EmptyLine) -> cst.EmptyLine:
        if updated_node.comment is None and updated_node.indent:
            return updated_node.with_changes(indent=False)
        return updated_node


def _is_blank(line: cst.EmptyLine) -> bool:
    return line.comment is None


def _strip_blank_edges(lines: Sequence[cst.EmptyLine], leading: bool) -> list[cst.EmptyLine]:
    lines = list(lines)
    if leading:
        while lines and _is_blank(lines[0]):
            lines.pop(0)
    else:
        while lines and _is_blank(lines[-1]):
            lines.pop()
    return lines


def _wanted_statements(body: str, qualname: str) -> tuple[list[cst.BaseStatement], list[cst.EmptyLine]]:
    """The wanted body's statements and its trailing comments, ready to graft in."""
    try:
        parsed = cst.parse_module(body)
    except cst.ParserSyntaxError as exc:  # ast accepted it (validated at load); libcst did not
        raise EditError(f"libcst cannot parse the body for {qualname}: {exc.message}") from exc
    parsed = parsed.visit(_BlankLinesWithoutIndent())
    statements = list(parsed.body)
    if not statements:  # pragma: no cover - refused when the recipe is validated
        raise EditError(f"the body for {qualname} has no statements")
    # Comments before the first statement are the module's header: they belong to the body.
    header = _strip_blank_edges(parsed.header, leading=True)
    first = statements[0]
    statements[0] = first.with_changes(leading_lines=[*header, *first.leading_lines])
    return [*statements], _strip_blank_edges(parsed.footer, leading=False)


def _string_value(node: cst.BaseExpression) -> bool:
    return isinstance(node, (cst.SimpleString, cst.ConcatenatedString)) and isinstance(node.evaluated_value, str)


def _docstring_statement(function: cst.FunctionDef) -> cst.SimpleStatementLine | None:
    """The function's docstring as a statement line of its own, or None."""
    body = function.body
    if isinstance(body, cst.SimpleStatementSuite):  # def f(): "doc"; return 1
        small = body.body[0] if body.body else None
        if isinstance(small, cst.Expr) and _string_value(small.value):
            return cst.SimpleStatementLine(body=[small.with_changes(semicolon=cst.MaybeSentinel.DEFAULT)])
        return None
    first = body.body[0] if body.body else None
    if not isinstance(first, cst.SimpleStatementLine) or not first.body:
        return None
    expr = first.body[0]
    if not (isinstance(expr, cst.Expr) and _string_value(expr.value)):
        return None
    if len(first.body) == 1:
        return first
    return first.with_changes(body=[expr.with_changes(semicolon=cst.MaybeSentinel.DEFAULT)])


def _new_block(function: cst.FunctionDef, body: str, keep_old_docstring: bool,
               qualname: str) -> tuple[cst.IndentedBlock, bool]:
    statements, footer = _wanted_statements(body, qualname)
    kept_docstring = False
    if keep_old_docstring:
        docstring = _docstring_statement(function)
        if docstring is not None:
            statements.insert(0, docstring)
            kept_docstring = True
    old = function.body
    if isinstance(old, cst.IndentedBlock):
        # The old footer's comments were the old body's; blank lines after them are layout.
        trailing_blank: list[cst.EmptyLine] = []
        for line in reversed(old.footer):
            if not _is_blank(line):
                break
            trailing_blank.insert(0, line)
        # `indent` and `header` (the comment after the colon) are the function's: kept.
        return old.with_changes(body=statements, footer=[*footer, *trailing_blank]), kept_docstring
    # A one-line body (`def f(): return 1`) becomes a block at the module's default indent.
    assert isinstance(old, cst.SimpleStatementSuite)
    return cst.IndentedBlock(body=statements, header=old.trailing_whitespace, footer=footer), kept_docstring


def _body_meaning(module: cst.Module, function: cst.FunctionDef) -> list[str]:
    """The function's body as AST dumps: equal when equal by meaning."""
    tree = ast.parse(module.code_for_node(function))
    node = tree.body[0]
    assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    return [ast.dump(statement) for statement in node.body]


def _line_count(module: cst.Module, block: cst.BaseSuite) -> int:
    return max(1, len(module.code_for_node(block).strip("\n").splitlines()))
