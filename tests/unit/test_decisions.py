"""The pure decisions, as tables: what `status` says for a plan and a journal, which run a
rollback undoes, which change is still live. No host, no subprocess: milliseconds."""

from __future__ import annotations

import pytest

from patchkit.run.journal import active_changes, rollback_target, unverified_step
from patchkit.run.results import FileChange, RunRecord, StepResult
from patchkit.run.steps.launch import launch_state
from patchkit.run.steps.registry import KINDS, kind_named
from patchkit.run.steps.unit import standing, unit_state

FILE = "/site/pkg/config.py"
A, B, C = "a" * 64, "b" * 64, "c" * 64  # original, patched, someone else's version


def planned(status: str, before: str | None = A, after: str | None = B, message: str = "") -> StepResult:
    return StepResult(name="add", kind="patch", status=status, file=FILE, sha256_before=before,
                      sha256_after=after, message=message)


def change(before: str = A, after: str = B, verified: bool | None = True, name: str = "add") -> StepResult:
    return StepResult(name=name, kind="patch", status="changed", file=FILE, sha256_before=before,
                      sha256_after=after, backup=f"/state/backups/{name}", verified=verified)


def run(run_id: str, *steps: StepResult, kind: str = "apply", rolled_back: tuple[str, ...] = ()) -> RunRecord:
    return RunRecord(run_id=run_id, kind=kind, recipe="r", recipe_sha256="0" * 64, host="h",
                     patchkit_version="0", started=0.0, steps=list(steps), rolled_back_steps=list(rolled_back))


STATE_TABLE = [
    # (what the plan found, journal records, status, words in the message)
    ("outside the gate", planned("skipped", message="vllm 0.32.0 is outside <0.22"), [], "not-applicable", ""),
    ("never applied", planned("changed"), [], "pending", ""),
    ("applied by us", planned("ok", before=B, after=B), [run("r1", change())], "applied", "applied by patchkit"),
    ("in place, not by us", planned("ok", before=B, after=B), [], "applied", "not applied by patchkit"),
    ("our change undone by hand", planned("changed"), [run("r1", change())], "drifted", "the change is gone"),
    ("in place, file changed since", planned("ok", before=C, after=C), [run("r1", change())], "drifted",
     "changed since patchkit wrote it"),
    ("target gone after our change", planned("failed", message="target not found"), [run("r1", change())],
     "drifted", "patched by patchkit, but now"),
    ("target not found, never ours", planned("failed", message="target not found"), [], "failed", ""),
    ("cut off during its checks", planned("ok", before=B, after=B), [run("r1", change(verified=False))],
     "pending", "pending verification"),
    ("cut off before its write", planned("changed"), [run("r1", change(verified=False))], "pending",
     "cut off before its write"),
    ("rolled back", planned("changed"), [run("r1", change(), rolled_back=("add",))], "pending", ""),
    ("record from before `verified`", planned("ok", before=B, after=B), [run("r1", change(verified=None))],
     "applied", "applied by patchkit"),
]


@pytest.mark.parametrize("found, records, status, words", [row[1:] for row in STATE_TABLE],
                         ids=[row[0] for row in STATE_TABLE])
def test_status_of_a_patch(found: StepResult, records: list[RunRecord], status: str, words: str) -> None:
    out = unit_state(found, records)
    assert out.status == status, out
    assert words in out.message, out.message


F1, F2 = "/site/pkg/a.py", "/site/pkg/b.py"


def unit(before: tuple[str | None, str | None], after: tuple[str | None, str | None]) -> list[FileChange]:
    return [FileChange(file=f, sha256_before=b, sha256_after=a, backup=f"/state/backups/{f}" if b else None)
            for f, b, a in zip((F1, F2), before, after)]


def planned_unit(status: str, now: tuple[str | None, str | None], after: tuple[str | None, str | None] | None = None,
                 message: str = "") -> StepResult:
    """A plan of a two-file step that read `now` (each file's sha256_before)."""
    return StepResult(name="fix", kind="patch", status=status, files=unit(now, after or now), message=message)


def unit_change(verified: bool | None = True, status: str = "changed", restored: bool | None = None) -> StepResult:
    return StepResult(name="fix", kind="patch", status=status, files=unit((A, A), (B, B)), verified=verified,
                      restored=restored)


UNIT_TABLE = [
    ("never applied", planned_unit("changed", (A, A), (B, B)), [], "pending", ""),
    ("applied by us", planned_unit("ok", (B, B)), [run("r1", unit_change())], "applied", "in run r1 (2 files)"),
    ("one file changed since", planned_unit("ok", (B, C)), [run("r1", unit_change())], "drifted", F2),
    ("cut off before its checks", planned_unit("ok", (B, B)), [run("r1", unit_change(verified=False))], "pending",
     "pending verification"),
    ("cut off before its write", planned_unit("changed", (A, A), (B, B)), [run("r1", unit_change(verified=False))],
     "pending", "cut off before its write"),
    ("cut off between its files", planned_unit("changed", (B, A), (B, B)), [run("r1", unit_change(verified=False))],
     "pending", "1 of its 2 files written"),
    ("a failure left files in place", planned_unit("changed", (B, A), (B, B)),
     [run("r1", unit_change(status="failed", restored=False))], "drifted", "the change is gone"),
    ("a failure put all back", planned_unit("changed", (A, A), (B, B)),
     [run("r1", unit_change(status="failed", restored=True))], "pending", ""),
]


@pytest.mark.parametrize("found, records, status, words", [row[1:] for row in UNIT_TABLE],
                         ids=[row[0] for row in UNIT_TABLE])
