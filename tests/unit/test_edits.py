"""Golden tests for the pure edit library: exact source in, exact source out.

Every edit is a pure function of source text, so each test shows the input, the
exact expected output, and (through `changed`) that a second apply finds nothing
left to do. Sections: helpers, then one per operation, then the properties every
operation shares (scopes, untouched code, idempotency, not-found messages).
"""

from __future__ import annotations

import difflib
import textwrap
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from patchkit.edits import EDIT_KINDS, OPS, Edit, EditBug, EditError, EditResult
from patchkit.edits.testing import assert_edit, assert_idempotent

# --------------------------------------------------------------------------- helpers


def code(text: str) -> str:
    """A source file written inline: dedented, without the leading newline."""
    return textwrap.dedent(text).lstrip("\n")


def run(kind: str, source: str, **params: Any) -> EditResult:
    return Edit.model_validate({kind: params}).apply(source)


def changed(kind: str, source: str, **params: Any) -> EditResult:
    """Apply once (must change), then again: the second apply must find it in place (the
    shipped harness, patchkit.edits.testing, also checks that the result compiles)."""
    return assert_idempotent(kind, source, **params)


def unchanged(kind: str, source: str, verdict: str, **params: Any) -> EditResult:
    """Apply and expect `verdict` ("already" or "not_found") with the source untouched."""
    if verdict == "already":
        return assert_edit(kind, source, source, **params)
    result = run(kind, source, **params)
    assert result.verdict == verdict, result.message
    assert result.source == source
    return result


def hunks(before: str, after: str) -> list[tuple[int, str, str]]:
    """(first line number, old lines, new lines) for each run of differing lines.

    Lines compare with their line endings, so every line not in a hunk is byte-identical.
    """
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    ops = difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes()
    return [(i1 + 1, "".join(a[i1:i2]), "".join(b[j1:j2])) for tag, i1, i2, j1, j2 in ops if tag != "equal"]


def insert(source: str, values: list[Any], names: list[str] | None = None, **params: Any) -> str:
    return changed("list_insert", source, names=names or ["x"], values=values, **params).source


def remove(source: str, values: list[Any], names: list[str] | None = None, **params: Any) -> str:
    return changed("list_remove", source, names=names or ["x"], values=values, **params).source


def set_value(source: str, names: list[str] | None = None, **params: Any) -> str:
    return changed("set_value", source, names=names or ["x"], **params).source


def dict_set(source: str, key: Any, names: list[str] | None = None, **params: Any) -> str:
    return changed("dict_set", source, names=names or ["d"], key=key, **params).source


def kwarg(source: str, keyword: str = "k", callee: str = "f", **params: Any) -> str:
    return changed("call_kwarg", source, callee=callee, keyword=keyword, **params).source


def test_helpers_detect_a_non_idempotent_edit_and_an_unexpected_verdict() -> None:
    # The helpers carry most assertions below, so they must be able to fail.
    with pytest.raises(AssertionError):
        changed("list_insert", 'x = ["a"]\n', names=["x"], values=["a"])  # already there
    with pytest.raises(AssertionError):
        unchanged("list_insert", 'x = ["a"]\n', "already", names=["x"], values=["b"])  # would change
    assert hunks("a\nb\nc\n", "a\nB\nc\n") == [(2, "b\n", "B\n")]
    assert hunks("a\r\n", "a\n") == [(1, "a\r\n", "a\n")]


# ----------------------------------------------------------------------- list_insert


class TestListInsertLayout:
    def test_one_line_list_stays_one_line(self) -> None:
        assert insert('x = ["a", "b"]\n', ["c"]) == 'x = ["a", "b", "c"]\n'

    def test_one_line_list_takes_several_values_in_order(self) -> None:
        assert insert("x = [1, 2]\n", [3, 4]) == "x = [1, 2, 3, 4]\n"

    def test_one_line_list_keeps_its_trailing_comma(self) -> None:
        assert insert("x = ['a', 'b',]\n", ["c"]) == "x = ['a', 'b', 'c',]\n"

    def test_one_line_list_keeps_its_odd_separator(self) -> None:
        assert insert('x = ["a",  "b"]\n', ["c"]) == 'x = ["a",  "b",  "c"]\n'

    def test_empty_list(self) -> None:
        assert insert("x = []\n", ["c"]) == 'x = ["c"]\n'

    def test_one_item_per_line_with_trailing_comma(self) -> None:
        before = code('''
            x = [
                "a",
                "b",
            ]
        ''')
        after = code('''
            x = [
                "a",
                "b",
                "c",
            ]
        ''')
        assert insert(before, ["c"]) == after

    def test_one_item_per_line_without_trailing_comma(self) -> None:
        before = code('''
            x = [
                "a",
                "b"
            ]
        ''')
        after = code('''
            x = [
                "a",
                "b",
                "c"
            ]
        ''')
        assert insert(before, ["c"]) == after

    def test_one_item_per_line_with_a_single_item(self) -> None:
        before = code('''
            x = [
                "a",
            ]
        ''')
        after = code('''
            x = [
                "a",
                "c",
                "d",
            ]
        ''')
        assert insert(before, ["c", "d"]) == after

    def test_one_item_per_line_takes_the_indentation_of_a_nested_scope(self) -> None:
        before = code('''
            class A:
                def f(self):
                    self.x = [
                        "a",
                    ]
        ''')
        after = code('''
            class A:
                def f(self):
                    self.x = [
                        "a",
                        "c",
                    ]
        ''')
        assert insert(before, ["c"], names=["self.x"]) == after

    def test_tab_indentation(self) -> None:
        before = 'if True:\n\tx = [\n\t\t"a",\n\t]\n'
        after = 'if True:\n\tx = [\n\t\t"a",\n\t\t"c",\n\t]\n'
        assert insert(before, ["c"]) == after

    def test_hanging_indent_continues_the_column(self) -> None:
        before = code('''
            x = ["a",
                 "b"]
        ''')
        after = code('''
            x = ["a",
                 "b",
                 "c"]
        ''')
        assert insert(before, ["c"]) == after

    def test_crlf_line_endings_are_followed(self) -> None:
        before = 'x = [\r\n    "a",\r\n]\r\ny = 1\r\n'
        after = 'x = [\r\n    "a",\r\n    "c",\r\n]\r\ny = 1\r\n'
        assert insert(before, ["c"]) == after

    def test_file_without_final_newline(self) -> None:
        assert insert('x = ["a"]', ["c"]) == 'x = ["a", "c"]'


class TestListInsertComments:
    def test_end_of_line_comments_stay_on_their_items(self) -> None:
        before = code('''
            x = [
                "a",  # first
                "b"  # second
            ]
        ''')
        after = code('''
            x = [
                "a",  # first
                "b",  # second
                "c"
            ]
        ''')
        assert insert(before, ["c"]) == after

    def test_end_of_line_comment_stays_when_inserting_after_its_item(self) -> None:
        before = code('''
            x = [
                "a",  # first
                "b",  # second
            ]
        ''')
        after = code('''
            x = [
                "a",  # first
                "c",
                "b",  # second
            ]
        ''')
        assert insert(before, ["c"], after="a") == after

    def test_comment_only_line_stays_in_front_of_the_item_it_describes(self) -> None:
        before = code('''
            x = [
                "a",  # first
                # about b
                "b",  # second
            ]
        ''')
        after = code('''
            x = [
                "a",  # first
                "c",
                # about b
                "b",  # second
            ]
        ''')
        assert insert(before, ["c"], after="a") == after

    def test_trailing_comment_only_line_stays_last(self) -> None:
        before = code('''
            x = [
                "a",
                # more models go here
            ]
        ''')
        after = code('''
            x = [
                "a",
                "c",
                # more models go here
            ]
        ''')
        assert insert(before, ["c"]) == after

    def test_comment_on_the_opening_bracket_line(self) -> None:
        before = code('''
            x = [  # models we accept
                "a",
            ]
        ''')
        after = code('''
            x = [  # models we accept
                "a",
                "c",
            ]
        ''')
        assert insert(before, ["c"]) == after

    def test_blank_line_between_groups_stays_in_front_of_the_next_group(self) -> None:
        before = code('''
            x = [
                "a",

                "b",
            ]
        ''')
        after = code('''
            x = [
                "a",
                "c",

                "b",
            ]
        ''')
        assert insert(before, ["c"], after="a") == after

    def test_comment_after_the_statement_survives(self) -> None:
        assert insert('x = ["a"]  # keep me\n', ["c"]) == 'x = ["a", "c"]  # keep me\n'


