"""Where an edit applies: the places its target matches, and which of them are edited.

The rule, for every op: a target must match exactly one place. When it matches several,
the edit changes nothing and fails (verdict `not_found`) naming every place (line, scope,
code) and the ways to choose:
- `within: Class.method` names one scope exactly; scopes nested in it count only with
  `nested: true` (without `within`: the whole file);
- a target is matched as written: `x` is not `self.x`, `self.x` is not `other.x`;
- `occurrence: N` edits the Nth place (1-based, in source order);
- `all: true` edits every place, and the message says how many changed.

One pass finds the places and edits each of them as it goes (what a single match or
`all` needs); `occurrence` redoes its one place from the original, so that no edit of
another place can ride along (a call inside a call).
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import libcst as cst

from patchkit.edits.base import (
    EditError,
    EditRefused,
    EditResult,
    Layout,
    ScopedTransformer,
    ast_dump,
    code_of,
    scope_matches,
    snippet,
)
from patchkit.edits.model import AMBIGUOUS
from patchkit.edits.paths import ValueOp, call_arg_index, edit_at
from patchkit.edits.targets import Choose, Where
from patchkit.edits.tree import Location, SourceTree, replacement


Rebuilt = tuple[cst.CSTNode, str] | None  # (the rebuilt node, what was done), None: already in place


@dataclass
class Place:
    order: int  # in source order
    node: cst.CSTNode  # the original node the edit rebuilds (statement, call, parameter)
    scope: str
    new: cst.CSTNode | None = None  # the rebuilt node; None: nothing to change there
    note: str = ""
    error: str | None = None
    refusal: str | None = None  # an EditRefused: the edit, if this place is chosen, fails on it
    dead: str = ""  # the branch it sits in that never runs (`if TYPE_CHECKING:`), else ""
    avoid: str = ""  # quotes of the f-strings it sits in
    where: Location | None = None  # the statement it sits in (path, indentation): how its edit is written
    route: tuple[cst.CSTNode, ...] = ()  # the nodes from that statement down to `node`
    inside: Place | None = None  # the place whose node holds this one's (`f(a=f(a=1))`)
    changes_before: int = 0  # the places changed when it was found: more at its end, one inside it changed


def _holds(node: cst.CSTNode, wanted: cst.CSTNode) -> bool:
    """`wanted` (by identity) is `node` or in its subtree: an inner place's edit survived."""
    return node is wanted or any(_holds(child, wanted) for child in node.children)


def dotted_name(node: cst.BaseExpression) -> str | None:
    """`a.b.c` for a chain of plain names, else None (a call, a subscript, a string)."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        inner = dotted_name(node.value)
        return f"{inner}.{node.attr.value}" if inner else None
    return None


def last_name(node: cst.BaseExpression) -> str:
    """`b` of `a.b` and of `f().b`; "" when the expression does not end in a name (`d["k"]`)."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return node.attr.value
    return ""


