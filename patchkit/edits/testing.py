"""The test harness for edit operations, for authors of new ops and of recipes.

    from patchkit.edits.testing import assert_edit

    assert_edit("list_insert", "x = ['a']\n", "x = ['a', 'b']\n", names=["x"], values=["b"])

`assert_edit` checks what every op promises: the result is exactly `after` (byte for byte),
it compiles, and applying the edit again says `already` and changes nothing. A failure is
an AssertionError whose message shows a diff, so it reads the same under pytest or unittest.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from patchkit.edits import Edit, EditResult, EditSpec
from patchkit.edits.model import compile_error

EditLike = str | Mapping[str, Any] | EditSpec | Edit


def as_edit(edit: EditLike, /, **params: Any) -> Edit | EditSpec:
    """An edit from an op's name and its parameters, a `{kind: params}` mapping (as a recipe
    writes it), an `Edit` or an op's spec."""
    if isinstance(edit, str):
        return Edit.model_validate({edit: params})
    if params:
        raise TypeError("parameters go with an op's name: assert_edit('set_value', before, after, names=[...])")
    if isinstance(edit, Mapping):
        return Edit.model_validate(dict(edit))
    return edit


def _diff(want: str, got: str) -> str:
    lines = difflib.unified_diff(want.splitlines(keepends=True), got.splitlines(keepends=True), "expected", "result")
    return "".join(lines)


def assert_idempotent(edit: EditLike, source: str, /, **params: Any) -> EditResult:
    """Apply once (it must change `source` into Python that compiles), then again on the result:
    `already`, with the source unchanged. The first result."""
    op = as_edit(edit, **params)
    first = op.apply(source)
    assert first.verdict == "changed", f"expected a change, got {first.verdict}: {first.message}"
    assert first.source != source, f"`changed`, but the source is the same: {first.message}"
    error = compile_error(source, first.source)
    assert error is None, f"the result does not compile ({error}):\n{first.source}"
    second = op.apply(first.source)
    assert second.verdict == "already", f"not idempotent: the second apply says {second.verdict}: {second.message}"
    assert second.source == first.source, "the second apply changed the source:\n" + _diff(first.source, second.source)
    return first


def assert_edit(edit: EditLike, before: str, after: str, /, **params: Any) -> EditResult:
    """`edit` turns `before` into exactly `after` (when they are equal: it finds the edit in
    place), the result compiles, and a second apply is `already` with the source unchanged.
    `edit` is an op's name (its parameters as keywords, `after=` among them for list_insert:
    the harness's own arguments are positional), `{kind: params}`, an Edit or a spec.
    The first result, for its message."""
    if before == after:
        op = as_edit(edit, **params)
        result = op.apply(before)
        assert result.verdict == "already", f"expected `already`, got {result.verdict}: {result.message}"
        assert result.source == before, "`already`, but the source changed:\n" + _diff(before, result.source)
        return result
    first = assert_idempotent(edit, before, **params)
    assert first.source == after, "the edit's result is not the expected text:\n" + _diff(after, first.source)
    return first


def assert_refused(edit: EditLike, source: str, /, **params: Any) -> str:
    """The edit changes nothing and fails (`not_found`: no target, or an ambiguous one): its
    message, for the test to check that it names the places."""
    result = as_edit(edit, **params).apply(source)
    assert result.verdict == "not_found", f"expected a refusal, got {result.verdict}: {result.message}"
    assert result.source == source, "a refusal changed the source:\n" + _diff(source, result.source)
    return result.message


__all__ = ["as_edit", "assert_edit", "assert_idempotent", "assert_refused"]