class TestListInsertQuotes:
    def test_double_quotes_followed(self) -> None:
        assert insert('x = ["a"]\n', ["c"]) == 'x = ["a", "c"]\n'

    def test_single_quotes_followed(self) -> None:
        assert insert("x = ['a']\n", ["c"]) == "x = ['a', 'c']\n"

    def test_first_plain_string_decides(self) -> None:
        assert insert("x = [1, 'a', \"b\"]\n", ["c"]) == "x = [1, 'a', \"b\", 'c']\n"

    def test_value_holding_the_list_quote_uses_the_other_quote(self) -> None:
        assert insert("x = ['a']\n", ["it's"]) == "x = ['a', \"it's\"]\n"

    def test_no_strings_to_follow_gives_double_quotes(self) -> None:
        assert insert("x = [1]\n", ["c"]) == 'x = [1, "c"]\n'


class TestListInsertShapes:
    def test_parenthesized_list(self) -> None:
        assert insert('x = (["a"])\n', ["c"]) == 'x = (["a", "c"])\n'

    def test_annotated_assignment(self) -> None:
        assert insert('x: list[str] = ["a"]\n', ["c"]) == 'x: list[str] = ["a", "c"]\n'

    def test_attribute_assignment(self) -> None:
        assert insert('self.x = ["a"]\n', ["c"], names=["self.x"]) == 'self.x = ["a", "c"]\n'

    def test_chained_assignment(self) -> None:
        assert insert('y = x = ["a"]\n', ["c"]) == 'y = x = ["a", "c"]\n'

    def test_tuple(self) -> None:
        assert insert('x = ("a", "b")\n', ["c"]) == 'x = ("a", "b", "c")\n'

    def test_one_tuple_loses_the_comma_only_the_single_element_needed(self) -> None:
        assert insert('x = ("a",)\n', ["c"]) == 'x = ("a", "c")\n'

    def test_one_tuple_one_item_per_line_keeps_its_trailing_comma(self) -> None:
        before = code('''
            x = (
                "a",
            )
        ''')
        after = code('''
            x = (
                "a",
                "c",
            )
        ''')
        assert insert(before, ["c"]) == after

    def test_empty_tuple_becomes_a_one_tuple(self) -> None:
        assert insert("x = ()\n", ["c"]) == 'x = ("c",)\n'

    def test_bare_tuple(self) -> None:
        assert insert('x = "a", "b"\n', ["c"]) == 'x = "a", "b", "c"\n'

    def test_set(self) -> None:
        assert insert('x = {"a", "b"}\n', ["c"]) == 'x = {"a", "b", "c"}\n'

    def test_set_one_item_per_line(self) -> None:
        before = code('''
            x = {
                "a",
                "b"
            }
        ''')
        after = code('''
            x = {
                "a",
                "b",
                "c"
            }
        ''')
        assert insert(before, ["c"]) == after

    def test_numbers(self) -> None:
        assert insert("x = [1, 2.5]\n", [3, 4.5, -1]) == "x = [1, 2.5, 3, 4.5, -1]\n"

    def test_none_and_booleans(self) -> None:
        assert insert("x = [False]\n", [None, True]) == "x = [False, None, True]\n"

    def test_non_literal_elements_are_kept_and_skipped(self) -> None:
        assert insert("x = [f(a), 'b', *rest]\n", ["c"]) == "x = [f(a), 'b', *rest, 'c']\n"


class TestListInsertAfter:
    def test_after_an_element_in_the_middle(self) -> None:
        result = assert_edit("list_insert", 'x = ["a", "b"]\n', 'x = ["a", "c", "b"]\n', names=["x"], values=["c"], after="a")
        assert result.message == "added 'c' after 'a'"

    def test_after_the_last_element(self) -> None:
        assert insert('x = ["a", "b"]\n', ["c"], after="b") == 'x = ["a", "b", "c"]\n'

    def test_several_values_after_an_element_keep_their_order(self) -> None:
        before = code('''
            x = [
                "a",
                "b",
            ]
        ''')
        after = code('''
            x = [
                "a",
                "c",
                "d",
                "b",
            ]
        ''')
        assert insert(before, ["c", "d"], after="a") == after

    def test_after_a_number(self) -> None:
        assert insert("x = (1, 2, 3)\n", [9], after=1) == "x = (1, 9, 2, 3)\n"

    def test_in_a_set(self) -> None:
        assert insert('x = {"a", "b"}\n', ["c"], after="a") == 'x = {"a", "c", "b"}\n'

    def test_missing_anchor_appends_and_says_so(self) -> None:
        result = assert_edit("list_insert", 'x = ["a", "b"]\n', 'x = ["a", "b", "c"]\n', names=["x"], values=["c"], after="zz")
        assert result.message == "added 'c' at the end ('zz' is not in the list)"

    def test_missing_anchor_in_a_one_item_per_line_list(self) -> None:
        before = code('''
            x = [
                "a",  # first
            ]
        ''')
        after = code('''
            x = [
                "a",  # first
                "c",
            ]
        ''')
        result = assert_edit("list_insert", before, after, names=["x"], values=["c"], after="afmoe")
        assert "'afmoe' is not in the list" in result.message


class TestListInsertAlreadyPresent:
    def test_present_value_gives_already(self) -> None:
        result = unchanged("list_insert", 'x = ["a", "c"]\n', "already", names=["x"], values=["c"])
        assert result.message == "already in place"

    def test_present_value_in_other_quotes_gives_already(self) -> None:
        unchanged("list_insert", "x = ['a', 'c']\n", "already", names=["x"], values=["c"])

    def test_present_number_gives_already(self) -> None:
        unchanged("list_insert", "x = (1, 2, 3)\n", "already", names=["x"], values=[2, 3])

    def test_only_the_missing_values_are_added(self) -> None:
        result = assert_edit("list_insert", 'x = ["a", "b"]\n', 'x = ["a", "b", "c", "d"]\n', names=["x"], values=["a", "c", "b", "d"])
        assert result.message == "added 'c', 'd' at the end"

    def test_a_value_asked_for_twice_is_added_once(self) -> None:
        assert insert('x = ["a"]\n', ["c", "c"]) == 'x = ["a", "c"]\n'

    def test_present_value_is_not_moved_to_the_anchor(self) -> None:
        unchanged("list_insert", 'x = ["c", "a"]\n', "already", names=["x"], values=["c"], after="a")


# ----------------------------------------------------------------------- list_remove


class TestListRemoveOneLine:
    def test_middle(self) -> None:
        assert remove('x = ["a", "b", "c"]\n', ["b"]) == 'x = ["a", "c"]\n'

    def test_first(self) -> None:
        assert remove('x = ["a", "b", "c"]\n', ["a"]) == 'x = ["b", "c"]\n'

    def test_last(self) -> None:
        assert remove('x = ["a", "b", "c"]\n', ["c"]) == 'x = ["a", "b"]\n'

    def test_last_with_trailing_comma_keeps_the_trailing_comma(self) -> None:
        assert remove("x = ['a', 'b',]\n", ["b"]) == "x = ['a',]\n"

    def test_several_values(self) -> None:
        result = assert_edit("list_remove", 'x = ["a", "b", "c", "d"]\n', 'x = ["a", "c"]\n', names=["x"], values=["d", "b"])
        assert result.message == "removed 'b', 'd'"

    def test_only_element(self) -> None:
        assert remove('x = ["a"]\n', ["a"]) == "x = []\n"

    def test_every_element(self) -> None:
        assert remove('x = ["a", "b"]\n', ["a", "b"]) == "x = []\n"

    def test_matched_by_value_not_by_quotes(self) -> None:
        assert remove("x = ['a', \"b\"]\n", ["b"]) == "x = ['a']\n"

    def test_numbers(self) -> None:
        assert remove("x = [1, 2.5, 3]\n", [2.5]) == "x = [1, 3]\n"

    def test_parenthesized_list(self) -> None:
        assert remove('x = (["a", 2])\n', [2]) == 'x = (["a"])\n'

    def test_absent_value_gives_already(self) -> None:
        result = unchanged("list_remove", 'x = ["a"]\n', "already", names=["x"], values=["z"])
        assert result.message == "already in place"


