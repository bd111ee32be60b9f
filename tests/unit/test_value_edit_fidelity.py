"""The value edits say exactly what they change, and change nothing else.

Each case here was a hand probe of an outside fidelity run: an edit that changed more than
its message said (`x += 5`, `x = y = 1`), a recipe error reported as a patchkit bug, a byte
lost on a line the edit did not touch, a message naming text that never existed.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path
from typing import Any

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider
from loadercheck import usage_error
from pydantic import ValidationError

from patchkit.edits import Edit, EditResult
from patchkit.edits import tree as tree_module
from patchkit.edits.testing import assert_idempotent, assert_refused
from patchkit.edits.tree import SourceTree, Walk
from patchkit.recipe.model import load_recipe
from tests.helpers import tree_walk


def run(kind: str, source: str, **params: Any) -> EditResult:
    return Edit.model_validate({kind: params}).apply(source)


changed = assert_idempotent  # changes, compiles, and a second apply is `already` (patchkit.edits.testing)
refused = assert_refused  # changes nothing and fails: its message


@pytest.fixture(params=[True, False], ids=["splice", "whole-print"])
def route(request: pytest.FixtureRequest) -> Any:
    """Both ways an edit's text is written: spliced statements, and the module printed whole."""
    with tree_walk(request.param):
        yield request.param


# ------------------------------------------------------------------ 13: augmented assignments


class TestAugmentedAssignment:
    @pytest.mark.parametrize("source, operator", [("x += 5\n", "+="), ("x |= {'a'}\n", "|=")])
    def test_set_value_refuses_it_naming_the_operator(self, source: str, operator: str) -> None:
        message = refused("set_value", source, names=["x"], value=3)
        assert message == (
            f"cannot edit the assignment to x: line 1 in <module>: `{source.strip()}` is an augmented "
            f"assignment ({operator}): it changes x's value, it does not give x one; set_value refuses it "
            "(list_insert, list_remove and dict_set edit the display it adds)")

    def test_it_stays_a_place_so_a_plain_assignment_is_not_edited_behind_it(self) -> None:
        source = "x = 1\nif extra:\n    x += 5\n"
        message = refused("set_value", source, names=["x"], value=3)
        assert message.startswith("assignment to x is ambiguous: it matches 2 places: 1) line 1 in <module>: "
                                  "`x = 1`; 2) line 3 in <module>: `x += 5` (cannot be edited: `x += 5` is an "
                                  "augmented assignment (+=)")
        assert changed("set_value", source, names=["x"], value=3, occurrence=1).source == \
            "x = 3\nif extra:\n    x += 5\n"

    def test_the_list_and_dict_ops_still_edit_the_display_it_adds(self) -> None:
        assert changed("list_insert", "x += ['a']\n", names=["x"], values=["b"]).source == "x += ['a', 'b']\n"
        assert changed("dict_set", "d |= {'a': 1}\n", names=["d"], key="b", value=2).source == \
            "d |= {'a': 1, 'b': 2}\n"


# ------------------------------------------------------------------ 14: chained assignments


class TestChainedAssignment:
    def test_set_value_on_one_name_of_a_chain_is_refused(self) -> None:
        message = refused("set_value", "x = y = 1\n", names=["x"], value=3)
        assert message == ("cannot edit the assignment to x: line 1 in <module>: `x = y = 1` also assigns y: "
                           "setting the value would set it too; add y to `names` to set every one, or split "
                           "the statement")

    def test_every_name_targeted_sets_them_all_and_says_so(self) -> None:
        result = changed("set_value", "x = self.y = 1\n", names=["x", "self.y"], value=3)
        assert (result.source, result.message) == ("x = self.y = 3\n", "set x/self.y = 3 (was 1)")

    def test_a_change_inside_the_shared_value_names_the_other_names(self) -> None:
        result = changed("list_insert", "x = y = [1]\n", names=["x"], values=[2])
        assert (result.source, result.message) == (
            "x = y = [1, 2]\n", "added 2 at the end (the statement also assigns y: its value changes too)")
        result = changed("set_value", "x = y = z = {'a': 1}\n", names=["x"], path=["a"], value=2)
        assert result.message == "set x['a'] = 2 (was 1) (the statement also assigns y, z: their value changes too)"


# ------------------------------------------------------------------ 15: call_kwarg keywords


RECIPE = """\
name: t
steps:
  - name: s
    patch:
      package: pkg
      modules: [pkg.mod]
      edit:
        call_kwarg: {{callee: f, keyword: {keyword}, value: 1}}
"""


