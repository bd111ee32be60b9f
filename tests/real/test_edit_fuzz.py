"""Property tier: random edits on real vLLM files (0.16.0 and 0.32.0, from the cached wheels).

Each op's generator (tests/unit/edit_cases/OP/fuzz.py) draws an edit of a place found with
`ast`; tests/edit_fuzz.py checks what every op promises (the result compiles, a second apply
is `already`, nothing outside the edited expression changes, the expression means what was
asked, the target matched exactly one place).

Hypothesis draws files, targets and values (derandomized: the same examples every run).
`python -m tests.real.test_edit_fuzz [N_FILES]` runs the same checks over many more files.
"""

from __future__ import annotations

import random
import sys

import pytest

from patchkit.edits import EDIT_KINDS
from tests.edit_fuzz import (
    FRESH,
    RELEASES,
    Case,
    FileInfo,
    draw_case,
    fuzzed_elsewhere,
    literal_or_none,
    run_case,
    sample_files,
    where,
)

# ------------------------------------------------------------------------ the tests

OPS = [kind for kind in EDIT_KINDS if kind not in fuzzed_elsewhere()]  # the registry's order
EXAMPLES_PER_OP = 30

pytestmark = [pytest.mark.wheels, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def files() -> dict[str, tuple[FileInfo, ...]]:
    return {v: sample_files(v) for v in RELEASES}


@pytest.mark.parametrize("version", RELEASES)
@pytest.mark.parametrize("op", OPS)
def test_random_edits_on_real_files(op: str, version: str, files: dict[str, tuple[FileInfo, ...]]) -> None:
    from hypothesis import HealthCheck, given, settings, strategies as st

    pool = files[version]

    @settings(max_examples=EXAMPLES_PER_OP, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.integers(0, len(pool) - 1), st.integers(0, 2**32 - 1))
    def one_edit(index: int, seed: int) -> None:
        rng = random.Random(seed)
        for offset in range(len(pool)):  # the first file (from index on) with a target for this op
            case = draw_case(op, pool[(index + offset) % len(pool)], rng)
            if case is not None:
                run_case(case)
                return
        raise AssertionError(f"no file offers a target for {op}")

    one_edit()


def test_the_harness_catches_an_edit_outside_its_target(files: dict[str, tuple[FileInfo, ...]]) -> None:
    """The checks can fail: a case whose `place` is not the edited one is caught."""
    info = next(i for i in files["0.16.0"] if sum(p.kind == "assignment" for p in i.places) > 1)
    first, other = [p for p in info.places if p.kind == "assignment"][:2]
    case = Case(info, other, {"set_value": where(info, first) | {"value": FRESH}}, lambda node: literal_or_none(node) == (True, FRESH), FRESH)
    with pytest.raises(AssertionError, match="changed outside the target|does not mean"):
        run_case(case)


def main(argv: list[str]) -> int:
    """Many more edits than the test tier: python -m tests.real.test_edit_fuzz [FILES] [VERSION ...]"""
    count = int(argv[0]) if argv else 400
    versions = argv[1:] or RELEASES
    edits = files_seen = 0
    refusals: dict[str, int] = {}
    shapes: dict[str, int] = {}
    failures: list[str] = []
    for version in versions:
        for info in sample_files(version, count):
            files_seen += 1
            rng = random.Random(f"{version}:{info.path.name}")
            for op in OPS:
                case = draw_case(op, info, rng)
                if case is None:
                    continue
                edits += 1
                shapes[f"{op} {case.shape}"] = shapes.get(f"{op} {case.shape}", 0) + 1
                try:
                    outcome = run_case(case)
                except Exception as exc:  # noqa: BLE001 - collect every failure for the report
                    failures.append(f"{version} {type(exc).__name__}: {str(exc)[:600]}")
                    continue
                if isinstance(outcome, str):
                    refusals[outcome] = refusals.get(outcome, 0) + 1
    print(f"{edits} edits on {files_seen} files; {len(failures)} failures; refusals: {refusals}")
    for shape, n in sorted(shapes.items()):
        print(f"  {n:5d}  {shape}")
    for failure in failures:
        print("-" * 60)
        print(failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