class TestListRemoveOneItemPerLine:
    def test_middle_with_trailing_comma(self) -> None:
        before = code('''
            x = [
                "a",
                "b",
                "c",
            ]
        ''')
        after = code('''
            x = [
                "a",
                "c",
            ]
        ''')
        assert remove(before, ["b"]) == after

    def test_last_without_trailing_comma(self) -> None:
        before = code('''
            x = [
                "a",
                "b",
                "c"
            ]
        ''')
        after = code('''
            x = [
                "a",
                "b"
            ]
        ''')
        assert remove(before, ["c"]) == after

    def test_neighbours_keep_their_end_of_line_comments(self) -> None:
        before = code('''
            x = [
                "a",  # first
                "b",  # second
                "c",  # third
            ]
        ''')
        after = code('''
            x = [
                "a",  # first
                "c",  # third
            ]
        ''')
        assert remove(before, ["b"]) == after

    def test_last_item_goes_with_its_comment_and_the_new_last_keeps_its_own(self) -> None:
        before = code('''
            x = [
                "a",  # first
                "b"  # second
            ]
        ''')
        after = code('''
            x = [
                "a"  # first
            ]
        ''')
        assert remove(before, ["b"]) == after

    def test_comment_only_line_goes_with_the_item_it_describes(self) -> None:
        before = code('''
            x = [
                "a",  # first
                # about b
                "b",  # second
                # about c
                "c",  # third
            ]
        ''')
        after = code('''
            x = [
                "a",  # first
                # about c
                "c",  # third
            ]
        ''')
        assert remove(before, ["b"]) == after

    def test_first_item_goes_with_the_comment_line_in_front_of_it(self) -> None:
        before = code('''
            x = [
                # about a
                "a",  # first
                "b",  # second
            ]
        ''')
        after = code('''
            x = [
                "b",  # second
            ]
        ''')
        assert remove(before, ["a"]) == after

    def test_trailing_comment_only_line_stays(self) -> None:
        before = code('''
            x = [
                "a",
                "b",
                # more models go here
            ]
        ''')
        after = code('''
            x = [
                "a",
                # more models go here
            ]
        ''')
        assert remove(before, ["b"]) == after

    def test_emptied_list_collapses_to_brackets(self) -> None:
        before = code('''
            x = [
                # about a
                "a",  # only
            ]
            y = 1
        ''')
        assert remove(before, ["a"]) == "x = []\ny = 1\n"

    def test_emptied_list_keeps_comments_that_were_not_its_items(self) -> None:
        before = code('''
            class A:
                x = [  # models we accept
                    "a",
                    "b",  # bee
                    # more models go here
                ]
                y = 1
        ''')
        after = code('''
            class A:
                x = [  # models we accept
                    # more models go here
                ]
                y = 1
        ''')
        assert remove(before, ["a", "b"]) == after


class TestListRemoveShapes:
    def test_tuple_down_to_a_one_tuple_keeps_the_needed_comma(self) -> None:
        assert remove('x = ("a", "b")\n', ["b"]) == 'x = ("a",)\n'

    def test_one_tuple_to_empty_tuple(self) -> None:
        assert remove('x = ("a",)\n', ["a"]) == "x = ()\n"

    def test_bare_tuple(self) -> None:
        assert remove('x = "a", "b", "c"\n', ["b"]) == 'x = "a", "c"\n'

    def test_only_element_of_a_bare_tuple_is_refused(self) -> None:
        result = unchanged("list_remove", 'x = "a",\n', "not_found", names=["x"], values=["a"])
        assert "removing the only element of an unparenthesized tuple" in result.message

    def test_set(self) -> None:
        assert remove('x = {"a", "b"}\n', ["a"]) == 'x = {"b"}\n'

    def test_only_element_of_a_set_is_refused_not_turned_into_a_dict(self) -> None:
        result = unchanged("list_remove", 'x = {"a"}\n', "not_found", names=["x"], values=["a"])
        assert "only element of a set" in result.message


# ------------------------------------------------------------------------- set_value


class TestSetValue:
    def test_string_keeps_single_quotes(self) -> None:
        result = assert_edit("set_value", "x = 'a'\n", "x = 'b'\n", names=["x"], value="b")
        assert result.message == "set x = 'b' (was 'a')"

    def test_string_keeps_double_quotes(self) -> None:
        assert set_value('x = "a"\n', value="b") == 'x = "b"\n'

    def test_parentheses_around_the_value_are_kept(self) -> None:
        assert set_value("x = ('a')\n", value="b") == "x = ('b')\n"

    def test_comment_after_the_value_is_kept(self) -> None:
        assert set_value("x = 2  # tuned on A100\n", value=3) == "x = 3  # tuned on A100\n"

    def test_annotated_assignment(self) -> None:
        assert set_value("x: int | None = 1\n", value=None) == "x: int | None = None\n"

    def test_attribute_in_a_method(self) -> None:
        before = code('''
            class C:
                def f(self):
                    self.max_len = 4
        ''')
        after = code('''
            class C:
                def f(self):
                    self.max_len = 8
        ''')
        result = assert_edit("set_value", before, after, names=["self.max_len"], value=8)
        assert result.message == "set self.max_len = 8 (was 4) in C.f"

    def test_chained_assignment_with_every_name_targeted(self) -> None:
        # one name alone is refused (test_value_edit_fidelity.py): the value would change for both
        assert set_value("a = x = 'a'\n", names=["x", "a"], value="b") == "a = x = 'b'\n"

    def test_list_of_numbers(self) -> None:
        assert set_value("x = []\n", value=[1, 2]) == "x = [1, 2]\n"

    def test_a_bool_is_not_the_same_literal_as_an_int(self) -> None:
        assert set_value("x = 1\n", value=True) == "x = True\n"

    def test_expr(self) -> None:
        assert set_value("x = None\n", expr="os.environ.get('A')") == "x = os.environ.get('A')\n"

    def test_same_value_gives_already(self) -> None:
        unchanged("set_value", "x = 'b'\n", "already", names=["x"], value="b")

    def test_same_value_in_other_quotes_gives_already(self) -> None:
        unchanged("set_value", 'x = "b"\n', "already", names=["x"], value="b")

    def test_same_expr_laid_out_differently_gives_already(self) -> None:
        unchanged("set_value", "x = os.environ.get('A')\n", "already", names=["x"], expr="os.environ.get( 'A' )")

    def test_value_and_expr_together_are_refused(self) -> None:
        with pytest.raises(ValidationError, match="exactly one of `value` or `expr`"):
            Edit.model_validate({"set_value": {"names": ["x"], "value": 1, "expr": "1"}})


# -------------------------------------------------------------------------- dict_set


class TestDictSet:
    def test_adds_a_key_on_one_line_in_the_dict_quotes(self) -> None:
        result = assert_edit("dict_set", "d = {'a': 1}\n", "d = {'a': 1, 'b': 2}\n", names=["d"], key="b", value=2)
        assert result.message == "added key 'b': 2"

    def test_changes_the_value_of_an_existing_key(self) -> None:
        result = assert_edit("dict_set", "d = {'a': 1, 'b': 2}\n", "d = {'a': 5, 'b': 2}\n", names=["d"], key="a", value=5)
        assert result.message == "set key 'a' to 5"

    def test_same_value_gives_already(self) -> None:
        unchanged("dict_set", "d = {'a': 1}\n", "already", names=["d"], key="a", value=1)

    def test_one_key_per_line_with_trailing_comma_and_comments(self) -> None:
        before = code('''
            d = {
                'a': 1,  # one
                # about b
                'b': 2,
            }
        ''')
        after = code('''
            d = {
                'a': 1,  # one
                # about b
                'b': 2,
                'c': 'x',
            }
        ''')
        assert dict_set(before, "c", value="x") == after

    def test_one_key_per_line_without_trailing_comma(self) -> None:
        before = code('''
            d = {
                "a": 1  # one
            }
        ''')
        after = code('''
            d = {
                "a": 1,  # one
                "b": "x"
            }
        ''')
        assert dict_set(before, "b", value="x") == after

    def test_changing_a_value_keeps_the_line_comment(self) -> None:
        before = code('''
            d = {
                "a": 1,  # one
            }
        ''')
        after = code('''
            d = {
                "a": 2,  # one
            }
        ''')
        assert dict_set(before, "a", value=2) == after

    def test_empty_dict(self) -> None:
        assert dict_set("d = {}\n", "b", value=2) == 'd = {"b": 2}\n'

    def test_splat_is_kept(self) -> None:
        assert dict_set("d = {**base, 'a': 1}\n", "b", value=2) == "d = {**base, 'a': 1, 'b': 2}\n"

    def test_parenthesized_dict(self) -> None:
        assert dict_set("d = ({'a': 1})\n", "b", value=2) == "d = ({'a': 1, 'b': 2})\n"

    def test_number_keys(self) -> None:
        assert dict_set("d = {1: 10, 2: 20}\n", 3, value=30) == "d = {1: 10, 2: 20, 3: 30}\n"

    def test_quote_style_follows_the_values_when_no_key_is_a_string(self) -> None:
        assert dict_set("d = {1: 'y', 2: 'z'}\n", 1, value="x") == "d = {1: 'x', 2: 'z'}\n"

    def test_a_replaced_string_keeps_its_own_quotes(self) -> None:
        assert dict_set("d = {'a': 1, 'b': \"y\"}\n", "b", value="z") == "d = {'a': 1, 'b': \"z\"}\n"

    def test_expr_value(self) -> None:
        assert dict_set("d = {'a': None}\n", "a", expr="foo(1)") == "d = {'a': foo(1)}\n"

    def test_same_expr_laid_out_differently_gives_already(self) -> None:
        unchanged("dict_set", "d = {'a': foo( 1 )}\n", "already", names=["d"], key="a", expr="foo(1)")

    def test_a_bool_is_not_the_same_value_as_an_int(self) -> None:
        assert dict_set("d = {'a': 1}\n", "a", value=True) == "d = {'a': True}\n"