class TestKwargKeyword:
    @pytest.mark.parametrize("keyword, problem", [
        ("class", "keyword 'class' is a Python keyword: no call can pass it and no parameter has it"),
        ("None", "keyword 'None' is a Python keyword: no call can pass it and no parameter has it"),
        ('"a b"', "keyword 'a b' is not a Python name"),
        ('""', "keyword '' is not a Python name"),
        ('"1x"', "keyword '1x' is not a Python name"),
    ])
    def test_a_recipe_error_at_its_place(self, tmp_path: Path, keyword: str, problem: str) -> None:
        path = tmp_path / "r.yaml"
        path.write_text(RECIPE.format(keyword=keyword))
        message = usage_error(load_recipe, path)[0]
        assert message == f"{path}:8:33: steps[0].patch.edit.call_kwarg.keyword: {problem}"

    def test_soft_keywords_are_names(self) -> None:
        assert changed("call_kwarg", "f()\n", callee="f", keyword="match", value=1).source == "f(match=1)\n"

    def test_arg_of_call_arg_and_default_takes_names_only(self) -> None:
        with pytest.raises(ValidationError, match="`arg` 'class' is a Python keyword"):
            Edit.model_validate({"set_value": {"target": "call_arg", "callee": "f", "arg": "class", "value": 1}})


# ------------------------------------------------------------------ 16: form feeds


class TestFormFeeds:
    """libcst drops a form feed from a statement's indentation when it prints the module;
    every route keeps the file's bytes on the lines an edit does not change."""

    def test_a_crlf_file(self, route: bool) -> None:
        source = "x = 1\r\n\x0cy = 2\r\n\x0cdef f():\r\n    return 1\r\n"
        assert changed("set_value", source, names=["x"], value=3).source == source.replace("x = 1", "x = 3")

    def test_nested_places_in_one_statement(self, route: bool) -> None:
        source = "\x0cdef g():\n\x0c    return f(f(1))\n\x0cz = f()\n"
        result = changed("call_kwarg", source, callee="f", keyword="k", value=1, all=True)
        assert result.source == "\x0cdef g():\n\x0c    return f(f(1, k=1), k=1)\n\x0cz = f(k=1)\n"

    def test_places_in_a_def_and_in_its_body(self, route: bool) -> None:
        source = "\x0cdef g(a=f()):\n\x0c    f()\n\x0cz = 1\n"
        result = changed("call_kwarg", source, callee="f", keyword="k", value=1, all=True)
        assert result.source == "\x0cdef g(a=f(k=1)):\n\x0c    f(k=1)\n\x0cz = 1\n"

    def test_on_the_edited_line_itself(self, route: bool) -> None:
        source = "class A:\n    x = 1\n\x0c    y = 2\n"
        assert changed("set_value", source, names=["y"], value=3).source == "class A:\n    x = 1\n\x0c    y = 3\n"


# ------------------------------------------------------------------ 17: `**o` after the key


class TestDictOverrides:
    def test_a_later_double_star_is_named(self) -> None:
        result = changed("dict_set", "d = {'a': 1, **o}\n", names=["d"], key="a", value=2)
        assert (result.source, result.message) == (
            "d = {'a': 2, **o}\n", "set key 'a' to 2 (warning: `**o` after it may override it at run time)")

    def test_a_later_operand_of_a_merge_is_named(self) -> None:
        result = changed("dict_set", "d = {'a': 1} | extra\n", names=["d"], key="b", value=2)
        assert result.message == "added key 'b': 2 (warning: `| extra` after it may override it at run time)"

    def test_what_comes_before_cannot_override(self) -> None:
        assert changed("dict_set", "d = {**o, 'a': 1}\n", names=["d"], key="a", value=2).message == "set key 'a' to 2"
        assert changed("dict_set", "d = o | {'a': 1}\n", names=["d"], key="b", value=2).message == "added key 'b': 2"


# ------------------------------------------------------------------ 18: nested places, all: true


