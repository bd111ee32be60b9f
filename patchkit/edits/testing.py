"""The test harness for edit operations, for authors of new ops and of recipes.

    from patchkit.edits.testing import assert_edit

    assert_edit("list_insert", "x = ['a']\n", "x = ['a', 'b']\n", names=["x"], values=["b"])

`assert_edit` checks what every op promises: the result is exactly `after` (byte for byte),
it compiles, and applying the edit again says `already` and changes nothing. A failure is
an AssertionError whose message shows a diff, so it reads the same under pytest or unittest.

Golden cases can be data: a folder per op of YAML files (`case_files`, `read_case`,
`assert_case`), each one edit, as a recipe would write it:

    about:   why the case exists (optional)
    spec:    the op's parameters (the op is the folder's name)
    before:  the source
    after:   the exact result (as assert_edit checks it; the second apply also says
             `already in place`), or
    already: true (the edit is found in place), or
    refused: the whole message of a refusal (nothing changed)
    message: the whole message, or message_has: parts of it (with after or already)

Files a spec names (a codemod's module, a diff) sit beside the cases: the folder is the
recipe's folder.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from patchkit.base.yamlsource import read_yaml
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


CASE_OUTCOMES = ("after", "already", "refused")
CASE_KEYS = frozenset({"about", "spec", "before", *CASE_OUTCOMES, "message", "message_has"})


def case_files(root: Path) -> list[tuple[str, Path]]:
    """(op, file) for every case under root/OP/*.yaml, in order."""
    return [(folder.name, path) for folder in sorted(root.iterdir()) if folder.is_dir()
            for path in sorted(folder.glob("*.yaml"))]


def read_case(path: Path) -> dict[str, Any]:
    """A case file, read as patchkit reads recipes, its shape checked (AssertionError naming it)."""
    case = read_yaml(path).build().data
    assert isinstance(case, dict), f"{path}: a case is a mapping"
    unknown = set(case) - CASE_KEYS
    assert not unknown, f"{path}: unknown keys {sorted(unknown)} (a case has {sorted(CASE_KEYS)})"
    assert "spec" in case and "before" in case, f"{path}: a case has `spec` and `before`"
    outcomes = [key for key in CASE_OUTCOMES if key in case]
    assert len(outcomes) == 1, f"{path}: give exactly one of {', '.join(CASE_OUTCOMES)}"
    assert case.get("already", True) is True, f"{path}: `already` is true or absent"
    assert not ("refused" in case and {"message", "message_has"} & set(case)), \
        f"{path}: `refused` is the whole message already"
    return case


def assert_case(op: str, case: Mapping[str, Any], folder: Path) -> EditResult:
    """The case's edit on its `before` gives what the case says, and nothing else. The result."""
    edit = Edit.model_validate({op: case["spec"]})
    edit.op.bind(folder)
    before = case["before"]
    if "refused" in case:
        message = assert_refused(edit, before)
        assert message == case["refused"], f"the refusal says:\n  {message}\nnot:\n  {case['refused']}"
        return EditResult("not_found", before, message)
    result = assert_edit(edit, before, case["after"] if "after" in case else before)
    if "after" in case:
        again = edit.apply(result.source)
        assert again.message == "already in place", f"the second apply says: {again.message}"
    if "message" in case:
        assert result.message == case["message"], f"the message is:\n  {result.message}"
    for part in case.get("message_has", []):
        assert part in result.message, f"the message does not say {part!r}:\n  {result.message}"
    return result


__all__ = ["as_edit", "assert_case", "assert_edit", "assert_idempotent", "assert_refused", "case_files", "read_case"]
