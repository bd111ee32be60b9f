"""staleness.py: which journaled changes make a running server stale (pure, no host)."""

from __future__ import annotations

from patchkit.run.results import RunRecord, StepResult
from patchkit.run.steps.staleness import last_change, stale_change


def record(run_id: str, *steps: StepResult, kind: str = "apply", rollback_of: str | None = None,
           recipe: str = "r") -> RunRecord:
    return RunRecord(run_id=run_id, kind=kind, recipe=recipe, recipe_sha256="", host="h", patchkit_version="0",
                     started=0.0, steps=list(steps), rollback_of=rollback_of)


def patch(name: str, file: str, before: str, after: str) -> StepResult:
    return StepResult(name=name, kind="patch", status="changed", file=file, sha256_before=before,
                      sha256_after=after, backup="/b")


def launch(name: str = "serve") -> StepResult:
    return StepResult(name=name, kind="launch", status="changed")


SERVER = {"pid": 7, "run_id": "2", "started": 100.0}


def test_changes_before_the_server_started_do_not_count() -> None:
    records = [record("1", patch("p", "/f.py", "a", "b")), record("2", launch())]
    assert stale_change(SERVER, "serve", records) is None


def test_a_later_run_or_a_later_step_of_its_own_run_makes_it_stale() -> None:
    later = [record("2", launch()), record("3", patch("p", "/f.py", "a", "b"))]
    found = stale_change(SERVER, "serve", later)
    assert found is not None and (found.run_id, found.file) == ("3", "/f.py")
    own = [record("2", patch("p", "/g.py", "a", "b"), launch(), patch("q", "/f.py", "a", "b"))]
    found = stale_change(SERVER, "serve", own)
    assert found is not None and (found.run_id, found.step) == ("2", "q")
    assert "before run 2 changed /f.py" in found.describe(7, "then")


def test_changed_and_changed_back_is_not_stale() -> None:
    p = patch("p", "/f.py", "a", "b")
    undone = StepResult(name="p", kind="patch", status="changed", file="/f.py", sha256_before="b", sha256_after="a")
    records = [record("2", launch()), record("3", p), record("4", undone, kind="rollback", rollback_of="3")]
    assert stale_change(SERVER, "serve", records) is None
    assert last_change(records) is not None and last_change(records).run_id == "4"  # type: ignore[union-attr]


def test_a_rollback_without_file_names_is_read_from_the_run_it_undid() -> None:
    deployed = StepResult(name="d", kind="deploy", status="changed",
                          details={"files": [{"path": "/m/x", "sha256_before": None, "sha256_after": "n"}]})
    undone = StepResult(name="d", kind="deploy", status="changed")
    server = {"pid": 7, "run_id": "4", "started": 0.0}
    records = [record("3", deployed), record("4", launch()), record("5", undone, kind="rollback", rollback_of="3")]
    found = stale_change(server, "serve", records)
    assert found is not None and (found.run_id, found.file) == ("5", "/m/x")


def test_the_run_in_progress_counts_and_old_records_compare_by_time() -> None:
    current = record("9", patch("p", "/f.py", "a", "b"))
    assert stale_change(SERVER, "serve", [record("2", launch())], current) is not None
    legacy = {"pid": 7, "started": 100.0}  # no run_id: from before records named their run
    older = record("1", patch("p", "/f.py", "a", "b"))
    newer = record("3", patch("p", "/f.py", "b", "c")).model_copy(update={"started": 200.0})
    assert stale_change(legacy, "serve", [older]) is None
    assert stale_change(legacy, "serve", [older, newer]) is not None


def pip_step(before: str | None, after: str | None, name: str = "pin") -> StepResult:
    return StepResult(name=name, kind="pip", status="changed",
                      details={"package": "transformers", "version_before": before, "version_after": after})


def test_a_pip_step_that_installs_another_version_after_the_server_started_makes_it_stale() -> None:
    later = [record("2", launch()), record("3", pip_step("4.1", "4.2"))]
    found = stale_change(SERVER, "serve", later)
    assert found is not None and (found.run_id, found.step, found.file) == ("3", "pin", "the installed transformers")
    # rolled back to the version the server imported: it runs what is installed again
    back = record("4", pip_step("4.2", "4.1"), kind="rollback", rollback_of="3")
    assert stale_change(SERVER, "serve", [*later, back]) is None