class TestNestedPlaces:
    def test_messages_name_the_original_text(self, route: bool) -> None:
        result = changed("set_value", "f(a=f(a=1))\n", target="call_arg", callee="f", arg="a", value=2, all=True)
        assert result.source == "f(a=2)\n"
        assert result.message == ("set f(a=) = 2 (was f(a=1)) (1 of 2 places changed (all: true), "
                                  "1 inside a value replaced at another)")

    def test_inner_edits_that_stay_are_each_reported(self, route: bool) -> None:
        result = changed("set_value", "f(a=1, b=f(a=3))\n", target="call_arg", callee="f", arg="a", value=2,
                         all=True)
        assert (result.source, result.message) == (
            "f(a=2, b=f(a=2))\n", "set f(a=) = 2 (was 1); set f(a=) = 2 (was 3) (2 of 2 places changed (all: true))")

    def test_an_outer_set_value_names_the_inner_value_as_it_was(self, route: bool) -> None:
        result = changed("set_value", "f(a=g(f(a=1)))\n", target="call_arg", callee="f", arg="a", expr="h()",
                         all=True)
        assert result.message.startswith("set f(a=) = h() (was g(f(a=1)))")


# ------------------------------------------------------------------ 19: byte for byte, cosmetics


class TestLayoutKept:
    @pytest.mark.parametrize("before, after", [
        ("f(a, )\n", "f(a, b=1, )\n"),
        ("f(a,)\n", "f(a, b=1,)\n"),
        ("f(a, c,)\n", "f(a, c, b=1,)\n"),
        ("f(a, c)\n", "f(a, c, b=1)\n"),
    ])
    def test_a_trailing_comma_stays(self, before: str, after: str) -> None:
        assert changed("call_kwarg", before, callee="f", keyword="b", value=1).source == after

    @pytest.mark.parametrize("before, value, after", [
        ('x = ("a", "b")\n', "p", 'x = "p"\n'),
        ("x = (i for i in y)\n", 1, "x = 1\n"),
        ('x = ("a", "b")\n', ["p"], 'x = ["p"]\n'),
        ('x = ( "a", "b" )\n', ("p", "q"), 'x = ( "p", "q" )\n'),
        ("x = (1)\n", 2, "x = (2)\n"),
    ])
    def test_a_tuple_s_parentheses_go_with_it(self, before: str, value: Any, after: str) -> None:
        spec = {"expr": repr(value)} if isinstance(value, tuple) else {"value": value}
        result = changed("set_value", before, names=["x"], **spec)
        assert result.source.replace("'", '"') == after
        assert isinstance(ast.parse(result.source).body[0].value, ast.Tuple) == isinstance(value, tuple)  # type: ignore[attr-defined]


# ------------------------------------------------------------------ 20: line numbers from the statement


