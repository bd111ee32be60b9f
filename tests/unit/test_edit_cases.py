"""Every edit op's golden cases, as data: tests/unit/edit_cases/OP/CASE.yaml, one edit each
(the format: patchkit.edits.testing, which reads and checks them).

Adding an op asks for its folder, with at least one change and one refusal
(test_every_op_has_cases_with_a_change_and_a_refusal), and fuzz.py beside them: its
generator for the real-file fuzz tier (tests/edit_fuzz.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from patchkit.edits import EDIT_KINDS
from patchkit.edits.testing import assert_case, case_files, read_case

CASES = Path(__file__).resolve().parent / "edit_cases"


@pytest.mark.parametrize("op, path", case_files(CASES), ids=[f"{op}/{path.stem}" for op, path in case_files(CASES)])
def test_edit_case(op: str, path: Path) -> None:
    assert_case(op, read_case(path), path.parent)


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
        assert_case("list_insert", case, tmp_path)


def test_a_refusal_is_compared_whole(tmp_path: Path) -> None:
    case = {"spec": {"names": ["y"], "values": ["c"]}, "before": 'x = ["a"]\n', "refused": "no assignment"}
    with pytest.raises(AssertionError, match="the refusal says"):
        assert_case("list_insert", case, tmp_path)


def test_a_malformed_case_is_named(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("spec: {names: [x], values: [c]}\nbefore: 'x = []'\nafter: 'x = [\"c\"]'\nalready: true\n")
    with pytest.raises(AssertionError, match="bad.yaml: give exactly one of after, already, refused"):
        read_case(path)
    path.write_text("spec: {}\nbefore: ''\nafter: ''\nexpected: 1\n")
    with pytest.raises(AssertionError, match=r"unknown keys \['expected'\]"):
        read_case(path)