class Expressions:
    """Expressions as a recipe writes them (`self.x`, `super().__init__`), matched by meaning."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.dotted: set[str] = set()
        self.dumps: set[str] = set()
        self.last_names: set[str] = set()
        self.needles: list[str] = []  # per expression its longest name: in the code of every match
        for text in texts:
            tree = ast.parse(text.strip(), mode="eval").body
            names = [n.id if isinstance(n, ast.Name) else n.attr
                     for n in ast.walk(tree) if isinstance(n, (ast.Name, ast.Attribute))]
            self.needles.append(max(names, key=len) if names else "")
            name = _ast_dotted(tree)
            if name is not None:
                self.dotted.add(name)
            else:
                self.dumps.add(ast.dump(tree))
            self.last_names.add(_ast_last(tree))

    def match(self, node: cst.BaseExpression) -> tuple[str | None, bool]:
        """(how the node reads, whether it is one of ours); (None, False) when it cannot be."""
        name = dotted_name(node)
        if name is not None:
            return name, name in self.dotted
        if not self.dumps or last_name(node) not in self.last_names:
            return None, False
        try:
            dump = ast_dump(node)
        except SyntaxError:
            return None, False
        return snippet(node, 40), dump in self.dumps


def _ast_dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _ast_dotted(node.value)
        return f"{inner}.{node.attr}" if inner else None
    return None


def _ast_last(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


class Locator(ScopedTransformer):
    """Finds the places of one kind of target (a subclass each) and edits them as it leaves."""

    def __init__(self, choice: Choose) -> None:
        super().__init__(choice.within, choice.nested)
        self.choice = choice
        self.places: list[Place] = []
        self._open: dict[int, Place] = {}
        self._changes = 0  # places changed so far in the pass
        self.elsewhere: dict[str, str] = {}  # what matched outside the scope -> where
        self.nested_in: dict[str, str] = {}  # what matched in a scope nested in `within` -> where
        self.unit = "    "
        self.layout = Layout()
        self._fstring_quotes: list[str] = []

    # --- what a subclass says
    def describe(self) -> str:
        raise NotImplementedError

    def ambiguity_hint(self) -> str:
        """More ways to pick one place than how_to_choose names, for this kind of target."""
        return ""

    def rebuild(self, node: cst.CSTNode) -> Rebuilt:
        """The node with the edit made (EditError: it cannot be), None when already in place."""
        raise NotImplementedError

    def near_misses(self) -> list[str]:
        return []

    def needles(self) -> list[str]:
        """Words one of which is on a line of every place (a pass skips statements without
        any); none: visit everything."""
        return []

    # --- bookkeeping
    def visit_Module(self, node: cst.Module) -> None:
        self.unit = node.default_indent

    def visit_FormattedString(self, node: cst.FormattedString) -> None:
        self._fstring_quotes.append(node.start[-1])

    def leave_FormattedString(self, original: cst.FormattedString, updated: cst.FormattedString) -> cst.FormattedString:
        self._fstring_quotes.pop()
        return updated

    def candidate(self, node: cst.CSTNode, target: str, qualname: str | None = None) -> None:
        """`node` matches the target; it is a place if it is in scope."""
        q = self.qualname if qualname is None else qualname
        where = q or "<module>"
        if not scope_matches(q, self.within, self.nested):
            if self.within is not None and scope_matches(q, self.within, True):
                self.nested_in.setdefault(target, where)
            else:
                self.elsewhere.setdefault(target, where)
            return
        inside = next(reversed(self._open.values()), None)  # the places still open hold this one
        place = Place(len(self.places), node, where, avoid="".join(sorted(set(self._fstring_quotes))),
                      dead=self.never_runs(), where=self.where(), route=self.route(), inside=inside,
                      changes_before=self._changes)
        self.places.append(place)
        self._open[id(node)] = place

    def finish(self, original: cst.CSTNode, updated: cst.CSTNode) -> cst.CSTNode:
        place = self._open.pop(id(original), None)
        if place is None:
            return updated
        self._edit(place, updated)
        if place.new is None:
            return updated
        if self._changes > place.changes_before:  # a place inside it changed: say what the file had
            new, note = place.new, place.note
            self._edit(place, original)
            place.new, place.note, place.error = new, place.note or note, None
        self._changes += 1
        return place.new

    def _edit(self, place: Place, node: cst.CSTNode) -> None:
        place.new, place.note, place.error, place.refusal = None, "", None, None
        self.layout = Layout(self.unit, place.avoid)
        try:
            edited = self.rebuild(node)
        except EditRefused as exc:
            place.refusal = str(exc)
            return
        except EditError as exc:
            place.error = str(exc)
            return
        if edited is not None:
            where = f" in {place.scope}" if place.scope != "<module>" else ""
            done, warning, rest = edited[1].partition(" (warning: ")  # the place, then what it warns of
            place.new, place.note = edited[0], done + where + warning + rest

    def scope_words(self) -> str:
        return f" within {self.within}" if self.within else ""

    def not_found_message(self) -> str:
        parts = [f"no {self.describe()}{self.scope_words()}"]
        hint = self.scope_hint()
        if hint:
            parts.append(hint)
        if self.nested_in:
            found = ", ".join(f"{t} in {s}" for t, s in sorted(self.nested_in.items()))
            parts.append(f"found {found} (a scope nested in {self.within}: add `nested: true`)")
        parts.extend(self.near_misses())
        return "; ".join(parts)


def _lines(tree: SourceTree, places: Sequence[Place]) -> dict[int, int]:
    """Line numbers, for a message: each from its own statement (SourceTree.lines_of)."""
    lines = tree.lines_of([(p.where, p.node) for p in places])
    return {p.order: line for p, line in zip(places, lines)}


LISTED = 8  # places a message quotes; the others are counted, with their lines (a file may hold dozens)


def list_places(tree: SourceTree, places: Sequence[Place]) -> str:
    lines = _lines(tree, places)
    listed = "; ".join(
        f"{i}) line {lines[p.order]} in {p.scope}: `{snippet(p.node)}`"
        + (f" (cannot be edited: {p.error})" if p.error else "")
        for i, p in enumerate(places[:LISTED], 1)
    )
    rest = places[LISTED:]
    if not rest:
        return listed
    more = [str(lines[p.order]) for p in rest]
    shown = ", ".join(more[:20]) + (", ..." if len(more) > 20 else "")
    return f"{listed}; and {len(rest)} more (lines {shown})"


def how_to_choose(scopes: Sequence[str]) -> str:
    text = "say which with `occurrence: N` (1-based, in the order listed), or `all: true` to edit every one"
    distinct = list(dict.fromkeys(scopes))
    if len(distinct) > 1:
        text += f", or name one scope with `within:` ({', '.join(distinct)})"
    return text


def ambiguity(what: str, tree: SourceTree, places: Sequence[Place], hint: str = "") -> str:
    return (f"{what}{AMBIGUOUS}it matches {len(places)} places: {list_places(tree, places)}; "
            + how_to_choose([p.scope for p in places]) + hint)


def run_locator(source: str, make: Callable[[], Locator]) -> EditResult:
    """Find the places and edit the chosen ones. First only the statements holding a needle
    are visited; when that finds nothing to do, everything is (for the full message)."""
    tree = SourceTree.of(source)
    locator = make()
    if locator.needles():
        locator.start_walk(tree, locator.needles())
        result = _run_locator(tree, locator)
        if locator.places or not locator.pruned:  # every place is on a needle's line: all were found
            return result
        locator = make()
    locator.start_walk(tree)
    return _run_locator(tree, locator)


def _run_locator(tree: SourceTree, locator: Locator) -> EditResult:
    source, module = tree.text, tree.module
    edited_all = module.visit(locator)
    places, choice = locator.places, locator.choice
    what = locator.describe() + locator.scope_words()
    if not places:
        return EditResult("not_found", source, locator.not_found_message())
    if choice.occurrence is not None:
        if choice.occurrence > len(places):
            return EditResult("not_found", source, (
                f"occurrence {choice.occurrence} asked, but the {what} matches {len(places)} "
                f"place{'s' if len(places) > 1 else ''}: {list_places(tree, places)}"))
        chosen = [places[choice.occurrence - 1]]
        if len(places) > 1:
            locator._edit(chosen[0], chosen[0].node)  # from the original: only this place's edit
    elif choice.all or len(places) == 1:
        chosen = places
    else:
        return EditResult("not_found", source, ambiguity(what, tree, places, locator.ambiguity_hint()))

    refused = [p for p in chosen if p.refusal]
    if refused:
        return EditResult("not_found", source, refused[0].refusal or "", refused=True)
    failed = [p for p in chosen if p.error]
    if failed:
        lines = _lines(tree, failed)
        problems = "; ".join(f"line {lines[p.order]} in {p.scope}: {p.error}" for p in failed)
        return EditResult("not_found", source, f"cannot edit the {what}: {problems}")
    changed = [p for p in chosen if p.new is not None]
    if not changed:
        return EditResult("already", source, "already in place")
    outermost, covered = _outermost(changed)
    kept = [p for p in changed if p not in covered]  # not inside a value another edit replaced
    message = "; ".join(p.note for p in kept)
    if choice.occurrence is not None:
        message += f" (occurrence {choice.occurrence} of {len(places)})"
    elif choice.all and len(places) > 1:
        rest = len(places) - len(changed)
        message += (f" ({len(kept)} of {len(places)} places changed (all: true)"
                    + (f", {len(covered)} inside a value replaced at another" if covered else "")
                    + (f", {rest} already in place)" if rest else ")"))
    message += dead_code_warning([p.dead for p in kept])
    # an outer place's new node holds the edits of the places inside it
    edits = [replacement(p.where, p.node, p.new, p.route) for p in outermost if p.new is not None]
    ready = [e for e in edits if e is not None]
    if len(ready) == len(outermost) and tree.can_replace(ready):
        return EditResult("changed", tree.replace(ready)[0], message)
    # places inside one another: the pass's own result holds every edit at once
    if len(chosen) == len(places):
        new_module = edited_all
    else:
        new_module = module.deep_replace(changed[0].node, changed[0].new)  # type: ignore[arg-type]
    return EditResult("changed", tree.adopt(new_module), message)


def dead_code_warning(branches: Sequence[str]) -> str:
    """A warning when every place an edit changed sits in a branch that never runs."""
    if not branches or not all(branches):
        return ""
    distinct = list(dict.fromkeys(branches))
    return (f" (warning: {'it sits' if len(branches) == 1 else 'they sit'} under {' and '.join(distinct)}, "
            f"which never run{'s' if len(distinct) == 1 else ''}: the edit has no effect at run time)")


def _outermost(changed: Sequence[Place]) -> tuple[list[Place], list[Place]]:
    """The changed places no other changed place holds, and the changed places whose edit
    is gone: inside a value that an outer place's edit replaced (`f(a=f(a=1))`, a=2)."""
    ids = {id(p) for p in changed}
    outermost, covered = [], []
    for place in changed:
        outer, up = None, place.inside
        while up is not None:
            if id(up) in ids:
                outer = up
            up = up.inside
        if outer is None:
            outermost.append(place)
        elif outer.new is not None and place.new is not None and not _holds(outer.new, place.new):
            covered.append(place)
    return outermost, covered


