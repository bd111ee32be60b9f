"""One file version, parsed once, and edits that touch only the statements they change.

On a vLLM-sized file (7,000 lines) one libcst pass costs about as much as the parse, and
printing the module again a third of it, so edits do neither per edit:
- `SourceTree.of(text)` parses a text once; the trees of the last few texts are kept, and
  an edit hands its result's tree on, so the next step of a run does not parse again;
- a pass visits only the statements whose lines hold one of the target's words
  (`needles`): every statement's line span comes from Python's own `ast` (C speed), zipped
  with the CST statement by statement (`wanted`). A pass that finds nothing is redone over
  the whole tree by the caller, for a complete not-found message;
- the new text is the old one with the changed statements' code spliced in
  (`replace`), each printed alone with the indentation of the block it sits in.
Anything this cannot do exactly (a file `ast` cannot read, statements it cannot place,
edits nested in one another) takes the plain route: visit everything, print the module.
"""

from __future__ import annotations

import ast
import bisect
import dataclasses
import difflib
import re
import unicodedata
from collections import OrderedDict
from collections.abc import Iterable, Sequence

import libcst as cst
from libcst._nodes.internal import (
    CodegenState,  # how Module.code_for_node prints a node
)

from patchkit.edits.model import EditError

# Trees kept per process, by text: a run's few versions of a few files. A tree costs ~290
# times its text in memory (87 MB for the 7,255-line gpu_model_runner.py), hence a budget.
_KEEP = 6
_KEEP_TEXT = 1_200_000  # characters of text, the newest tree always kept
FAST = True  # False: the plain route always (tests compare the two)
_CACHE: OrderedDict[str, SourceTree] = OrderedDict()

Statement = cst.BaseStatement  # SimpleStatementLine or a compound statement
Location = tuple[tuple[cst.CSTNode, ...], tuple[str, ...]]  # the path down to a statement, its blocks' indents


class SpansUnknown(Exception):
    """The CST and `ast` statements do not line up (a syntax this Python cannot parse)."""


@dataclasses.dataclass
class Unit:
    """What of an edited text must be compiled again: the code of the statement that holds
    the change (the outermost def around it, else the changed statement itself), before and
    after, each a complete compile unit (`if 1:` lines open the blocks it sits in)."""

    old: str
    new: str
    first_line: int  # the file's line of the unit's first line of code (headers counted off)