# ------------------------------------------------------------------------ call_kwarg


class TestCallKwarg:
    def test_adds_a_keyword_on_one_line(self) -> None:
        result = assert_edit("call_kwarg", "y = f(a, b=2)\n", "y = f(a, b=2, k=1)\n", callee="f", keyword="k", value=1)
        assert result.message == "added k=1 in a call to f"

    def test_call_without_arguments(self) -> None:
        assert kwarg("y = f()\n", value=1) == "y = f(k=1)\n"

    def test_changes_an_existing_keyword(self) -> None:
        result = assert_edit("call_kwarg", "y = f(a, k=2)\n", "y = f(a, k=1)\n", callee="f", keyword="k", value=1)
        assert result.message == "set k=1 in a call to f"

    def test_same_value_gives_already(self) -> None:
        unchanged("call_kwarg", "y = f(a, k=1)\n", "already", callee="f", keyword="k", value=1)

    def test_same_expr_laid_out_differently_gives_already(self) -> None:
        unchanged("call_kwarg", "y = f(k=g( x ))\n", "already", callee="f", keyword="k", expr="g(x)")

    def test_string_value_follows_the_call_quotes(self) -> None:
        assert kwarg("y = f('a')\n", value="v") == "y = f('a', k='v')\n"

    def test_one_argument_per_line_with_trailing_comma(self) -> None:
        before = code('''
            y = f(
                a,  # first
                b=2,  # second
            )
        ''')
        after = code('''
            y = f(
                a,  # first
                b=2,  # second
                k=1,
            )
        ''')
        assert kwarg(before, value=1) == after

    def test_one_argument_per_line_without_trailing_comma(self) -> None:
        before = code('''
            y = f(
                a,
                b=2  # second
            )
        ''')
        after = code('''
            y = f(
                a,
                b=2,  # second
                k=1
            )
        ''')
        assert kwarg(before, value=1) == after

    def test_hanging_indent(self) -> None:
        before = code('''
            y = f(a,
                  b=2)
        ''')
        after = code('''
            y = f(a,
                  b=2,
                  k=1)
        ''')
        assert kwarg(before, value=1) == after

    def test_after_star_args(self) -> None:
        assert kwarg("y = f(a, *args, **kw)\n", value=1) == "y = f(a, *args, **kw, k=1)\n"

    def test_dotted_callee_matches_only_that_callee(self) -> None:
        before = "m = torch.compile(model)\nn = compile(model)\n"
        after = "m = torch.compile(model, dynamic=False)\nn = compile(model)\n"
        assert kwarg(before, "dynamic", "torch.compile", value=False) == after

    def test_a_bare_callee_does_not_match_an_attribute_call(self) -> None:
        result = unchanged("call_kwarg", "m = torch.compile(model)\n", "not_found", callee="compile",
                           keyword="dynamic", value=False)
        assert result.message == (
            "no call to compile; found calls to torch.compile in <module> (a callee matches only as written)"
        )

    def test_all_edits_every_matching_call_and_says_how_many(self) -> None:
        result = assert_edit("call_kwarg", "y = f(f(a))\n", "y = f(f(a, k=1), k=1)\n", callee="f", keyword="k", value=1, all=True)
        assert result.message == (
            "added k=1 in a call to f; added k=1 in a call to f (2 of 2 places changed (all: true))"
        )

    def test_occurrence_of_a_call_inside_a_call_edits_that_call_only(self) -> None:
        assert kwarg("y = f(f(a))\n", value=1, occurrence=1) == "y = f(f(a), k=1)\n"
        assert kwarg("y = f(f(a))\n", value=1, occurrence=2) == "y = f(f(a, k=1))\n"

    def test_other_callees_are_untouched(self) -> None:
        assert kwarg("y = g(f(a))\n", value=1) == "y = g(f(a, k=1))\n"


# ------------------------------------------------------------------- nested scopes

SCOPES = code('''
    supported = ["llama"]
    limits = {"llama": 1}
    timeout = 10
    build(model, strict=False)


    class SpeculativeConfig:
        supported = ["llama"]
        limits = {"llama": 1}
        timeout = 10

        def _verify_args(self):
            supported = ["llama", "qwen"]
            limits = {"llama": 1}
            timeout = 10
            build(model, strict=False)

        def other(self):
            supported = ["llama"]
            limits = {"llama": 1}
            timeout = 10
            build(model, strict=False)


    class DraftConfig:
        def _verify_args(self):
            supported = ["llama", "qwen"]
            limits = {"llama": 1}
            timeout = 10
            build(model, strict=False)
''')

WITHIN = "SpeculativeConfig._verify_args"


class TestOnlyTheWithinScopeChanges:
    def test_list_insert(self) -> None:
        after = changed("list_insert", SCOPES, names=["supported"], values=["kimi_k2"], within=WITHIN).source
        assert hunks(SCOPES, after) == [
            (13, '        supported = ["llama", "qwen"]\n', '        supported = ["llama", "qwen", "kimi_k2"]\n'),
        ]

    def test_list_remove(self) -> None:
        after = changed("list_remove", SCOPES, names=["supported"], values=["qwen"], within=WITHIN).source
        assert hunks(SCOPES, after) == [
            (13, '        supported = ["llama", "qwen"]\n', '        supported = ["llama"]\n'),
        ]

    def test_set_value(self) -> None:
        after = changed("set_value", SCOPES, names=["timeout"], value=60, within=WITHIN).source
        assert hunks(SCOPES, after) == [(15, "        timeout = 10\n", "        timeout = 60\n")]

    def test_dict_set(self) -> None:
        after = changed("dict_set", SCOPES, names=["limits"], key="kimi_k2", value=2, within=WITHIN).source
        assert hunks(SCOPES, after) == [
            (14, '        limits = {"llama": 1}\n', '        limits = {"llama": 1, "kimi_k2": 2}\n'),
        ]

    def test_call_kwarg(self) -> None:
        after = changed("call_kwarg", SCOPES, callee="build", keyword="strict", value=True, within=WITHIN).source
        assert hunks(SCOPES, after) == [
            (16, "        build(model, strict=False)\n", "        build(model, strict=True)\n"),
        ]

    def test_class_scope_is_the_class_body_only(self) -> None:
        result = changed("set_value", SCOPES, names=["timeout"], value=60, within="SpeculativeConfig")
        assert hunks(SCOPES, result.source) == [(10, "    timeout = 10\n", "    timeout = 60\n")]
        assert result.message == "set timeout = 60 (was 10) in SpeculativeConfig"

    def test_nested_takes_its_methods_too_but_not_other_classes(self) -> None:
        result = changed("set_value", SCOPES, names=["timeout"], value=60, within="SpeculativeConfig",
                         nested=True, all=True)
        assert hunks(SCOPES, result.source) == [
            (10, "    timeout = 10\n", "    timeout = 60\n"),
            (15, "        timeout = 10\n", "        timeout = 60\n"),
            (21, "        timeout = 10\n", "        timeout = 60\n"),
        ]
        assert result.message == (
            "set timeout = 60 (was 10) in SpeculativeConfig; "
            "set timeout = 60 (was 10) in SpeculativeConfig._verify_args; "
            "set timeout = 60 (was 10) in SpeculativeConfig.other (3 of 3 places changed (all: true))"
        )

    def test_no_within_means_the_whole_file(self) -> None:
        after = changed("set_value", SCOPES, names=["timeout"], value=60, all=True).source
        assert [line for line, _, _ in hunks(SCOPES, after)] == [3, 10, 15, 21, 29]

    def test_module_scope_is_the_top_level_only(self) -> None:
        after = changed("set_value", SCOPES, names=["timeout"], value=60, within="<module>").source
        assert hunks(SCOPES, after) == [(3, "timeout = 10\n", "timeout = 60\n")]

    def test_full_text_of_a_scoped_insert(self) -> None:
        before = code('''
            x = ["a"]


            class C:
                x = ["a"]

                def f(self):
                    x = [
                        "a",
                    ]
                    return x
        ''')
        after = code('''
            x = ["a"]


            class C:
                x = ["a"]

                def f(self):
                    x = [
                        "a",
                        "b",
                    ]
                    return x
        ''')
        assert insert(before, ["b"], within="C.f") == after