# ------------------------------------------------------------------ the target kinds


class AssignmentLocator(Locator):
    """`x = v`, `x: T = v`, `a = x = v`, `x += v`, `x |= v`; `self.x`, `d["k"]` as written."""

    def __init__(self, spec: Where, op: ValueOp) -> None:
        super().__init__(spec)
        self.spec, self.op = spec, op
        self.targets = Expressions(spec.names or [])
        self.names_in_scope: dict[str, str] = {}  # other targets assigned in scope -> value kind

    def describe(self) -> str:
        return "assignment to " + " or ".join(self.spec.names or [])

    def needles(self) -> list[str]:
        return [] if "" in self.targets.needles else self.targets.needles

    def _consider(self, node: cst.CSTNode, targets: Sequence[cst.BaseExpression], value: cst.BaseExpression) -> None:
        found = None
        for target in targets:
            text, ours = self.targets.match(target)
            if ours:
                found = text
            elif text is not None and self.in_scope():
                self.names_in_scope.setdefault(text, type(value).__name__)
        if found is not None:
            self.candidate(node, found)

    def visit_Assign(self, node: cst.Assign) -> None:
        self._consider(node, [t.target for t in node.targets], node.value)

    def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
        return self.finish(original, updated)  # type: ignore[return-value]

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._consider(node, [node.target], node.value)

    def leave_AnnAssign(self, original: cst.AnnAssign, updated: cst.AnnAssign) -> cst.AnnAssign:
        return self.finish(original, updated)  # type: ignore[return-value]

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if isinstance(node.operator, (cst.AddAssign, cst.BitOrAssign)):
            self._consider(node, [node.target], node.value)

    def leave_AugAssign(self, original: cst.AugAssign, updated: cst.AugAssign) -> cst.AugAssign:
        return self.finish(original, updated)  # type: ignore[return-value]

    def rebuild(self, node: cst.CSTNode) -> Rebuilt:
        assert isinstance(node, (cst.Assign, cst.AnnAssign, cst.AugAssign)) and node.value is not None
        replaces = getattr(self.op, "replaces_value", False)  # set_value: the value goes, not a part of it
        if isinstance(node, cst.AugAssign) and replaces:
            name, operator = code_of(node.target).strip(), code_of(node.operator).strip()
            raise EditError(f"`{snippet(node)}` is an augmented assignment ({operator}): it changes {name}'s value, "
                            f"it does not give {name} one; set_value refuses it (list_insert, list_remove and "
                            "dict_set edit the display it adds)")
        others = self._other_targets(node)
        if others and replaces and not self.spec.path:
            raise EditError(f"`{snippet(node)}` also assigns {', '.join(others)}: setting the value would set "
                            f"{'it' if len(others) == 1 else 'them'} too; add {', '.join(others)} to `names` "
                            "to set every one, or split the statement")
        edited = edit_at(node.value, self.spec.path, self.op, self.layout)
        if edited is None:
            return None
        note = edited[1]
        if others:  # one object for every name of the chain: changing it changes theirs
            note += f" (the statement also assigns {', '.join(others)}: {'its' if len(others) == 1 else 'their'} " \
                    "value changes too)"
        return node.with_changes(value=edited[0]), note

    def _other_targets(self, node: cst.Assign | cst.AnnAssign | cst.AugAssign) -> list[str]:
        """The names of a chained assignment (`x = y = 1`) that are not targeted."""
        if not isinstance(node, cst.Assign) or len(node.targets) < 2:
            return []
        return [code_of(t.target).strip() for t in node.targets if not self.targets.match(t.target)[1]]

    def not_found_message(self) -> str:
        parts = [f"no {self.describe()}{self.scope_words()}"]
        hint = self.scope_hint()
        if hint:
            parts.append(hint)
        if self.elsewhere:
            parts.append("found " + ", ".join(f"{n} in {s}" for n, s in sorted(self.elsewhere.items())))
        if self.nested_in:
            found = ", ".join(f"{t} in {s}" for t, s in sorted(self.nested_in.items()))
            parts.append(f"found {found} (a scope nested in {self.within}: add `nested: true`)")
        wanted = self.spec.names or []
        last = {n.rsplit(".", 1)[-1] for n in wanted}
        collection_kinds = {"List", "Tuple", "Set", "Dict"}
        similar = [
            name for name, kind in self.names_in_scope.items()
            if kind in collection_kinds or name.rsplit(".", 1)[-1] in last
            or difflib.get_close_matches(name, wanted, n=1, cutoff=0.6)
        ]
        if similar:
            parts.append("found " + ", ".join(sorted(similar)))
        qualified = sorted(n for n in similar if n not in wanted and n.rsplit(".", 1)[-1] in last)
        if qualified:
            parts.append(f"a target matches only as written: names: [{qualified[0]}]")
        return "; ".join(parts)


