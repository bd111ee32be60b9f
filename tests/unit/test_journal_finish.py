"""Journal.finish: the run's last record, the prune and `end` in one write, the
runs to prune picked without a listing at the end. FakeAgent is the host (patchkit/host/testing.py)."""

from __future__ import annotations

import asyncio

import patchkit.run.steps.registry  # noqa: F401 - registers the step kinds the journal reads records with
from patchkit.run.journal import Journal
from patchkit.run.results import RunRecord, StepResult
from patchkit.host.testing import FakeAgent


def _apply(run_id: str, changed: bool) -> RunRecord:
    step = StepResult(name="s", kind="patch", status="changed" if changed else "ok", file="/site/toy/a.py",
                      sha256_before="0" * 64, sha256_after="1" * 64, backup=f"/state/backups/{run_id}/s")
    return RunRecord(run_id=run_id, kind="apply", recipe="r", recipe_sha256="x", host="h", patchkit_version="t",
                     started=0.0, status=step.status, steps=[step])


def test_the_prune_sees_what_this_session_amended_and_sends_end_last() -> None:
    """A (oldest) changed the file, B changed it on top; this run voids B's change (its record
    amended: rolled back), so A's backup is again the way back and must survive keep_runs 1 —
    though the listing taken at the start still shows B live."""
    agent = FakeAgent()
    for record in (_apply("20260101T000000.000000Z-aaaaaa", True), _apply("20260102T000000.000000Z-bbbbbb", True)):
        agent.journal[("r", record.run_id)] = record.model_dump(mode="json")

    async def run() -> int:
        journal = Journal(agent, "/state")  # type: ignore[arg-type]
        listing = await journal.prefetch("r")
        voided = RunRecord.model_validate(agent.journal[("r", "20260102T000000.000000Z-bbbbbb")])
        voided.rolled_back_steps, voided.rolled_back_by = ["s"], "20260103T000000.000000Z-cccccc"
        await journal.write(voided)  # what unit.void does through ctx.amend
        return await journal.finish(_apply("20260103T000000.000000Z-cccccc", False), 1, listing)

    assert asyncio.run(run()) == 1  # B: its change is undone; A stays, and C is the newest
    assert sorted(run_id for _, run_id in agent.journal) == ["20260101T000000.000000Z-aaaaaa",
                                                             "20260103T000000.000000Z-cccccc"]
    assert [op for op, _ in agent.calls][-4:] == ["journal_write", "journal_write", "journal_prune", "end"]
    assert [op for op, _ in agent.calls].count("journal_list") == 1  # the start's, none at the end