# ------------------------------------------------------- untouched code elsewhere

MODULE = code('''
    # -*- coding: utf-8 -*-
    """A module with formatting nobody would choose twice."""
    from typing import (
        Any,   Optional ,  # odd spacing
    )
    x=1;y  =  ( 2 )
    names = [ 'a' ,"b" ]   # mixed quotes, odd spacing
    long = "one" \\
        "two"
    _table = {
        1:'x',
            2 : "y",   # over-indented
    }


    class SpeculativeConfig:

        def _verify_args(self) -> None:
            # Eagle3 targets
            eagle3_target_supported = [
                "llama",
                "qwen",  # since 0.10
                "afmoe",
            ]
            if self.method == "eagle3" and \\
                    self.model not in eagle3_target_supported:
                raise ValueError( f"no {self.model!r}" )
            self.timeout  = 10
            self.build( model , strict = False )   # trailing
            return  None
    # a comment at the end, no blank line before it
''')


class TestUntouchedCodeIsByteIdentical:
    def test_list_insert_after_an_anchor(self) -> None:
        after = insert(MODULE, ["kimi_k2", "deepseek_v3"], names=["eagle3_target_supported"], within=WITHIN,
                       after="afmoe")
        assert hunks(MODULE, after) == [(24, "", '            "kimi_k2",\n            "deepseek_v3",\n')]

    def test_list_insert_after_an_anchor_in_the_middle(self) -> None:
        after = insert(MODULE, ["kimi_k2"], names=["eagle3_target_supported"], within=WITHIN, after="llama")
        assert hunks(MODULE, after) == [(22, "", '            "kimi_k2",\n')]

    def test_list_remove(self) -> None:
        after = remove(MODULE, ["qwen"], names=["eagle3_target_supported"])
        assert hunks(MODULE, after) == [(22, '            "qwen",  # since 0.10\n', "")]

    def test_set_value(self) -> None:
        after = set_value(MODULE, names=["self.timeout"], value=60)
        assert hunks(MODULE, after) == [(28, "        self.timeout  = 10\n", "        self.timeout  = 60\n")]

    def test_dict_set(self) -> None:
        after = dict_set(MODULE, 2, names=["_table"], value="z")
        assert hunks(MODULE, after) == [
            (12, '        2 : "y",   # over-indented\n', '        2 : "z",   # over-indented\n'),
        ]

    def test_call_kwarg(self) -> None:
        after = kwarg(MODULE, "strict", "self.build", value=True)
        assert hunks(MODULE, after) == [
            (29, "        self.build( model , strict = False )   # trailing\n",
             "        self.build( model , strict = True )   # trailing\n"),
        ]


# ------------------------------------------------------------------ idempotency

IDEMPOTENT_CASES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "list_insert": ("list_insert", 'x = [\n    "a",  # one\n]\n', {"names": ["x"], "values": ["b", "c"], "after": "a"}),
    "list_insert_missing_anchor": ("list_insert", "x = ('a',)\n", {"names": ["x"], "values": ["b"], "after": "zz"}),
    "list_remove": ("list_remove", 'x = {"a", "b"}\n', {"names": ["x"], "values": ["a"]}),
    "list_remove_to_empty": ("list_remove", 'x = [\n    "a",\n]\n', {"names": ["x"], "values": ["a"]}),
    "set_value": ("set_value", "x = (1)  # c\n", {"names": ["x"], "value": 2}),
    "set_value_expr": ("set_value", "x = None\n", {"names": ["x"], "expr": "dict(a=1)"}),
    "dict_set_add": ("dict_set", "d = {\n    'a': 1\n}\n", {"names": ["d"], "key": "b", "value": [1, 2]}),
    "dict_set_change": ("dict_set", "d = {'a': 1}\n", {"names": ["d"], "key": "a", "expr": "os.cpu_count()"}),
    "call_kwarg_add": ("call_kwarg", "f(\n    a,\n)\n", {"callee": "f", "keyword": "k", "value": None}),
    "call_kwarg_change": ("call_kwarg", "f(k=1)\n", {"callee": "f", "keyword": "k", "value": "v"}),
    "replace_function": ("replace_function", 'def f():\n    """Doc."""\n    return 1\n', {"function": "f", "body": "return 2"}),
    "diff": ("diff", "def f():\n    return 1\n", {"text": "--- a/m.py\n+++ b/m.py\n@@ -1,2 +1,2 @@\n def f():\n"
                                                        "-    return 1\n+    return 2\n"}),
}


@pytest.mark.parametrize("case", IDEMPOTENT_CASES)
def test_second_apply_is_already_and_leaves_the_source_identical(case: str) -> None:
    kind, source, params = IDEMPOTENT_CASES[case]
    edit = Edit.model_validate({kind: params})
    first = edit.apply(source)
    assert first.verdict == "changed"
    second = edit.apply(first.source)
    assert (second.verdict, second.message, second.source) == ("already", "already in place", first.source)
    assert edit.apply(second.source).source == first.source


def test_every_operation_has_an_idempotency_case() -> None:
    covered = {kind for kind, _, _ in IDEMPOTENT_CASES.values()} | {"codemod"}  # codemod: TestCodemod
    assert covered == set(EDIT_KINDS)


def test_every_operation_is_fuzzed() -> None:
    """The real-file fuzz tier draws its ops from the registry: each has a generator there, or
    names where else it is fuzzed."""
    from tests.real.test_edit_fuzz import FUZZED_ELSEWHERE, GENERATORS, OPS, missing_generator

    missing = [kind for kind in EDIT_KINDS if kind not in GENERATORS and kind not in FUZZED_ELSEWHERE]
    assert not missing, "; ".join(missing_generator(kind) for kind in missing)
    assert set(GENERATORS) | set(FUZZED_ELSEWHERE) <= set(EDIT_KINDS)
    assert OPS == [kind for kind in EDIT_KINDS if kind not in FUZZED_ELSEWHERE]


def test_the_registry_builds_edit() -> None:
    """`OPS` is the one list: the kinds table and Edit's fields come from it, in its order."""
    assert list(EDIT_KINDS) == [op.kind for op in OPS]
    assert list(Edit.model_fields) == list(EDIT_KINDS)
    assert all(Edit.model_fields[kind].annotation == (op | None) for kind, op in EDIT_KINDS.items())


# ------------------------------------------------------------ not_found messages

VERIFY_ARGS = code('''
    class SpeculativeConfig:
        def _verify_args(self):
            aux_hidden_states_supported = ["llama", "qwen"]
            max_len = 8
            if self.method == "eagle3":
                check(self.model, aux_hidden_states_supported)
''')