def test_status_of_a_multi_file_patch(found: StepResult, records: list[RunRecord], status: str, words: str) -> None:
    out = unit_state(found, records)
    assert out.status == status, out
    assert words in out.message, out.message


STANDING_TABLE = [
    ("as it wrote them", (B, B), "holds"),
    ("as before it", (A, A), "untouched"),
    ("one of two written", (B, A), "half"),
    ("someone else's", (B, C), None),
]


@pytest.mark.parametrize("now, where", [row[1:] for row in STANDING_TABLE], ids=[row[0] for row in STANDING_TABLE])
def test_where_the_host_stands_against_a_journaled_unit(now: tuple[str, str], where: str | None) -> None:
    assert standing(unit_change(), unit(now, now)) == where


CHANGED_TABLE = [
    ("patch in place", StepResult(name="s", kind="patch", status="changed", file=FILE, backup="/b"), True),
    ("patch of several files", StepResult(name="s", kind="patch", status="changed", files=unit((A, A), (B, B))), True),
    ("patch failed, restored", StepResult(name="s", kind="patch", status="failed", file=FILE, backup="/b",
                                          restored=True), False),
    ("patch failed, not restored", StepResult(name="s", kind="patch", status="failed", file=FILE, backup="/b",
                                              restored=False), True),
    ("patch already in place", StepResult(name="s", kind="patch", status="ok", file=FILE), False),
    ("launch with servers", StepResult(name="s", kind="launch", status="failed", details={"servers": [{}]}), True),
    ("launch without", StepResult(name="s", kind="launch", status="changed", details={}), False),
    ("deploy", StepResult(name="s", kind="deploy", status="changed", file="/m", backup="/b"), True),
    ("check", StepResult(name="s", kind="check", status="ok"), False),
]


@pytest.mark.parametrize("done, changed", [row[1:] for row in CHANGED_TABLE], ids=[row[0] for row in CHANGED_TABLE])
def test_each_kind_says_whether_a_journaled_result_changed_the_host(done: StepResult, changed: bool) -> None:
    assert kind_named(done.kind).changed(done) is changed
    assert (run("r1", done).changed_steps() == [done]) is changed  # what rollback and the journal go by


LAUNCH_TABLE = [
    ("healthy", {"status": "ok", "details": {"running": True, "same_command": True, "pid": 7}}, "applied"),
    ("same command, unhealthy", {"status": "changed", "details": {"running": True, "same_command": True}}, "drifted"),
    ("another command runs", {"status": "changed", "details": {"running": True, "same_command": False}}, "pending"),
    ("stopped", {"status": "changed", "details": {"running": False}}, "pending"),
]


@pytest.mark.parametrize("found, status", [row[1:] for row in LAUNCH_TABLE], ids=[row[0] for row in LAUNCH_TABLE])
def test_status_of_a_launch(found: dict, status: str) -> None:
    result = StepResult(name="serve", kind="launch", message="whatever the plan said", **found)
    assert launch_state(result).status == status


def test_rollback_undoes_the_newest_live_run_and_then_the_one_before() -> None:
    old, new = run("r1", change()), run("r2", change(before=B, after=C))
    assert rollback_target([old, new], None, None).run_id == "r2"
    new.rolled_back_steps = ["add"]
    assert rollback_target([old, new], None, None).run_id == "r1"
    old.rolled_back_steps = ["add"]
    assert rollback_target([old, new], None, None) is None


def test_rollback_target_by_run_id_and_by_step() -> None:
    patch_run = run("r1", change(name="add"))
    other_run = run("r2", change(name="other"))
    assert rollback_target([patch_run, other_run], "r1", None).run_id == "r1"
    assert rollback_target([patch_run, other_run], "r9", None) is None
    assert rollback_target([patch_run, other_run], None, ["add"]).run_id == "r1"
    rollback = run("r3", change(), kind="rollback")
    assert rollback_target([rollback], None, None) is None  # a rollback is not undone by rollback


def test_rollback_run_takes_a_unique_prefix_and_refuses_an_ambiguous_one() -> None:
    import pytest

    from patchkit.run.journal import AmbiguousRun

    a, b, c = (run(rid, change(name="add")) for rid in ("20261201T101010.1Z-aa", "20261201T101010.1Z-ab", "20261202T0"))
    assert rollback_target([a, b, c], "20261202", None) is c
    assert rollback_target([a, b, c], "20261201T101010.1Z-ab", None) is b  # a whole id is never ambiguous
    with pytest.raises(AmbiguousRun, match="names 2 runs: 20261201T101010.1Z-aa, 20261201T101010.1Z-ab"):
        rollback_target([a, b, c], "20261201", None)


def test_live_changes_and_unverified_steps() -> None:
    verified, cut = run("r1", change()), run("r2", change(before=B, after=C, verified=False))
    assert active_changes([verified, cut])[("add", FILE)].run_id == "r2"
    found = unverified_step([verified, cut], "add", FILE)
    assert found is not None and found[0].run_id == "r2"
    assert unverified_step([verified], "add", FILE) is None
    cut.rolled_back_steps = ["add"]  # voided by a later run: the verified one is live again
    assert unverified_step([verified, cut], "add", FILE) is None
    assert active_changes([verified, cut])[("add", FILE)].run_id == "r1"


def test_the_recipe_s_step_kinds_are_the_registry_s() -> None:
    """A recipe key for every registered kind and a kind for every recipe key: a kind added
    to one and not the other is caught here, not by a user's recipe."""
    from patchkit.recipe.model import STEP_KINDS, Step

    assert set(STEP_KINDS) == set(KINDS)
    assert all(name in Step.model_fields for name in KINDS)
    for name, kind in KINDS.items():
        assert kind.name == name
        assert Step.model_fields[name].annotation == kind.spec_model | None
