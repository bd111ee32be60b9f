"""Every edit op's golden cases, as data: tests/unit/edit_cases/OP/CASE.yaml, one edit each.

A case file says, as a recipe would write it (read by patchkit's own YAML reader):
    about:   why the case exists (optional)
    spec:    the op's parameters (the op is the folder's name)
    before:  the source
and what must come of it, one of:
    after:   the exact result: it compiles, and a second apply says `already in place` and
             changes nothing (patchkit.edits.testing.assert_edit)
    already: true: the edit is found in place, and the source stays as it is
    refused: the whole message of a refusal (verdict not_found; the source stays as it is)
and, with `after` or `already`, optionally `message` (the whole message) or `message_has`
(parts of it). Files a spec names (a codemod's module, a diff) sit beside the cases: the
folder is the recipe's folder. Adding an op asks for its folder, with at least one change
and one refusal (test_every_op_has_cases_with_a_change_and_a_refusal), and fuzz.py: its
generator for the real-file fuzz tier (tests/edit_fuzz.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from patchkit.base.yamlsource import read_yaml
from patchkit.edits import EDIT_KINDS, Edit
from patchkit.edits.testing import assert_edit, assert_refused

CASES = Path(__file__).resolve().parent / "edit_cases"
OUTCOMES = ("after", "already", "refused")
KEYS = {"about", "spec", "before", *OUTCOMES, "message", "message_has"}


def read_case(path: Path) -> dict[str, Any]:
    case = read_yaml(path).build().data
    assert isinstance(case, dict), f"{path}: a case is a mapping"
    unknown = set(case) - KEYS
    assert not unknown, f"{path}: unknown keys {sorted(unknown)} (a case has {sorted(KEYS)})"
    assert "spec" in case and "before" in case, f"{path}: a case has `spec` and `before`"
    outcomes = [key for key in OUTCOMES if key in case]
    assert len(outcomes) == 1, f"{path}: give exactly one of {', '.join(OUTCOMES)}"
    assert case.get("already", True) is True, f"{path}: `already` is true or absent"
    assert not ("refused" in case and {"message", "message_has"} & set(case)), \
        f"{path}: `refused` is the whole message already"
    return case


def all_cases() -> list[tuple[str, Path]]:
    return [(folder.name, path) for folder in sorted(CASES.iterdir()) if folder.is_dir()
            for path in sorted(folder.glob("*.yaml"))]


def check_case(op: str, case: dict[str, Any], folder: Path) -> None:
    """The case's edit on its `before` gives what the case says, and nothing else."""
    edit = Edit.model_validate({op: case["spec"]})
    edit.op.bind(folder)
    before = case["before"]
    if "refused" in case:
        message = assert_refused(edit, before)
        assert message == case["refused"], f"the refusal says:\n  {message}\nnot:\n  {case['refused']}"
        return
    result = assert_edit(edit, before, case["after"] if "after" in case else before)
    if "after" in case:
        again = edit.apply(result.source)
        assert again.message == "already in place", f"the second apply says: {again.message}"
    if "message" in case:
        assert result.message == case["message"], f"the message is:\n  {result.message}"
    for part in case.get("message_has", []):
        assert part in result.message, f"the message does not say {part!r}:\n  {result.message}"


@pytest.mark.parametrize("op, path", all_cases(), ids=[f"{op}/{path.stem}" for op, path in all_cases()])
def test_edit_case(op: str, path: Path) -> None:
    check_case(op, read_case(path), path.parent)


def test_every_op_has_cases_with_a_change_and_a_refusal() -> None:
    folders = {folder.name for folder in CASES.iterdir() if folder.is_dir()}
    assert folders - set(EDIT_KINDS) == set(), "a case folder names no edit op"
    for op in EDIT_KINDS:
        cases = [read_case(path) for path in sorted((CASES / op).glob("*.yaml"))]
        assert any("after" in case for case in cases), f"edit op {op} has no case in {CASES / op} that changes a file"
        assert any("refused" in case for case in cases), f"edit op {op} has no case in {CASES / op} that is refused"


def test_every_op_has_a_fuzz_generator_beside_its_cases() -> None:
    """The real-file fuzz tier (tests/real/test_edit_fuzz.py) draws its ops from the registry: each
    op's folder has fuzz.py with a generator, or naming where else the op is fuzzed."""
    from tests.edit_fuzz import fuzzed_elsewhere, generators, missing_generator

    drawn, elsewhere = generators(), fuzzed_elsewhere()
    missing = [op for op in EDIT_KINDS if op not in drawn and op not in elsewhere]
    assert not missing, "; ".join(missing_generator(op) for op in missing)
    assert not set(drawn) & set(elsewhere), "an op is drawn here and said to be fuzzed elsewhere"


@pytest.mark.parametrize("wrong, says", [
    ({"after": 'x = ["a", "c", "b"]\n'}, "not the expected text"),
    ({"already": True}, "expected `already`"),
    ({"refused": "no such thing"}, "expected a refusal"),
    ({"after": 'x = ["a", "b", "c"]\n', "message": "added 'c'"}, "the message is"),
    ({"after": 'x = ["a", "b", "c"]\n', "message_has": ["after"]}, "does not say 'after'"),
])
def test_a_case_that_does_not_hold_fails(wrong: dict[str, Any], says: str, tmp_path: Path) -> None:
    case = {"spec": {"names": ["x"], "values": ["c"]}, "before": 'x = ["a", "b"]\n', **wrong}
    with pytest.raises(AssertionError, match=says):
        check_case("list_insert", case, tmp_path)


def test_a_refusal_is_compared_whole(tmp_path: Path) -> None:
    case = {"spec": {"names": ["y"], "values": ["c"]}, "before": 'x = ["a"]\n', "refused": "no assignment"}
    with pytest.raises(AssertionError, match="the refusal says"):
        check_case("list_insert", case, tmp_path)


def test_a_malformed_case_is_named(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("spec: {names: [x], values: [c]}\nbefore: 'x = []'\nafter: 'x = [\"c\"]'\nalready: true\n")
    with pytest.raises(AssertionError, match="bad.yaml: give exactly one of after, already, refused"):
        read_case(path)
    path.write_text("spec: {}\nbefore: ''\nafter: ''\nexpected: 1\n")
    with pytest.raises(AssertionError, match=r"unknown keys \['expected'\]"):
        read_case(path)
