"""The shipped edit harness (patchkit.edits.testing) passes a good edit and fails each way an
edit can break its promises, naming it: a wrong result, a second apply that changes again,
a result that does not compile, a `changed` that changed nothing."""

from __future__ import annotations

from typing import ClassVar

import pytest

from patchkit.edits import Edit, EditResult, EditSpec
from patchkit.edits.testing import assert_edit, assert_idempotent, assert_refused


class Appends(EditSpec):
    """A broken op: it appends a line every time (never `already`)."""

    kind: ClassVar[str] = "appends"
    line: str = "x = 1\n"

    def apply(self, source: str) -> EditResult:
        return EditResult("changed", source + self.line, "appended")


class OnceOnly(Appends):
    """A good op: it appends its line when it is not there yet."""

    def apply(self, source: str) -> EditResult:
        if source.endswith(self.line):
            return EditResult("already", source, "already in place")
        return super().apply(source)


class ClaimsAChange(EditSpec):
    def apply(self, source: str) -> EditResult:
        return EditResult("changed", source, "changed, it says")


def test_a_good_edit_passes_in_every_spelling() -> None:
    before, after = "x = ['a']\n", "x = ['a', 'b']\n"
    params = {"names": ["x"], "values": ["b"]}
    assert assert_edit("list_insert", before, after, **params).message == "added 'b' at the end"
    assert_edit({"list_insert": params}, before, after)
    assert_edit(Edit.model_validate({"list_insert": params}), before, after)
    assert_edit(Edit.model_validate({"list_insert": params}).op, before, after)
    assert_edit("list_insert", after, after, **params)  # already in place
    # `after=` is the op's parameter (the harness's own are positional)
    assert_edit("list_insert", "x = ['a', 'c']\n", "x = ['a', 'b', 'c']\n", names=["x"], values=["b"], after="a")
    assert_edit(OnceOnly(), "y = 2\n", "y = 2\nx = 1\n")


def test_a_wrong_result_shows_the_difference() -> None:
    with pytest.raises(AssertionError, match=r"not the expected text:\n--- expected\n\+\+\+ result") as caught:
        assert_edit("set_value", "x = 1\n", "x = 3\n", names=["x"], value=2)
    assert "-x = 3\n+x = 2\n" in str(caught.value)


def test_an_edit_that_changes_again_is_not_idempotent() -> None:
    with pytest.raises(AssertionError, match="not idempotent: the second apply says changed"):
        assert_edit(Appends(), "y = 2\n", "y = 2\nx = 1\n")


def test_a_result_that_does_not_compile_fails() -> None:
    with pytest.raises(AssertionError, match="does not compile"):
        assert_idempotent(Appends(line="def (:\n"), "y = 2\n")


def test_a_change_that_changed_nothing_fails() -> None:
    with pytest.raises(AssertionError, match="the source is the same"):
        assert_idempotent(ClaimsAChange(), "y = 2\n")
    with pytest.raises(AssertionError, match="expected `already`, got changed"):
        assert_edit(Appends(), "y = 2\n", "y = 2\n")
    with pytest.raises(AssertionError, match="expected a change, got already"):
        assert_edit("set_value", "x = 2\n", "x = 3\n", names=["x"], value=2)


def test_parameters_go_with_a_name_only() -> None:
    with pytest.raises(TypeError, match="parameters go with an op's name"):
        assert_edit({"set_value": {"names": ["x"], "value": 2}}, "x = 1\n", "x = 2\n", value=3)


def test_assert_refused_takes_a_refusal_and_nothing_else() -> None:
    two = "X = [1]\nX = [2]\n"
    message = assert_refused("list_insert", two, names=["X"], values=[3])  # two places: ambiguous
    assert "line 1" in message and "line 2" in message
    assert "no assignment" in assert_refused("list_insert", two, names=["Y"], values=[3])
    with pytest.raises(AssertionError, match="expected a refusal, got changed"):
        assert_refused("list_insert", "X = [1]\n", names=["X"], values=[3])