class CallLocator(Locator):
    """Calls whose callee reads as one of `callees` (by meaning: quotes and spaces aside)."""

    def __init__(self, choice: Choose, callees: Sequence[str]) -> None:
        super().__init__(choice)
        self.callees = list(callees)
        self.wanted = Expressions(callees)
        self.others: dict[str, str] = {}  # calls of the same last name, e.g. torch.compile -> scope

    def visit_Call(self, node: cst.Call) -> None:
        if last_name(node.func) not in self.wanted.last_names:
            return
        text, ours = self.wanted.match(node.func)
        if ours:
            self.candidate(node, text or "")
        elif text is not None:
            self.others.setdefault(text, self.scope_name)

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        return self.finish(original, updated)  # type: ignore[return-value]

    def needles(self) -> list[str]:
        return [] if "" in self.wanted.needles else self.wanted.needles

    def near_misses(self) -> list[str]:
        parts = []
        if self.elsewhere:
            parts.append("found calls in " + ", ".join(sorted(set(self.elsewhere.values()))))
        if self.others:
            found = ", ".join(f"{t} in {s}" for t, s in sorted(self.others.items()))
            parts.append(f"found calls to {found} (a callee matches only as written)")
        return parts


class CallArgLocator(CallLocator):
    def __init__(self, spec: Where, op: ValueOp) -> None:
        super().__init__(spec, spec.callees)
        self.spec, self.op = spec, op

    def describe(self) -> str:
        return self.spec.describe_target()

    def ambiguity_hint(self) -> str:
        # The calls differ by what surrounds them, e.g. one per key of a dict of lambdas
        # (`env = {"A": lambda: os.environ.get("A", "1"), ...}`): a path names the one meant.
        return ("; or reach the one call through the value that holds it: `target: assignment` with "
                "`names: [NAME]` and `path: [KEY, ...]` (a dict key, an index, an argument; a `lambda:` on "
                "the way is looked through)")

    def rebuild(self, node: cst.CSTNode) -> Rebuilt:
        assert isinstance(node, cst.Call)
        index = call_arg_index(node, self.spec.arg)
        if index is None:
            words = f"keyword {self.spec.arg}" if isinstance(self.spec.arg, str) else f"positional argument {self.spec.arg}"
            raise EditError(f"the call passes no {words}")
        arg = node.args[index]
        edited = edit_at(arg.value, self.spec.path, self.op, self.layout)
        if edited is None:
            return None
        args = list(node.args)
        args[index] = arg.with_changes(value=edited[0])
        return node.with_changes(args=args), edited[1]


