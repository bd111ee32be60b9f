"""The fast route of the edit engine (patchkit/edits/tree.py) gives what the plain one gives.

The fast route parses a text once, visits only the statements a target's words occur in,
and splices the changed statement's code into the old text. Every edit here is computed
both ways (`tree.FAST = False`: visit everything, print the module) and must agree to the
byte, verdict and message included, on layouts chosen to trip a splice: comments and
decorators above a statement, nested blocks of every kind, one-line suites, semicolons,
backslashes, tabs, CRLF, strings that span lines, no newline at the end.
"""

from __future__ import annotations

import sys

from collections.abc import Iterator
from typing import Any

import libcst
import pytest

from patchkit.edits import Edit, EditResult, tree

TRICKY = '''\
#!/usr/bin/env python
"""Module docstring mentioning limit = 1 and helper()."""
# a header comment
limit = 1
import os; count = 2; os.sep  # semicolons


# comments above, blank lines too
@decorator(helper(arg=1))  # a call in a decorator
# a comment between decorators
@other
class Config(Base, metaclass=helper(meta=True)):
    """Docstring: limit = 3 is not code."""

    limit = 3

    def method(self, timeout=helper(t=1)):
        if timeout:
            self.limit = 4
        elif count:
            self.limit = 5  # trailing comment
        else:
            # comment before
            self.limit = 6
        for item in range(3):
            total = helper(item)
        else:
            total = 0
        while False:
            pass
        else:
            retries = helper(3)
        try:
            value = helper(1)
        except ValueError as exc:
            value = helper(2)
        except (TypeError, KeyError):
            value = helper(3)
        else:
            value = 7
        finally:
            cleanup = helper(4)
        with open(os.sep) as f, helper(ctx=1):
            text = """spans
limit = 99 inside a string
lines"""
        match text:
            case "a":
                chosen = helper(5)
            case _:
                chosen = 8
        if timeout: quick = helper(6)
        width = \\
            helper(7)
        return [1, 2,
                3]

    async def other(self):
        async with helper(a=2) as x:
            result = await helper(8)
        return x


def top(a=1, *, b=helper(9)):
    def inner():
        nested = helper(10)
        return nested
    return inner
last = helper(11)'''

EDITS: list[dict[str, Any]] = [
    {"set_value": {"names": ["limit"], "within": "<module>", "value": 10}},
    {"set_value": {"names": ["count"], "value": 20}},
    {"set_value": {"names": ["limit"], "within": "Config", "value": 30}},
    {"set_value": {"names": ["self.limit"], "within": "Config.method", "occurrence": 1, "value": 40}},
    {"set_value": {"names": ["self.limit"], "within": "Config.method", "occurrence": 2, "value": 50}},
    {"set_value": {"names": ["self.limit"], "within": "Config.method", "occurrence": 3, "value": 60}},
    {"set_value": {"names": ["self.limit"], "all": True, "value": 0}},
    {"set_value": {"names": ["total"], "within": "Config.method", "occurrence": 2, "value": 1}},
    {"set_value": {"names": ["retries"], "value": 1}},
    {"set_value": {"names": ["value"], "within": "Config.method", "occurrence": 4, "value": 1}},
    {"set_value": {"names": ["cleanup"], "value": 1}},
    {"set_value": {"names": ["text"], "value": "short"}},
    {"set_value": {"names": ["chosen"], "within": "Config.method", "occurrence": 2, "value": 1}},
    {"set_value": {"names": ["quick"], "value": 1}},
    {"set_value": {"names": ["width"], "value": 1}},
    {"set_value": {"names": ["result"], "value": 1}},
    {"set_value": {"names": ["nested"], "within": "top.inner", "value": 1}},
    {"set_value": {"names": ["last"], "value": 1}},
    {"set_value": {"target": "return", "within": "Config.method", "value": [4]}},
    {"list_insert": {"target": "return", "within": "Config.method", "values": [4], "after": 2}},
    {"set_value": {"target": "default", "within": "Config.method", "arg": "timeout", "value": 5}},
    {"set_value": {"target": "default", "within": "top", "arg": "b", "value": 5}},
    {"call_kwarg": {"callee": "helper", "keyword": "arg", "value": 2, "occurrence": 1}},
    {"call_kwarg": {"callee": "helper", "keyword": "meta", "value": False, "occurrence": 2}},
    {"call_kwarg": {"callee": "helper", "keyword": "ctx", "value": 2, "occurrence": 13}},
    {"call_kwarg": {"callee": "helper", "keyword": "extra", "value": 1, "all": True}},
    {"call_kwarg": {"callee": "open", "keyword": "encoding", "value": "utf-8"}},
    {"replace_function": {"function": "Config.other", "body": "return None"}},
    {"replace_function": {"function": "top.inner", "body": "return 1"}},
    {"replace_function": {"function": "top", "body": "return 2"}},
    # failures: the messages must not lose what only a full pass sees
    {"set_value": {"names": ["limt"], "value": 1}},
    {"set_value": {"names": ["self.limit"], "value": 1}},
    {"set_value": {"names": ["limit"], "within": "Confg", "value": 1}},
    {"call_kwarg": {"callee": "helpr", "keyword": "k", "value": 1}},
    {"call_kwarg": {"callee": "helper", "keyword": "k", "value": 1, "occurrence": 40}},
    {"replace_function": {"function": "Config.methd", "body": "pass"}},
    {"set_value": {"target": "default", "within": "top", "arg": "c", "value": 5}},
]