class SourceTree:
    def __init__(self, text: str, module: cst.Module) -> None:
        self.text = text
        self.module = module
        # Set on a text spliced from another: the statements to compile instead of the file
        # (the rest is the other text's, byte for byte).
        self.units: list[Unit] | None = None
        self.parent: SourceTree | None = None
        self._spliced: list[tuple[int, int, int]] | None = None
        self._regions: list[tuple[int, int, int]] | None = None  # per edit: first, last line, line change
        self._partial_spans = False  # spans moved from a parent's may lack some statements
        self._partial_spans_next = False
        self._spans: dict[int, tuple[int, int]] | None | bool = False  # False: not computed yet
        self._line_starts: list[int] | None = None

    @classmethod
    def of(cls, text: str) -> SourceTree:
        tree = _CACHE.get(text)
        if tree is None:
            try:
                module = cst.parse_module(text)
            except cst.ParserSyntaxError as exc:
                raise EditError(f"the file does not parse: {exc.message} (line {exc.raw_line})") from exc
            tree = cls(text, module)
        remember(tree)
        return tree

    # --- where statements are
    @property
    def spans(self) -> dict[int, tuple[int, int]] | None:
        """id(statement) -> (first line, last line), decorators included; None if unknown."""
        if self._spans is False:
            self._spans = _spans_of(self.text, self.module)
        return self._spans  # type: ignore[return-value]

    def has_spans(self, statements: Iterable[cst.CSTNode]) -> bool:
        """Each statement has a span; spans moved from a parent's are completed by `ast` when
        one is missing."""
        spans = self.spans
        if spans is None:
            return False
        if all(id(s) in spans for s in statements):
            return True
        if self._partial_spans:
            self._partial_spans = False
            self._spans = _spans_of(self.text, self.module)
            return self.has_spans(statements)
        return False

    def line_starts(self) -> list[int]:
        if self._line_starts is None:
            starts, at = [0, 0], self.text.find("\n")  # starts[n]: offset of line n (1-based)
            while at != -1:
                starts.append(at + 1)
                at = self.text.find("\n", at + 1)
            self._line_starts = starts
        return self._line_starts

    def needle_lines(self, needles: Iterable[str]) -> list[int]:
        """The lines (1-based, sorted) on which any needle occurs, as Python reads names
        (NFKC: `ｓelf` is `self`)."""
        lines: set[int] = set()
        text, starts = self.text, self.line_starts()
        for needle in set(needles):
            at = text.find(needle)
            while at != -1:
                lines.add(bisect.bisect_right(starts, at) - 1)
                at = text.find(needle, at + 1)
        if not text.isascii():
            for number, line in enumerate(text.split("\n"), 1):
                if not line.isascii() and any(n in unicodedata.normalize("NFKC", line) for n in needles):
                    lines.add(number)
        return sorted(lines)

    def lines_of(self, found: Sequence[tuple[Location | None, cst.CSTNode]]) -> list[int]:
        """The line each node starts on (a node inside the statement its Location ends at).

        Each is found by printing only its statement, counted from where `ast` put that
        statement; a whole-module position pass (5x a parse on a vLLM-sized file) is made
        only for nodes this cannot place."""
        lines: list[int | None] = [self._line_in_statement(where, node) for where, node in found]
        if any(line is None for line in lines):
            from libcst.metadata import MetadataWrapper, PositionProvider

            positions = MetadataWrapper(self.module, unsafe_skip_copy=True).resolve(PositionProvider)
            lines = [positions[node].start.line if line is None else line for line, (_, node) in zip(lines, found)]
        return [line for line in lines if line is not None]

    def _line_in_statement(self, where: Location | None, node: cst.CSTNode) -> int | None:
        from libcst.metadata import CodeRange
        from libcst.metadata.position_provider import (
            PositionProvider,
            PositionProvidingCodegenState,
        )

        if where is None or not self.has_spans([where[0][-1]]):
            return None
        spans = self.spans
        assert spans is not None
        statement, indents = where[0][-1], where[1]
        provider = PositionProvider()
        state = PositionProvidingCodegenState(default_indent=self.module.default_indent,
                                              default_newline=self.module.default_newline,
                                              provider=provider, indent_tokens=list(indents))
        statement._codegen(state)
        position = provider._computed.get(node)
        if not isinstance(position, CodeRange):
            return None
        line: int = position.start.line
        return spans[id(statement)][0] - _leading_lines(statement) + line - 1

    # --- writing
    @staticmethod
    def can_replace(edits: Sequence[Replacement]) -> bool:
        """Each statement is replaced on its own: none holds, or is, another one."""
        paths = [{id(node) for node in edit.path} for edit in edits]
        return not any(id(a.statement) in paths[j] for i, a in enumerate(edits) for j in range(len(edits)) if i != j)

    def replace(self, edits: Sequence[Replacement]) -> tuple[str, SourceTree]:
        """The text with each statement replaced (`can_replace`), and its tree. The code is
        spliced in where `ast` placed the statement; printed whole when it cannot be."""
        assert self.can_replace(edits)
        text = None
        if FAST and self._newlines_are_lines() and self.has_spans(e.statement for e in edits):
            text = self._splice(edits)
        spans = self.spans
        module, rebuilt = _rebuilt(self.module, edits)
        tree = self._next(text, module)
        tree.parent = self
        if text is not None and spans is not None and self._spliced is not None:
            tree.units = self._units(edits, rebuilt, self._spliced, text)
            if tree._spans is False:  # a fresh tree: its spans follow from ours (no ast pass)
                self._partial_spans_next = False
                tree._spans = self._moved_spans(edits, rebuilt)
                tree._partial_spans = self._partial_spans_next
        return tree.text, tree

    def _moved_spans(self, edits: Sequence[Replacement], rebuilt: dict[int, cst.CSTNode]) -> dict[int, tuple[int, int]]:
        """The statements' line spans in the spliced text, from this text's: a statement after
        a splice moves by its change in lines; one holding a splice (the replaced statement,
        the blocks around it: rebuilt, with new ids) grows by it; a statement inside a
        replaced one keeps its span when the lines stayed, else it has none: the spans are
        then partial, and computed again by `ast` when one is missed (`complete_spans`)."""
        spans = self.spans
        assert spans is not None and self._regions is not None
        # per splice: its first and last line, the replaced statement's span, the line change
        regions = [(first, last, spans[id(edit.statement)], delta)
                   for edit, (first, last, delta) in zip(edits, self._regions)]
        moved: dict[int, tuple[int, int]] = {}
        for key, (a, b) in spans.items():
            holder = key in rebuilt
            new_a, new_b = a, b
            for first, last, (own_a, own_b), delta in regions:
                if a > last:
                    new_a, new_b = new_a + delta, new_b + delta
                elif b < first:
                    continue
                elif holder and a <= own_a and b >= own_b:
                    new_b += delta
                elif not holder and not delta and own_a <= a and b <= own_b:
                    # inside a replaced statement whose lines stayed: the same node, unless the
                    # edit copied it (deep_replace): then the new one is missed and completed
                    self._partial_spans_next = True
                    continue
                else:
                    break
            else:
                moved[id(rebuilt[key]) if holder else key] = (new_a, new_b)
                continue
            self._partial_spans_next = True
        return moved

    def _units(self, edits: Sequence[Replacement], rebuilt: dict[int, cst.CSTNode],
               spliced: list[tuple[int, int, int]], text: str) -> list[Unit] | None:
        """The compile units of a splice: with one edit, cut from the two texts (no printing);
        with several, printed from the trees. None: compile the file."""
        spans = self.spans
        assert spans is not None
        units = []
        for edit in edits:
            index, unit = next(((i, n) for i, n in enumerate(edit.path) if isinstance(n, cst.FunctionDef)),
                               (len(edit.path) - 1, edit.statement))
            if not self.has_spans([unit]):
                return None
            blocks = sum(isinstance(n, (cst.IndentedBlock, cst.Match)) for n in edit.path[:index])
            indents = edit.indents[:blocks]
            head = "".join("".join(indents[:i]) + "if 1:\n" for i in range(blocks))
            first, last = spans[id(unit)][0] - _leading_lines(unit), spans[id(unit)][1]
            if len(edits) == 1:
                starts = self.line_starts()
                at, old_len, new_len = spliced[0]
                start = starts[first]
                end = max(starts[last + 1] if last + 1 < len(starts) else len(self.text), at + old_len)
                old, new = self.text[start:end], text[start:end + new_len - old_len]
            else:
                old, new = self._code(unit, indents), self._code(rebuilt[id(unit)], indents)
            units.append(Unit(head + old, head + new, first - blocks))
        return units

    def compile_error(self) -> str | None:
        """Why this edited text is not Python (model.compile_error), compiling only its units
        when it was spliced: the rest is the original's, already read by this interpreter."""
        from patchkit.edits.model import compile_error

        parent = self.parent
        if self.units is None or parent is None:
            return None if parent is None else compile_error(parent.text, self.text)
        flags = parent.future_flags()
        for unit in self.units:
            error = compile_error(unit.old, unit.new, unit.first_line, flags)
            if error is not None:
                return error
        return None

    def future_flags(self) -> int:
        """The compiler flags of the file's `from __future__` imports (a unit compiled alone
        must be read as the file is)."""
        import __future__

        flags = 0
        for statement in self.module.body:
            if not isinstance(statement, cst.SimpleStatementLine):
                break
            for small in statement.body:
                if isinstance(small, cst.ImportFrom) and isinstance(small.module, cst.Name) \
                        and small.module.value == "__future__" and not isinstance(small.names, cst.ImportStar):
                    for alias in small.names:
                        feature = getattr(__future__, str(alias.evaluated_name), None)
                        flags |= getattr(feature, "compiler_flag", 0)
        return flags

    def adopt(self, module: cst.Module) -> str:
        """The code of an edited tree, printed whole; kept for the next edit of the text."""
        tree = self._next(None, module)
        tree.parent = self
        return tree.text

    def _next(self, text: str | None, module: cst.Module) -> SourceTree:
        tree = SourceTree(self._printed(module) if text is None else text, module)
        remember(tree)
        return tree

    def _newlines_are_lines(self) -> bool:
        """Every line ends in \n (or \r\n): `ast`'s line numbers are our line starts' (a
        lone \r is a line break to Python, not to `line_starts`)."""
        return "\r" not in self.text or self.text.count("\r") == self.text.count("\r\n")

    def _printed(self, module: cst.Module) -> str:
        """An edited tree's code, with the form feeds libcst drops from the original's lines."""
        text = module.code
        if "\f" not in self.text:
            return text
        kept = keep_form_feeds(self.text, self.module.code, text)
        if kept is None:
            raise EditError("libcst cannot print this file keeping its form feeds (\\f); nothing was changed")
        return kept

    def _splice(self, edits: Sequence[Replacement]) -> str | None:
        """The new text, or None; `_spliced` says where each edit went: (offset, old length,
        new length)."""
        self._spliced = self._regions = None
        spans = self.spans
        assert spans is not None
        starts, pieces, end, spliced = self.line_starts(), [], len(self.text), []
        regions: dict[int, tuple[int, int, int]] = {}
        for edit in sorted(edits, key=lambda e: spans[id(e.statement)][0], reverse=True):
            first = spans[id(edit.statement)][0] - _leading_lines(edit.statement)
            if first < 1:
                return None
            at = starts[first]
            old, new = self._code(edit.statement, edit.indents), self._code(edit.new, edit.indents)
            if not self.text.startswith(old, at) and "\f" in self.text:
                # libcst dropped a form feed of the statement's lines: the text's own lines, paired
                lines = old.count("\n") + (not old.endswith("\n"))
                region = self.text[at:starts[first + lines] if first + lines < len(starts) else len(self.text)]
                if keep_form_feeds(region, old, old) == region:
                    old, new = region, keep_form_feeds(region, old, new) or new
            if not self.text.startswith(old, at) or at + len(old) > end:
                return None  # not where ast says: print the module instead
            pieces.append(new + self.text[at + len(old):end])
            spliced.append((at, len(old), len(new)))
            lines = old.count("\n") + (not old.endswith("\n"))
            regions[id(edit)] = (first, first + lines - 1, new.count("\n") - old.count("\n"))
            end = at
        self._spliced = spliced
        self._regions = [regions[id(edit)] for edit in edits]  # in the edits' order
        return self.text[:end] + "".join(reversed(pieces))

    def _code(self, node: cst.CSTNode, indents: Sequence[str]) -> str:
        state = CodegenState(default_indent=self.module.default_indent,
                             default_newline=self.module.default_newline, indent_tokens=list(indents))
        node._codegen(state)
        return "".join(state.tokens)