class ReturnLocator(Locator):
    def __init__(self, spec: Where, op: ValueOp) -> None:
        super().__init__(spec)
        self.spec, self.op = spec, op

    def describe(self) -> str:
        return "return statement with a value"

    def needles(self) -> list[str]:
        return ["return"]

    def visit_Return(self, node: cst.Return) -> None:
        if node.value is not None:
            self.candidate(node, "return")

    def leave_Return(self, original: cst.Return, updated: cst.Return) -> cst.Return:
        return self.finish(original, updated)  # type: ignore[return-value]

    def rebuild(self, node: cst.CSTNode) -> Rebuilt:
        assert isinstance(node, cst.Return) and node.value is not None
        edited = edit_at(node.value, self.spec.path, self.op, self.layout)
        return None if edited is None else (node.with_changes(value=edited[0]), edited[1])


class DefaultLocator(Locator):
    """The default of parameter `arg` of a def; its scope is the def itself (`within: C.f`)."""

    def __init__(self, spec: Where, op: ValueOp) -> None:
        super().__init__(spec)
        self.spec, self.op = spec, op
        self._owners: list[str | None] = []  # the def (qualname) or lambda (None) whose parameters these are
        self.params_in_scope: set[str] = set()

    def describe(self) -> str:
        return f"parameter {self.spec.arg} with a default"

    def needles(self) -> list[str]:
        return [str(self.spec.arg)] if self.spec.arg else []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        super().visit_FunctionDef(node)
        self._owners.append(".".join([*self.scope, node.name.value]))

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        self._owners.pop()
        return updated

    def visit_Lambda(self, node: cst.Lambda) -> None:
        self._owners.append(None)

    def leave_Lambda(self, original: cst.Lambda, updated: cst.Lambda) -> cst.Lambda:
        self._owners.pop()
        return updated

    def visit_Param(self, node: cst.Param) -> None:
        owner = self._owners[-1] if self._owners else None
        if owner is None or node.default is None:
            return
        if node.name.value == self.spec.arg:
            self.candidate(node, f"{node.name.value}=", qualname=owner)
        elif scope_matches(owner, self.within, self.nested):
            self.params_in_scope.add(node.name.value)

    def leave_Param(self, original: cst.Param, updated: cst.Param) -> cst.Param:
        return self.finish(original, updated)  # type: ignore[return-value]

    def rebuild(self, node: cst.CSTNode) -> Rebuilt:
        assert isinstance(node, cst.Param) and node.default is not None
        edited = edit_at(node.default, self.spec.path, self.op, self.layout)
        return None if edited is None else (node.with_changes(default=edited[0]), edited[1])

    def near_misses(self) -> list[str]:
        parts = []
        if self.elsewhere:
            parts.append("found it in " + ", ".join(sorted(set(self.elsewhere.values()))))
        if self.params_in_scope:
            parts.append("parameters with defaults there: " + ", ".join(sorted(self.params_in_scope)))
        return parts


def value_locator(spec: Where, op: ValueOp) -> Locator:
    kinds = {"assignment": AssignmentLocator, "call_arg": CallArgLocator,
             "return": ReturnLocator, "default": DefaultLocator}
    return kinds[spec.target](spec, op)


def run_value_edit(spec: Where, op: ValueOp, source: str) -> EditResult:
    return run_locator(source, lambda: value_locator(spec, op))