VARIANTS = {
    "spaces": TRICKY,
    "tabs": TRICKY.replace("    ", "\t"),
    "crlf": TRICKY.replace("\n", "\r\n"),
    "final newline": TRICKY + "\n",
}


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    tree._CACHE.clear()
    yield
    tree.FAST = True
    tree._CACHE.clear()


def both_routes(edit: Edit, source: str) -> tuple[EditResult, EditResult]:
    tree._CACHE.clear()
    fast = edit.apply(source)
    tree.FAST = False
    tree._CACHE.clear()
    try:
        plain = edit.apply(source)
    finally:
        tree.FAST = True
    return fast, plain


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("spec", EDITS, ids=lambda s: f"{next(iter(s))}:{s[next(iter(s))]}"[:80])
def test_the_fast_route_gives_what_the_plain_one_gives(spec: dict[str, Any], variant: str) -> None:
    source = VARIANTS[variant]
    fast, plain = both_routes(Edit.model_validate(spec), source)
    assert (fast.verdict, fast.message) == (plain.verdict, plain.message)
    assert fast.source == plain.source


def test_every_tricky_edit_does_something() -> None:
    """The table is not vacuous: edits succeed (and the failures fail) as listed."""
    verdicts = [Edit.model_validate(spec).apply(TRICKY).verdict for spec in EDITS]
    assert verdicts == ["changed"] * 30 + ["not_found"] * 7


def test_the_splice_is_what_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the spaces layout every changed edit is spliced, none printed whole, except where
    the plain route is the right one: several places in one statement (`all: true` on
    nested calls), and the last statement of a file without a final newline."""
    printed = []
    monkeypatch.setattr(libcst.Module, "code", property(lambda m: printed.append(1) or m.code_for_node(m)))
    plain = [spec for spec in EDITS[:30] if "'extra'" in str(spec) or "'last'" in str(spec)]
    assert len(plain) == 2
    for spec in EDITS[:30]:
        tree._CACHE.clear()
        del printed[:]
        assert Edit.model_validate(spec).apply(TRICKY).verdict == "changed"
        assert bool(printed) == (spec in plain), spec


def test_one_parse_per_file_version(monkeypatch: pytest.MonkeyPatch) -> None:
    parses = []
    real = libcst.parse_module

    def counting(source: str, *args: Any, **kwargs: Any) -> libcst.Module:
        if len(source) > 200:  # the file, not a value or a body being parsed
            parses.append(source)
        return real(source, *args, **kwargs)

    monkeypatch.setattr(tree.cst, "parse_module", counting)
    edits = [Edit.model_validate(spec) for spec in EDITS[:6]]
    for edit in edits:  # five steps planned against one version: one parse
        assert edit.apply(TRICKY).verdict == "changed"
    assert len(parses) == 1
    text = TRICKY
    for edit in edits:  # each applied on the last one's result: the tree is handed on
        text = edit.apply(text).source
    assert len(parses) == 1
    assert text != TRICKY and "limit = 10" in text and "self.limit = 60" in text


# Syntax libcst reads that an older `ast` cannot: PEP 695 (3.12), PEP 750 t-strings and
# PEP 758 unparenthesized `except A, B` (3.14). Each test run takes one this Python cannot read.
NEWER_SYNTAX = [
    ((3, 12), '''\
type Alias = list[int]
def pick[T](items: list[T]) -> T:
    limit = 1
    return items[0]
'''),
    ((3, 14), '''\
greeting = t"hello {name}"
def pick(items):
    limit = 1
    try:
        return items[0]
    except IndexError, KeyError:
        return None
'''),
]


def unreadable_here() -> str:
    """A file this Python's `ast` cannot parse, but libcst can."""
    import ast

    for _, source in NEWER_SYNTAX:
        try:
            ast.parse(source)
        except SyntaxError:
            return source
    pytest.fail(f"every sample of NEWER_SYNTAX parses on Python {sys.version_info[:2]}: add newer syntax")