_INDENT = " \t\f"
_LINE = re.compile(r"[^\n]*\n|[^\n]+")


def keep_form_feeds(original: str, printed_original: str, printed: str) -> str | None:
    """`printed` (libcst's code of an edit of `original`) with the form feeds libcst drops
    from a statement's indentation (`\\fdef f():` prints as `def f():`) put back: every line
    printed as it was gets the original's bytes, and a changed line whose indentation
    stayed gets its original indentation. None when the lines do not pair up."""
    if original == printed_original:
        return printed
    old, was, new = (_LINE.findall(t) for t in (original, printed_original, printed))  # not splitlines: \f splits
    if len(old) != len(was):
        return None
    out: list[str] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, was, new, autojunk=False).get_opcodes():
        if tag == "equal":
            out += old[i1:i2]
        elif tag == "replace" and i2 - i1 == j2 - j1:
            out += [_reindented(o, w, n) for o, w, n in zip(old[i1:i2], was[i1:i2], new[j1:j2])]
        else:
            out += new[j1:j2]
    return "".join(out)


def _reindented(original: str, printed_original: str, printed: str) -> str:
    """A changed line with the original's indentation, when libcst printed only that differently."""
    indent = original[:len(original) - len(original.lstrip(_INDENT))]
    was = printed_original[:len(printed_original) - len(printed_original.lstrip(_INDENT))]
    if indent != was and indent.replace("\f", "") == was and original[len(indent):] == printed_original[len(was):] \
            and printed.startswith(was):
        return indent + printed[len(was):]
    return printed