class TestNotFoundMessages:
    def test_names_what_was_looked_for_and_the_list_that_is_there(self) -> None:
        result = unchanged("list_insert", VERIFY_ARGS, "not_found", names=["eagle3_target_supported"],
                           values=["kimi_k2"], within=WITHIN)
        assert result.message == (
            "no assignment to eagle3_target_supported within SpeculativeConfig._verify_args; "
            "found aux_hidden_states_supported"
        )

    def test_either_name_is_accepted(self) -> None:
        after = insert(VERIFY_ARGS, ["kimi_k2"], names=["eagle3_target_supported", "aux_hidden_states_supported"],
                       within=WITHIN)
        assert hunks(VERIFY_ARGS, after) == [
            (3, '        aux_hidden_states_supported = ["llama", "qwen"]\n',
             '        aux_hidden_states_supported = ["llama", "qwen", "kimi_k2"]\n'),
        ]

    def test_misspelled_within_suggests_the_scope(self) -> None:
        result = unchanged("list_insert", VERIFY_ARGS, "not_found", names=["aux_hidden_states_supported"],
                           values=["kimi_k2"], within="SpeculativeConfig._verify_arg")
        assert "there is no scope SpeculativeConfig._verify_arg" in result.message
        assert "did you mean SpeculativeConfig._verify_args" in result.message
        assert "found aux_hidden_states_supported in SpeculativeConfig._verify_args" in result.message

    def test_list_remove_names_the_near_miss(self) -> None:
        result = unchanged("list_remove", VERIFY_ARGS, "not_found", names=["eagle3_target_supported"],
                           values=["qwen"], within=WITHIN)
        assert "no assignment to eagle3_target_supported" in result.message
        assert "aux_hidden_states_supported" in result.message

    def test_set_value_names_a_similar_name(self) -> None:
        result = unchanged("set_value", VERIFY_ARGS, "not_found", names=["max_length"], value=4, within=WITHIN)
        assert result.message == (
            "no assignment to max_length within SpeculativeConfig._verify_args; "
            "found aux_hidden_states_supported, max_len"
        )

    def test_name_only_in_another_scope_says_where_it_is(self) -> None:
        source = code('''
            max_len = 8


            class C:
                def f(self):
                    return max_len
        ''')
        result = unchanged("set_value", source, "not_found", names=["max_len"], value=4, within="C.f")
        assert result.message == "no assignment to max_len within C.f; found max_len in <module>"

    def test_value_of_the_wrong_shape_says_what_it_is(self) -> None:
        result = unchanged("list_insert", VERIFY_ARGS, "not_found", names=["max_len"], values=[1], within=WITHIN)
        assert result.message == (
            "cannot edit the assignment to max_len within SpeculativeConfig._verify_args: "
            "line 4 in SpeculativeConfig._verify_args: the value is not a list, tuple or set literal (libcst node: Integer)"
        )

    def test_dict_set_on_a_list_says_it_is_not_a_dict(self) -> None:
        result = unchanged("dict_set", VERIFY_ARGS, "not_found", names=["aux_hidden_states_supported"], key="a",
                           value=1)
        assert result.message == (
            "cannot edit the assignment to aux_hidden_states_supported: "
            "line 3 in SpeculativeConfig._verify_args: the value is not a dict literal (libcst node: List)"
        )

    def test_dict_set_misspelled_within(self) -> None:
        result = unchanged("dict_set", SCOPES, "not_found", names=["limits"], key="a", value=1,
                           within="SpeculativeConfig.verify_args")
        assert "did you mean SpeculativeConfig._verify_args" in result.message

    def test_nothing_close_at_all(self) -> None:
        result = unchanged("list_insert", "x = 1\ny = foo()\n", "not_found", names=["eagle3_target_supported"],
                           values=["kimi_k2"])
        assert result.message == "no assignment to eagle3_target_supported"

    def test_call_kwarg_says_where_the_calls_are(self) -> None:
        result = unchanged("call_kwarg", VERIFY_ARGS, "not_found", callee="check", keyword="k", value=1,
                           within="SpeculativeConfig.other")
        assert result.message == (
            "no call to check within SpeculativeConfig.other; there is no scope SpeculativeConfig.other; "
            "did you mean SpeculativeConfig, SpeculativeConfig._verify_args?; "
            "found calls in SpeculativeConfig._verify_args"
        )

    def test_call_kwarg_misspelled_within(self) -> None:
        result = unchanged("call_kwarg", SCOPES, "not_found", callee="build", keyword="strict", value=True,
                           within="SpeculativeConfig._verify_arg")
        assert "did you mean SpeculativeConfig._verify_args" in result.message

    def test_call_kwarg_without_any_call(self) -> None:
        result = unchanged("call_kwarg", "x = 1\n", "not_found", callee="SamplingParams", keyword="n", value=1)
        assert result.message == "no call to SamplingParams"


# ------------------------------------------------------------------------ codemod

TRANSFORMERS = '''
import libcst as cst
from libcst.codemod import Codemod, SkipFile


class RenameName(cst.CSTTransformer):
    """Rename a name; report not_found when neither the old nor the new name occurs."""

    def __init__(self, old: str, new: str) -> None:
        super().__init__()
        self.old, self.new = old, new
        self.seen = False
        self.not_found = None

    def leave_Name(self, original, updated):
        if updated.value in (self.old, self.new):
            self.seen = True
        if updated.value == self.old:
            return updated.with_changes(value=self.new)
        return updated

    def leave_Module(self, original, updated):
        if not self.seen:
            self.not_found = f"no name {self.old} (nor {self.new}) in this file"
        return updated


class AddConstant(Codemod):
    """A libcst Codemod: append `NAME = value` unless the module already has it."""

    def __init__(self, context, name: str, value: int) -> None:
        super().__init__(context)
        self.name, self.value = name, value

    def transform_module_impl(self, tree):
        if f"{self.name} = " in tree.code:
            return tree
        line = cst.parse_statement(f"{self.name} = {self.value}\\n")
        return tree.with_changes(body=[*tree.body, line])


class SkipAll(Codemod):
    def transform_module_impl(self, tree):
        raise SkipFile("nothing for me here")


class Crash(cst.CSTTransformer):
    def leave_Name(self, original, updated):
        raise RuntimeError("kaboom")


NOT_A_TRANSFORMER = 42
'''


@pytest.fixture
def recipe_dir(tmp_path: Path) -> Path:
    """A recipe folder holding the user's codemod file; the recipe lives one level down."""
    folder = tmp_path / "recipes"
    folder.mkdir()
    (folder / "mods.py").write_text(TRANSFORMERS)
    return folder


def codemod(recipe_dir: Path, **params: Any) -> Edit:
    edit = Edit.model_validate({"codemod": params})
    edit.codemod.bind(recipe_dir)
    return edit


class TestCodemod:
    def test_cst_transformer_with_args(self, recipe_dir: Path) -> None:
        edit = codemod(recipe_dir, file="mods.py", transformer="RenameName", args={"old": "a", "new": "b"})
        result = edit.apply("a = 1  # keep\nprint(a)\n")
        assert (result.verdict, result.source) == ("changed", "b = 1  # keep\nprint(b)\n")
        assert result.message == "RenameName changed the file"
        again = edit.apply(result.source)
        assert (again.verdict, again.source) == ("already", result.source)

    def test_codemod_subclass_with_args(self, recipe_dir: Path) -> None:
        edit = codemod(recipe_dir, file="mods.py", transformer="AddConstant", args={"name": "LIMIT", "value": 8})
        result = edit.apply("import os\n\nx = 1\n")
        assert (result.verdict, result.source) == ("changed", "import os\n\nx = 1\nLIMIT = 8\n")
        again = edit.apply(result.source)
        assert (again.verdict, again.message, again.source) == ("already", "already in place", result.source)

    def test_transformer_reports_not_found(self, recipe_dir: Path) -> None:
        edit = codemod(recipe_dir, file="mods.py", transformer="RenameName", args={"old": "a", "new": "b"})
        result = edit.apply("c = 1\n")
        assert (result.verdict, result.source) == ("not_found", "c = 1\n")
        assert result.message == "no name a (nor b) in this file"

    def test_skip_file_is_not_found(self, recipe_dir: Path) -> None:
        result = codemod(recipe_dir, file="mods.py", transformer="SkipAll").apply("c = 1\n")
        assert (result.verdict, result.source) == ("not_found", "c = 1\n")
        assert result.message == "SkipAll skipped the file: nothing for me here"

    def test_file_in_a_subfolder_is_allowed(self, recipe_dir: Path) -> None:
        (recipe_dir / "codemods").mkdir()
        (recipe_dir / "codemods" / "rename.py").write_text(TRANSFORMERS)
        edit = codemod(recipe_dir, file="codemods/rename.py", transformer="RenameName", args={"old": "a", "new": "b"})
        assert edit.apply("a\n").source == "b\n"

    @pytest.mark.parametrize("path", ["../escape.py", "codemods/../../escape.py"])
    def test_path_outside_the_recipe_folder_is_refused(self, recipe_dir: Path, path: str) -> None:
        (recipe_dir.parent / "escape.py").write_text(TRANSFORMERS)  # exists, and still refused
        edit = codemod(recipe_dir, file=path, transformer="RenameName", args={"old": "a", "new": "b"})
        with pytest.raises(EditError, match=r"is outside the recipe's folder"):
            edit.apply("a = 1\n")

    def test_absolute_path_outside_the_recipe_folder_is_refused(self, recipe_dir: Path) -> None:
        outside = recipe_dir.parent / "escape.py"
        outside.write_text(TRANSFORMERS)
        edit = codemod(recipe_dir, file=str(outside), transformer="RenameName", args={"old": "a", "new": "b"})
        with pytest.raises(EditError, match=r"is outside the recipe's folder"):
            edit.apply("a = 1\n")

    def test_symlink_leading_outside_the_recipe_folder_is_refused(self, recipe_dir: Path) -> None:
        outside = recipe_dir.parent / "escape.py"
        outside.write_text(TRANSFORMERS)
        (recipe_dir / "link.py").symlink_to(outside)
        edit = codemod(recipe_dir, file="link.py", transformer="RenameName", args={"old": "a", "new": "b"})
        with pytest.raises(EditError, match=r"is outside the recipe's folder"):
            edit.apply("a = 1\n")

    def test_missing_file(self, recipe_dir: Path) -> None:
        with pytest.raises(EditError, match=r"missing\.py does not exist"):
            codemod(recipe_dir, file="missing.py", transformer="RenameName").apply("a\n")

    @pytest.mark.parametrize("name", ["Nope", "NOT_A_TRANSFORMER"])
    def test_missing_or_wrong_class(self, recipe_dir: Path, name: str) -> None:
        with pytest.raises(EditError, match=f"no libcst CSTTransformer or Codemod class named {name}"):
            codemod(recipe_dir, file="mods.py", transformer=name).apply("a\n")

    def test_file_that_fails_to_import(self, recipe_dir: Path) -> None:
        (recipe_dir / "broken.py").write_text("import libcst\nraise ImportError('no such thing')\n")
        with pytest.raises(EditError, match=r"broken\.py failed to load: ImportError: no such thing"):
            codemod(recipe_dir, file="broken.py", transformer="X").apply("a\n")

    def test_transformer_that_crashes(self, recipe_dir: Path) -> None:
        with pytest.raises(EditError, match=r"codemod Crash failed: RuntimeError: kaboom"):
            codemod(recipe_dir, file="mods.py", transformer="Crash").apply("a\n")

    def test_wrong_args(self, recipe_dir: Path) -> None:
        edit = codemod(recipe_dir, file="mods.py", transformer="RenameName", args={"old": "a"})
        with pytest.raises(EditError, match=r"codemod RenameName failed: TypeError"):
            edit.apply("a\n")


