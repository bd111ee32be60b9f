"""Does a running server run the code on disk? Decided from the journal, without the server.

A server imports its code once, at start. Every change patchkit makes to a file is journaled
(the run, the step, the file, its hash before and after), and a server's record names the
run that started it. So the changes made after a server started are the journaled changes of
later runs, plus those of steps after its launch step in its own run. If any of those files
holds, now, other bytes than it did when the server started, the server is stale: its
process runs code that is no longer on disk (or never was, after a rollback).

Net effect per file, not "was it touched": a patch applied with --no-restart and rolled back
again leaves the server running what is on disk, and it is not stale.

Pure: records in, a verdict out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from patchkit.run.results import RunRecord, StepResult


@dataclass(frozen=True)
class FileEdit:
    file: str
    before: str | None  # sha256; None: no file, or not known
    after: str | None


@dataclass(frozen=True)
class Stale:
    """The change that makes a server stale: the newest run that changed a file under it."""

    run_id: str
    step: str
    file: str

    def describe(self, pid: Any, started: str) -> str:
        return f"pid {pid} started {started}, before run {self.run_id} changed {self.file}"


# kind name -> the files a changed result of that kind changed: each kind's `file_edits`, filled
# by run/steps/registry.py (this module is below the kinds: it cannot import them).
KIND_EDITS: dict[str, Callable[[StepResult, StepResult | None], list[FileEdit]]] = {}


def file_edits(step: StepResult, undone: StepResult | None = None) -> list[FileEdit]:
    """The files a journaled step changed, with their hashes, as its kind says. `undone`: for
    a rollback's step, the step of the run it undid (whose files a deploy's undo put back)."""
    edits_of = KIND_EDITS.get(step.kind)
    if edits_of is None or step.status != "changed":
        return []
    return edits_of(step, undone)


def recorded_edits(step: StepResult) -> list[FileEdit]:
    """The files a step's result names (`files`, or the one `file`), changed ones only."""
    if step.files:
        return [FileEdit(f.file, f.sha256_before, f.sha256_after) for f in step.files
                if f.sha256_before != f.sha256_after or f.sha256_before is None]
    if step.file:
        return [FileEdit(step.file, step.sha256_before, step.sha256_after)]
    return []


def put_back(undone: StepResult | None) -> list[FileEdit]:
    """What undoing `undone` did to its files: each edit reversed."""
    return [FileEdit(e.file, e.after, e.before) for e in file_edits(undone)] if undone is not None else []


def _changes_of(record: RunRecord, by_id: dict[str, RunRecord], after_step: str | None) -> list[tuple[str, FileEdit]]:
    """(step name, edit) of a record; only those after `after_step` when it is given and present."""
    steps = record.steps
    if after_step is not None:
        names = [s.name for s in steps]
        if after_step in names:
            steps = steps[names.index(after_step) + 1:]
    target = by_id.get(record.rollback_of or "") if record.kind == "rollback" else None
    out: list[tuple[str, FileEdit]] = []
    for step in steps:
        undone = next((s for s in target.steps if s.name == step.name), None) if target else None
        out.extend((step.name, edit) for edit in file_edits(step, undone))
    return out


def stale_change(server: dict[str, Any], step_name: str, records: list[RunRecord],
                 current: RunRecord | None = None) -> Stale | None:
    """Why the server (its record on the host) runs code older than the disk, or None.

    records: the host's run records, of every recipe (another recipe may patch what this one
    serves). current: the run in progress, whose earlier steps' changes count too.
    A server record from before records named their run is compared by start time.
    """
    started_by = server.get("run_id")
    started_at = server.get("started")
    ordered = sorted([r for r in records if current is None or r.run_id != current.run_id], key=lambda r: r.run_id)
    if current is not None:
        ordered.append(current)
    by_id = {r.run_id: r for r in ordered}
    first_before: dict[str, str | None] = {}
    last: dict[str, tuple[str, str, str | None]] = {}  # file -> (run, step, after)
    for record in ordered:
        if started_by:
            if record.run_id < started_by:
                continue
            after = step_name if record.run_id == started_by else None
        else:
            if started_at is None or record.started < float(started_at):
                continue
            after = None
        for name, edit in _changes_of(record, by_id, after):
            first_before.setdefault(edit.file, edit.before)
            last[edit.file] = (record.run_id, name, edit.after)
    newest: Stale | None = None
    for file, (run_id, name, after) in last.items():
        before = first_before[file]
        if before is not None and before == after:
            continue  # changed and changed back: the server's bytes are on disk again
        if newest is None or run_id >= newest.run_id:
            newest = Stale(run_id, name, file)
    return newest


def last_change(records: list[RunRecord], current: RunRecord | None = None) -> Stale | None:
    """The newest file change journaled on the host (for `status`: what a server must postdate)."""
    ordered = sorted([r for r in records if current is None or r.run_id != current.run_id], key=lambda r: r.run_id)
    if current is not None:
        ordered.append(current)
    by_id = {r.run_id: r for r in ordered}
    newest: Stale | None = None
    for record in ordered:
        for name, edit in _changes_of(record, by_id, None):
            newest = Stale(record.run_id, name, edit.file)
    return newest