def _leading_lines(node: cst.CSTNode) -> int:
    """The blank and comment lines a statement's code starts with (before its first line)."""
    if isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
        return len(node.leading_lines)
    return 0


def result_compile_error(before: str, after: str) -> str | None:
    """Why `after`, an edit's result for `before`, is not Python: the edit's own units when
    this module spliced it, else the whole file (model.compile_error)."""
    from patchkit.edits.model import compile_error

    tree = _CACHE.get(after)
    if tree is not None and tree.parent is not None and tree.parent.text == before:
        return tree.compile_error()
    return compile_error(before, after)


def remember(tree: SourceTree) -> None:
    _CACHE[tree.text] = tree
    _CACHE.move_to_end(tree.text)
    while len(_CACHE) > 1 and (len(_CACHE) > _KEEP or sum(map(len, _CACHE)) > _KEEP_TEXT):
        _CACHE.popitem(last=False)


@dataclasses.dataclass
class Replacement:
    """`statement` (a node of the tree, reached through `path`) becomes `new`."""

    path: tuple[cst.CSTNode, ...]  # the module down to the statement, both included
    indents: tuple[str, ...]  # the indentation of each block the statement sits in
    new: cst.CSTNode

    @property
    def statement(self) -> cst.CSTNode:
        return self.path[-1]