class _Nodes(Walk, cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.start_walk(None)
        self.found: list[tuple[Any, cst.CSTNode]] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.enter(node)
        if isinstance(node, (cst.Call, cst.Assign, cst.Param, cst.Name, cst.Return)):
            self.found.append((self.where(), node))
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.leave(original_node)


TRICKY = textwrap.dedent('''\
    # a comment

    @decorate(f(1),
              g(2))
    # between decorators
    @other
    def h(a=f(3), *, b=(
            4)):
        """doc"""
        x = f(
            a,
            b=g(5),
        ); y = f(6)
        if x: f(7)
        class C:

            z = [f(i) for i in
                 range(3)]
        return f(8) if y else g(
            9)
    \x0cw = f(10)
    match w:
        case 1:
            f(11)
''')


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_lines_from_the_statement_agree_with_a_full_position_pass(newline: str) -> None:
    """Refusals name places by line; those lines come from printing only each place's
    statement (a full position pass cost 5x a parse): every node's line must be the same."""
    text = TRICKY.replace("\n", newline)
    tree = SourceTree(text, cst.parse_module(text))
    visitor = _Nodes()
    tree.module.visit(visitor)
    positions = MetadataWrapper(tree.module, unsafe_skip_copy=True).resolve(PositionProvider)
    assert len(visitor.found) > 40
    assert tree.lines_of(visitor.found) == [positions[node].start.line for _, node in visitor.found]
    assert all(tree._line_in_statement(where, node) is not None for where, node in visitor.found)


def test_an_ambiguity_names_each_line(route: bool) -> None:
    source = "def a():\n    log.info(\n        'x')\n\n\nclass B:\n    @log.info(2)\n    def m(self):\n        return log.info(1)\n"
    message = refused("call_kwarg", source, callee="log.info", keyword="k", value=1)
    assert message.startswith("call to log.info is ambiguous: it matches 3 places: 1) line 2 in a: "
                              "`log.info( …`; 2) line 7 in B: `log.info(2)`; 3) line 9 in B.m: `log.info(1)`")


# ------------------------------------------------------------------ 20: spans moved, not re-read

CHAIN = textwrap.dedent('''\
    import os

    LIMITS = {"a": 1}


    class Runner:
        def __init__(self, size=4):
            self.size = size
            self.flags = [
                "x",
            ]
            if check(self.size):
                log(
                    "sized",
                )
                self.mode = "fast"

        def run(self):
            return log("run")


    def tail():
        log("tail")
        return [1]
''')

STEPS: list[dict[str, Any]] = [
    {"list_insert": {"names": ["self.flags"], "values": ["y"]}},  # adds a line inside __init__
    {"call_kwarg": {"callee": "check", "keyword": "k", "value": 1}},  # an if's test: its body is inside
    {"call_kwarg": {"callee": "log", "keyword": "level", "value": 2, "occurrence": 1}},  # multi-line: a line more
    {"set_value": {"names": ["self.mode"], "value": "slow"}},
    {"set_value": {"target": "default", "within": "Runner.__init__", "arg": "size", "value": 8}},  # the def itself
    {"replace_function": {"function": "Runner.run", "body": "x = 1\nreturn log('run', x)\n"}},  # deep_replace
    {"dict_set": {"names": ["LIMITS"], "key": "b", "value": 2}},
    {"call_kwarg": {"callee": "log", "keyword": "level", "value": 3, "occurrence": 3}},  # in tail(), after all
    {"list_insert": {"target": "return", "within": "tail", "values": [2]}},
]


def test_moved_spans_are_where_ast_puts_each_statement() -> None:
    """After a splice the new text's statement spans are moved from the old ones (an `ast`
    pass of the file costs a tenth of a parse per edit): each must equal ast's, and the
    next edit splices again."""
    tree_module._CACHE.clear()
    source, moved = CHAIN, 0
    for step in STEPS:
        result = Edit.model_validate(step).apply(source)
        assert result.verdict == "changed", (step, result.message)
        new = tree_module._CACHE[result.source]
        assert new.parent is not None and new.parent.text == source
        assert new.units is not None, f"{step}: not spliced"
        if isinstance(new._spans, dict):
            moved += 1
            truth = tree_module._spans_of(new.text, new.module)
            assert truth is not None
            kept = {k: v for k, v in new._spans.items() if k in truth}
            assert kept == {k: truth[k] for k in kept}, step
            assert len(kept) >= len(truth) - 3, f"{step}: most statements keep a span"
        source = result.source
    assert moved == len(STEPS)
    compile(source, "chain", "exec")


def test_a_refusal_makes_one_pruned_pass_and_no_position_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """What made a refusal cost 5-6x a parse: a second walk over every statement (for a
    not-found message it did not need: the places were found) and a whole-module position
    pass for the lines. Neither may happen when the pruned pass found the places."""
    walks: list[tuple[str, ...]] = []
    start_walk = Walk.start_walk

    def counting(self: Walk, tree: SourceTree | None, needles: Any = ()) -> None:
        if tree is not None:
            walks.append(tuple(needles))
        start_walk(self, tree, needles)

    def no_position_pass(self: Any, provider: Any) -> Any:
        raise AssertionError("a whole-module position pass")

    monkeypatch.setattr(Walk, "start_walk", counting)
    monkeypatch.setattr(MetadataWrapper, "resolve", no_position_pass)
    source = "def a():\n    log.info(1)\n\n\nx = 1\ny = [\n    2,\n]\n\n\ndef b():\n    log.info(\n        2)\n"
    message = refused("call_kwarg", source, callee="log.info", keyword="k", value=1)
    assert "1) line 2 in a: `log.info(1)`; 2) line 12 in b: `log.info( …`" in message
    assert walks == [("info",)]
    walks.clear()
    assert "cannot edit" in refused("set_value", "x = 1\nz = 2\nx += 1\n", names=["x"], value=2, occurrence=2)
    assert walks == [("x",)]


def test_a_path_into_a_dict_warns_of_a_later_double_star_too() -> None:
    result = changed("set_value", "d = {'a': {'b': 1}, **o}\n", names=["d"], path=["a", "b"], value=2)
    assert (result.source, result.message) == (
        "d = {'a': {'b': 2}, **o}\n",
        "set d['a']['b'] = 2 (was 1) (warning: `**o` after 'a' may override it at run time)")
    assert changed("set_value", "d = {**o, 'a': 1}\n", names=["d"], path=["a"], value=2).message == \
        "set d['a'] = 2 (was 1)"