# ------------------------------------------------------------ the edit envelope


class TestEditEnvelope:
    def test_exactly_one_operation(self) -> None:
        with pytest.raises(ValidationError, match="give exactly one edit operation"):
            Edit.model_validate({
                "list_insert": {"names": ["x"], "values": ["a"]},
                "list_remove": {"names": ["x"], "values": ["b"]},
            })
        with pytest.raises(ValidationError, match="give exactly one edit operation"):
            Edit.model_validate({})

    def test_unknown_parameter_is_refused(self) -> None:
        with pytest.raises(ValidationError, match="within_scope"):
            Edit.model_validate({"list_insert": {"names": ["x"], "values": ["a"], "within_scope": "C"}})

    def test_kind_and_op(self) -> None:
        edit = Edit.model_validate({"dict_set": {"names": ["d"], "key": "a", "value": 1}})
        assert edit.kind == "dict_set"
        assert type(edit.op).__name__ == "DictSet"

    def test_source_that_does_not_parse(self) -> None:
        with pytest.raises(EditError, match="the file does not parse"):
            run("list_insert", "x = [\n", names=["x"], values=["a"])

    @pytest.mark.parametrize("kind, params", [
        ("set_value", {"names": ["x"]}),
        ("dict_set", {"names": ["d"], "key": "a"}),
        ("call_kwarg", {"callee": "f", "keyword": "k"}),
    ])
    def test_expr_that_does_not_parse_is_a_recipe_error(self, kind: str, params: dict[str, Any]) -> None:
        # Refused when the recipe is read, not reported later as a target that is "not found".
        with pytest.raises(ValidationError, match=r"expr '1 \+' is not a Python expression"):
            Edit.model_validate({kind: {**params, "expr": "1 +"}})


# -------------------------------------------- a changed result is always Python (issue 12.1)