def _rebuilt(module: cst.Module, edits: Sequence[Replacement]) -> tuple[cst.Module, dict[int, cst.CSTNode]]:
    """The module with each path's last node replaced: only the nodes on the paths are rebuilt
    (and each rebuilt node, by the id of the node it replaces)."""
    new: dict[int, cst.CSTNode] = {id(e.statement): e.new for e in edits}
    parents: dict[int, cst.CSTNode] = {}
    depth: dict[int, int] = {}
    for edit in edits:
        for level, node in enumerate(edit.path):
            depth[id(node)] = level
            if level:
                parents[id(node)] = edit.path[level - 1]
    changed = sorted(new, key=lambda key: depth[key], reverse=True)
    while changed:
        key = changed.pop(0)
        if key == id(module):
            break
        parent = parents[key]
        parent_new = new.get(id(parent), parent)
        new[id(parent)] = _with_child(parent_new, key, new[key])
        if id(parent) not in changed:
            changed.append(id(parent))
            changed.sort(key=lambda k: depth[k], reverse=True)
    result = new.get(id(module), module)
    assert isinstance(result, cst.Module)
    return result, new


def _with_child(parent: cst.CSTNode, old_id: int, child: cst.CSTNode) -> cst.CSTNode:
    for field in dataclasses.fields(parent):
        value = getattr(parent, field.name)
        if id(value) == old_id:
            return parent.with_changes(**{field.name: child})
        if isinstance(value, (list, tuple)) and any(id(item) == old_id for item in value):
            items = [child if id(item) == old_id else item for item in value]
            return parent.with_changes(**{field.name: type(value)(items)})
    raise AssertionError(f"{type(parent).__name__} does not hold the node it was walked to")


# ------------------------------------------------------------------ statements and lines


def _spans_of(text: str, module: cst.Module) -> dict[int, tuple[int, int]] | None:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None  # newer syntax than this Python reads, or deeper than it parses
    spans: dict[int, tuple[int, int]] = {}
    try:
        _zip(module.body, tree.body, spans)
    except SpansUnknown:
        return None
    return spans


def _zip(statements: Sequence[cst.CSTNode], nodes: Sequence[ast.stmt], spans: dict[int, tuple[int, int]]) -> None:
    at = 0
    for statement in statements:
        if isinstance(statement, cst.SimpleStatementLine):
            group = nodes[at:at + len(statement.body)]
            at += len(statement.body)
            if len(group) != len(statement.body):
                raise SpansUnknown
            spans[id(statement)] = (group[0].lineno, group[-1].end_lineno or group[-1].lineno)
            continue
        if at >= len(nodes):
            raise SpansUnknown
        node = nodes[at]
        at += 1
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        spans[id(statement)] = (first, node.end_lineno or node.lineno)
        for block, inner in _blocks(statement, node):
            _zip(block, inner, spans)
    if at != len(nodes):
        raise SpansUnknown