def test_a_file_this_python_cannot_read_takes_the_plain_route() -> None:
    """An `ast` that cannot read the file (newer syntax; libcst can): no spans, so no pruning
    and no splice, and the edit is still right."""
    source = unreadable_here()
    result = Edit.model_validate({"set_value": {"names": ["limit"], "value": 2}}).apply(source)
    assert result.verdict == "changed"
    assert result.source == source.replace("limit = 1", "limit = 2")
    assert tree.SourceTree.of(source).spans is None


@pytest.mark.parametrize(("spec", "words"), [
    ({"set_value": {"names": ["self.limit"], "within": "Config.method", "occurrence": 1, "expr": "await helper()"}},
     "'await' outside async function, line 19"),
    ({"set_value": {"names": ["limit"], "within": "Config", "expr": "(yield)"}}, "'yield' outside function, line 15"),
    ({"set_value": {"names": ["nested"], "within": "top.inner", "expr": "await y"}},
     "'await' outside async function, line 66"),
    ({"set_value": {"names": ["count"], "expr": "await helper()"}}, "'await' outside function, line 5"),
])
def test_a_result_that_does_not_compile_is_caught_compiling_only_what_changed(spec: dict[str, Any], words: str) -> None:
    """The fast route compiles the changed def (or statement) alone, inside `if 1:` blocks as
    deep as it sits; what it catches, and the line it names, is what compiling the file gives."""
    from patchkit.edits import EditBug

    messages = []
    for fast in (True, False):
        tree.FAST = fast
        tree._CACHE.clear()
        with pytest.raises(EditBug, match="does not compile") as caught:
            Edit.model_validate(spec).apply(TRICKY)
        messages.append(str(caught.value))
    assert messages[0] == messages[1] and words in messages[0], messages


def test_the_compile_check_of_a_splice_is_the_unit_s(monkeypatch: pytest.MonkeyPatch) -> None:
    """A spliced result is compiled as its unit (a few lines), not as the whole file."""
    compiled: list[int] = []
    real = compile

    def counting(source: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(source, str) and args and args[0] == "<patched>":
            compiled.append(len(source.splitlines()))
        return real(source, *args, **kwargs)

    import builtins

    monkeypatch.setattr(builtins, "compile", counting)
    for spec, lines in (({"set_value": {"names": ["count"], "value": 3}}, 1),  # a module-level statement
                        ({"set_value": {"names": ["retries"], "value": 1}}, 1 + 41)):  # `if 1:` + Config.method
        del compiled[:]
        tree._CACHE.clear()
        assert Edit.model_validate(spec).apply(TRICKY).verdict == "changed"
        assert compiled == [lines]


def test_the_kept_trees_stay_within_their_budget() -> None:
    """Trees cost ~290 times their text: big texts push the oldest out, the newest stays."""
    big = ["".join(f"v{n}_{i} = {i}\n" for i in range(40_000)) for n in range(4)]  # ~0.5 MB each
    for text in big:
        tree.SourceTree.of(text)
    kept = list(tree._CACHE)
    assert kept[-1] == big[-1] and sum(map(len, kept)) <= tree._KEEP_TEXT + len(big[-1])
    assert len(kept) < len(big)
    small = [f"x = {i}\n" for i in range(10)]
    for text in small:
        tree.SourceTree.of(text)
    assert len(tree._CACHE) == tree._KEEP and list(tree._CACHE)[-1] == small[-1]