class TestResultsCompile:
    def test_a_keyword_joining_a_bare_generator_parenthesizes_it(self) -> None:
        result = assert_edit("call_kwarg", "t = sum(x for x in y)\n", "t = sum((x for x in y), pk=1)\n", callee="sum", keyword="pk", value=1)
        compile(result.source, "t.py", "exec")

    def test_a_generator_with_its_own_parentheses_keeps_them(self) -> None:
        assert kwarg("t = f((x for x in y))\n", value=1) == "t = f((x for x in y), k=1)\n"

    def test_an_edit_that_would_not_compile_is_a_patchkit_bug_not_a_result(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import patchkit.edits.ops.call_kwarg.engine as engine

        monkeypatch.setattr(engine, "run", lambda *args: EditResult("changed", "f(x for x in y, k=1)\n", "added"))
        with pytest.raises(EditBug, match=r"^patchkit bug: the call_kwarg edit produced Python that does not compile "
                                          r"\(Generator expression must be parenthesized, line 1: `f\(x for x in y, k=1\)`\)"):
            run("call_kwarg", "f(x for x in y)\n", callee="f", keyword="k", value=1)

    def test_a_bug_reaches_the_patch_step_as_a_failure_naming_it(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        import patchkit.edits.ops.list_insert.engine as engine
        from patchkit.recipe.model import load_recipe
        from patchkit.run.steps import edit_cache

        monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(tmp_path))
        monkeypatch.setattr(engine, "run", lambda *args: EditResult("changed", "x = [\n", "added"))
        step = next(s for s in load_recipe(Path(__file__).parents[2] / "recipes" / "kimi_eagle3.yaml").recipe.steps
                    if s.name == "eagle3-whitelist")
        result = edit_cache.compute(step.patch, "x = []\n")
        assert result.verdict == "not_found" and result.message.startswith("patchkit bug: the list_insert edit")
        assert edit_cache.load(step.patch, "x = []\n") is None  # never cached

    def test_a_file_this_python_cannot_compile_is_held_to_parsing_only(self) -> None:
        # `return` at module level does not compile; the edit is still checked by parsing.
        assert insert("return 1\nx = [1]\n", [2]) == "return 1\nx = [1, 2]\n"

    @pytest.mark.parametrize("kind, source, params, after", [
        ("set_value", "f(k=1)\n", {"target": "call_arg", "callee": "f", "arg": "k", "expr": "1, 2"}, "f(k=(1, 2))\n"),
        ("set_value", "x = 1\n", {"names": ["x"], "expr": "1, 2"}, "x = (1, 2)\n"),
        ("set_value", "x = 1, 2\n", {"names": ["x"], "expr": "3, 4"}, "x = 3, 4\n"),
        ("dict_set", "d = {'a': 1}\n", {"names": ["d"], "key": "b", "expr": "1, 2"}, "d = {'a': 1, 'b': (1, 2)}\n"),
        ("set_value", "def f(a=1, b=2): pass\n", {"target": "default", "arg": "a", "expr": "1, 2"},
         "def f(a=(1, 2), b=2): pass\n"),
    ])
    def test_a_tuple_or_generator_between_commas_gets_parentheses(self, kind: str, source: str,
                                                                   params: dict[str, Any], after: str) -> None:
        assert changed(kind, source, **params).source == after

    def test_strings_inside_an_f_string_take_the_other_quote(self) -> None:
        assert kwarg('x = f"{g(a)}"\n', callee="g", value="s") == "x = f\"{g(a, k='s')}\"\n"
        assert kwarg("x = f'{g(a)}'\n", callee="g", value="s") == "x = f'{g(a, k=\"s\")}'\n"

    def test_a_string_that_cannot_go_inside_an_f_string_is_refused(self) -> None:
        result = unchanged("call_kwarg", "x = f'{g(a)}'\n", "not_found", callee="g", keyword="k", value="it's")
        assert "\"it's\" cannot be written inside an f-string's braces" in result.message


# ------------------------------------- literals compare by type and value (issue 12.2, 12.3)


class TestLiteralsByTypeAndValue:
    def test_one_float_and_true_are_three_elements(self) -> None:
        assert insert("x = [1, True]\n", [1.0]) == "x = [1, True, 1.0]\n"
        assert insert("x = [1]\n", [True]) == "x = [1, True]\n"
        assert insert("x = [1.0]\n", [1]) == "x = [1.0, 1]\n"

    def test_values_asked_for_are_distinct_by_type(self) -> None:
        assert insert("x = []\n", [1, True, 1]) == "x = [1, True]\n"

    def test_removing_one_keeps_true(self) -> None:
        result = assert_edit("list_remove", "x = [1, True, 'a']\n", "x = [True, 'a']\n", names=["x"], values=[1])
        assert result.message == "removed 1"

    def test_the_anchor_compares_by_type(self) -> None:
        assert insert("x = [True, 1, 2]\n", ["c"], after=1) == 'x = [True, 1, "c", 2]\n'

    def test_nested_literals_compare_by_type_too(self) -> None:
        assert set_value("x = [1]\n", value=[True]) == "x = [True]\n"
        assert set_value("x = {'a': 1}\n", value={"a": 1.0}) == "x = {'a': 1.0}\n"
        unchanged("set_value", "x = [1, 'a']\n", "already", names=["x"], value=[1, "a"])

    def test_in_a_set_one_and_true_are_one_element_so_the_edit_is_refused(self) -> None:
        result = unchanged("list_insert", "x = {1, 'a'}\n", "not_found", names=["x"], values=[True])
        assert "True and the set's element 1 are one element of a set in Python" in result.message
        unchanged("list_remove", "x = {True, 'a'}\n", "not_found", names=["x"], values=[1])

    def test_dict_keys_compare_by_type_and_a_colliding_key_is_refused(self) -> None:
        result = unchanged("dict_set", "d = {1: 'a'}\n", "not_found", names=["d"], key=True, value="b")
        assert "key True and the dict's key 1 are one key in Python; write the key as the dict does (1)" in result.message
        unchanged("dict_set", "d = {1: 'a'}\n", "not_found", names=["d"], key=1.0, value="b")
        assert dict_set("d = {'1': 'a'}\n", 1, value="b") == "d = {'1': 'a', 1: 'b'}\n"


class TestDuplicateKeys:
    def test_the_last_of_duplicate_keys_is_edited_and_the_message_says_so(self) -> None:
        import ast

        result = assert_edit("dict_set", "d = {'a': 1, 'b': 2, 'a': 3}\n", "d = {'a': 1, 'b': 2, 'a': 9}\n", names=["d"], key="a", value=9)
        assert result.message == "set key 'a' to 9 (the last of its 2 entries: Python keeps the last)"
        assert ast.literal_eval(result.source.split(" = ")[1])["a"] == 9

    def test_already_means_what_python_keeps(self) -> None:
        unchanged("dict_set", "d = {'a': 9, 'a': 1}\n", "already", names=["d"], key="a", value=1)
        assert dict_set("d = {'a': 9, 'a': 1}\n", "a", value=9) == "d = {'a': 9, 'a': 9}\n"

    def test_a_path_step_takes_the_last_duplicate(self) -> None:
        source = "M = {'k': [1], 'k': [2]}\n"
        assert insert(source, [3], names=["M"], path=["k"]) == "M = {'k': [1], 'k': [2, 3]}\n"

    def test_in_a_chain_of_dicts_the_right_one_wins(self) -> None:
        assert dict_set("d = {'a': 1} | {'a': 2}\n", "a", value=3) == "d = {'a': 1} | {'a': 3}\n"


# ---------------------------------------------- empty multi-line displays (issue 12.4)


class TestEmptyMultiLineDisplays:
    def test_an_empty_list_over_two_lines_gets_an_indented_item_with_a_trailing_comma(self) -> None:
        assert insert("x = [\n]\n", ["c"]) == 'x = [\n    "c",\n]\n'

    def test_several_values(self) -> None:
        assert insert("x = [\n]\n", ["c", "d"]) == 'x = [\n    "c",\n    "d",\n]\n'

    def test_inside_a_method_it_follows_the_block(self) -> None:
        before = code('''
            class A:
                def f(self):
                    x = [
                    ]
        ''')
        after = code('''
            class A:
                def f(self):
                    x = [
                        "c",
                    ]
        ''')
        assert insert(before, ["c"]) == after

    def test_tabs(self) -> None:
        assert insert("if a:\n\tx = [\n\t]\n", ["c"]) == 'if a:\n\tx = [\n\t\t"c",\n\t]\n'

    def test_comment_only_lines_stay_last(self) -> None:
        before = code('''
            x = [
                # more models go here
            ]
        ''')
        after = code('''
            x = [
                "c",
                # more models go here
            ]
        ''')
        assert insert(before, ["c"]) == after

    def test_a_comment_on_the_opening_bracket_stays_there(self) -> None:
        before = code('''
            x = [  # models we accept
            ]
        ''')
        after = code('''
            x = [  # models we accept
                "c",
            ]
        ''')
        assert insert(before, ["c"]) == after

    def test_emptying_and_refilling_gives_the_original_back(self) -> None:
        original = code('''
            class A:
                x = [  # models we accept
                    "a",
                    # more models go here
                ]
        ''')
        emptied = remove(original, ["a"])
        assert emptied == code('''
            class A:
                x = [  # models we accept
                    # more models go here
                ]
        ''')
        assert insert(emptied, ["a"]) == original

    def test_tuple(self) -> None:
        assert insert("x = (\n)\n", ["c"]) == 'x = (\n    "c",\n)\n'

    def test_dict(self) -> None:
        assert dict_set("d = {\n}\n", "c", value=1) == 'd = {\n    "c": 1,\n}\n'

    def test_a_list_nested_in_a_dict(self) -> None:
        before = code('''
            M = {
                "k": [
                ],
            }
        ''')
        after = code('''
            M = {
                "k": [
                    "c",
                ],
            }
        ''')
        assert insert(before, ["c"], names=["M"], path=["k"]) == after

    def test_a_call_without_arguments_over_two_lines(self) -> None:
        assert kwarg("y = f(\n)\n", value=1) == "y = f(\n    k=1,\n)\n"
        assert kwarg("y = f(  # why\n    # note\n)\n", value=1) == "y = f(  # why\n    k=1,\n    # note\n)\n"

    def test_an_empty_one_line_display_stays_on_one_line(self) -> None:
        assert insert("x = []\n", ["c"]) == 'x = ["c"]\n'
        assert dict_set("d = {}\n", "c", value=1) == 'd = {"c": 1}\n'


def test_a_codemod_that_writes_invalid_python_is_the_codemods_error(recipe_dir: Path) -> None:
    (recipe_dir / "bad.py").write_text(
        "import libcst as cst\n\n"
        "class Break(cst.CSTTransformer):\n"
        "    def leave_Module(self, original, updated):\n"
        "        return updated.with_changes(body=[*updated.body, cst.parse_statement('return 1\\n')])\n"
    )
    with pytest.raises(EditError, match=r"^codemod Break produced Python that does not compile \('return' outside "
                                        r"function, line 2: `return 1`\); nothing was changed$") as caught:
        codemod(recipe_dir, file="bad.py", transformer="Break").apply("x = 1\n")
    assert not isinstance(caught.value, EditBug)


# ------------------------------------------------ found by the property tier (issue 12.7)


class TestFoundOnRealFiles:
    def test_a_call_inside_an_f_string_gets_strings_in_the_other_quote(self) -> None:
        # vllm 0.16.0 worker code: f"{format_gib(requested_memory)} GiB" + call_kwarg wrote f"{f(k="x")}".
        source = 'msg = f"{format_gib(requested_memory)} GiB"\n'
        assert kwarg(source, "unit", "format_gib", value="x y") == "msg = f\"{format_gib(requested_memory, unit='x y')} GiB\"\n"

    def test_a_string_concatenated_over_lines_is_one_element(self) -> None:
        # vllm 0.32.0 deep_gemm.py: return (False, "Supports only ... " "quantization ...").
        source = code('''
            x = [
                "foo "
                "bar",
                "baz",
            ]
        ''')
        unchanged("list_insert", source, "already", names=["x"], values=["foo bar"])
        assert remove(source, ["foo bar"]) == 'x = [\n    "baz",\n]\n'

    def test_a_parenthesized_sum_is_looked_through(self) -> None:
        # vllm 0.32.0 embedding_gemma2.py: token_ids = (\n [a]\n + [b] * n\n + [c]\n).
        source = code('''
            token_ids = (
                [config.boa_token_id]
                + [processor.audio_token_id] * num_tokens
                + [config.eoa_token_index]
            )
        ''')
        after = insert(source, [7], names=["token_ids"])
        assert after == source.replace("[config.eoa_token_index]", "[config.eoa_token_index, 7]")