def _body(suite: cst.BaseSuite) -> Sequence[cst.CSTNode]:
    return suite.body if isinstance(suite, cst.IndentedBlock) else ()  # a one-line suite holds no lines of its own


def _blocks(statement: cst.CSTNode, node: ast.stmt) -> list[tuple[Sequence[cst.CSTNode], Sequence[ast.stmt]]]:
    """The statement lists inside a compound statement, paired with `ast`'s."""
    pairs: list[tuple[Sequence[cst.CSTNode], Sequence[ast.stmt]]] = []

    def pair(suite: cst.BaseSuite, inner: Sequence[ast.stmt]) -> None:
        if isinstance(suite, cst.IndentedBlock):
            pairs.append((suite.body, inner))

    def orelse(cst_else: cst.CSTNode | None, inner: Sequence[ast.stmt]) -> None:
        if isinstance(cst_else, cst.If):  # elif: an If of its own on both sides
            pairs.append(((cst_else,), inner))
        elif isinstance(cst_else, cst.Else):
            pair(cst_else.body, inner)

    if isinstance(statement, (cst.FunctionDef, cst.ClassDef, cst.With)) and \
            isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.With, ast.AsyncWith)):
        pair(statement.body, node.body)
    elif isinstance(statement, (cst.If, cst.For, cst.While)) and \
            isinstance(node, (ast.If, ast.For, ast.AsyncFor, ast.While)):
        pair(statement.body, node.body)
        orelse(statement.orelse, node.orelse)
    elif isinstance(statement, (cst.Try, cst.TryStar)) and isinstance(node, (ast.Try, ast.TryStar)):
        pair(statement.body, node.body)
        if len(statement.handlers) != len(node.handlers):
            raise SpansUnknown
        for handler, ast_handler in zip(statement.handlers, node.handlers):
            assert isinstance(handler, (cst.ExceptHandler, cst.ExceptStarHandler))
            pair(handler.body, ast_handler.body)
        orelse(statement.orelse, node.orelse)
        if statement.finalbody is not None:
            pair(statement.finalbody.body, node.finalbody)
    elif isinstance(statement, cst.Match) and isinstance(node, ast.Match):
        if len(statement.cases) != len(node.cases):
            raise SpansUnknown
        for case, ast_case in zip(statement.cases, node.cases):
            pair(case.body, ast_case.body)
    elif not isinstance(statement, cst.SimpleStatementLine) and _has_blocks(node):
        raise SpansUnknown  # a compound statement the two trees do not pair up
    return pairs


def _has_blocks(node: ast.stmt) -> bool:
    return any(isinstance(getattr(node, name, None), list) for name in ("body", "orelse", "handlers", "cases"))


_STATEMENT, _BLOCK = 1, 2  # flags
_ROLES: dict[type, int] = {}


def _role(cls: type) -> int:
    """What a node class is to a walk, found once per class (ABC isinstance checks cost a pass
    more than the visit itself): a statement, a block that indents, or both (a match indents
    its cases)."""
    role = _ROLES.get(cls)
    if role is None:
        role = (_STATEMENT if issubclass(cls, Statement) else 0) | \
            (_BLOCK if issubclass(cls, (cst.IndentedBlock, cst.Match)) else 0)
        _ROLES[cls] = role
    return role


class Walk:
    """What a pass keeps while it visits: the nodes down to here, the blocks' indentation,
    and (when pruning) which statements it may skip. Mixed into visitors and transformers."""

    def start_walk(self, tree: SourceTree | None, needles: Sequence[str] = ()) -> None:
        self._walk_tree = tree
        self._walk_path: list[cst.CSTNode] = []
        self._walk_statements: list[int] = []  # indexes into path of the statements being visited
        self._walk_indents: list[str] = []
        self._walk_lines: list[int] | None = None
        self._walk_skipped: set[int] = set()
        self.pruned = False
        if FAST and tree is not None and needles and tree.spans is not None:
            self._walk_lines = tree.needle_lines(needles)

    def _worth_visiting(self, node: cst.CSTNode, statement: bool) -> bool:
        if self._walk_lines is None or self._walk_tree is None or not statement:
            return True
        span = self._walk_tree.spans.get(id(node)) if self._walk_tree.spans is not None else None
        if span is None:
            return True
        i = bisect.bisect_left(self._walk_lines, span[0])
        if i < len(self._walk_lines) and self._walk_lines[i] <= span[1]:
            return True
        self.pruned = True
        return False

    def walk_visit(self, node: cst.CSTNode) -> bool:
        """on_visit's share: False when the node (a statement no needle is in) is skipped."""
        if self.enter(node):
            return True
        self._walk_skipped.add(id(node))
        return False

    def walk_leave(self, node: cst.CSTNode) -> bool:
        """on_leave's share: False when the node was skipped (nothing of it to leave)."""
        self.leave(node)
        if id(node) in self._walk_skipped:
            self._walk_skipped.discard(id(node))
            return False
        return True

    def enter(self, node: cst.CSTNode) -> bool:
        self._walk_path.append(node)
        role = _role(type(node))
        if role & _STATEMENT:
            self._walk_statements.append(len(self._walk_path) - 1)
        if role & _BLOCK:
            module = self._walk_path[0]
            default = module.default_indent if isinstance(module, cst.Module) else "    "
            indent = node.indent  # type: ignore[attr-defined]
            self._walk_indents.append(default if indent is None else indent)
        return self._worth_visiting(node, bool(role & _STATEMENT))

    def leave(self, node: cst.CSTNode) -> None:
        self._walk_path.pop()
        role = _role(type(node))
        if role & _STATEMENT:
            self._walk_statements.pop()
        if role & _BLOCK:
            self._walk_indents.pop()

    def where(self) -> Location | None:
        """The path down to the innermost statement being visited, and its indentation."""
        if not self._walk_statements:
            return None
        return tuple(self._walk_path[:self._walk_statements[-1] + 1]), tuple(self._walk_indents)

    def route(self) -> tuple[cst.CSTNode, ...]:
        """The nodes from the innermost statement down to the node being visited."""
        return tuple(self._walk_path[self._walk_statements[-1]:]) if self._walk_statements else ()

    def never_runs(self) -> str:
        """The branch around the node being visited that never runs, as a message names it
        (`if TYPE_CHECKING:`), or "" when it may run. Type checkers read such a branch; the
        interpreter does not."""
        path = self._walk_path
        for node, child in zip(path, path[1:]):
            if not isinstance(node, cst.If):
                continue
            if child is node.body and _never_true(node.test):
                return f"`if {_code(node.test)}:`"
            if child is node.orelse and isinstance(child, cst.Else) and _never_true(node.test, negated=True):
                return f"the `else:` of `if {_code(node.test)}:`"
        return ""


def _never_true(test: cst.BaseExpression, negated: bool = False) -> bool:
    """`TYPE_CHECKING`, `typing.TYPE_CHECKING` (any module's) and `False` are false when the
    code runs; `not` turns that round (negated: the test is always true)."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return _never_true(test.expression, not negated)
    if isinstance(test, cst.Name):
        return test.value in (("True",) if negated else ("TYPE_CHECKING", "False"))
    return not negated and isinstance(test, cst.Attribute) and test.attr.value == "TYPE_CHECKING"


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node).strip()


def replacement(where: Location | None, node: cst.CSTNode, new: cst.CSTNode,
                route: Sequence[cst.CSTNode] = ()) -> Replacement | None:
    """`node` (inside the statement `where` ends at) becomes `new`: that statement, rebuilt.
    With the `route` from the statement down to the node, only the nodes on it are rebuilt,
    so the statements inside it stay the same nodes (and keep their spans)."""
    if where is None:
        return None
    path, indents = where
    statement = path[-1]
    if statement is node:
        return Replacement(path, indents, new)
    if len(route) > 1 and route[0] is statement and route[-1] is node:
        child = new
        for parent, old in zip(reversed(route[:-1]), reversed(route[1:])):
            child = _with_child(parent, id(old), child)
        return Replacement(path, indents, child)
    rebuilt = statement.deep_replace(node, new)
    return Replacement(path, indents, rebuilt) if isinstance(rebuilt, cst.CSTNode) else None
