"""`patchkit audit DIST`: every installed file of a distribution that no longer matches its
RECORD, each explained by the host's journal (`patched by patchkit`: run, recipe, step) or
`unexplained` (a hand edit, a `sed`, a partial upgrade). Nothing on the host is written.

The report reuses the run report's shape: one row per file (a StepResult of kind `file`:
status `applied` when patchkit's journal explains it, `drifted` when nothing does), so the
table, the JSON document and exit code 3 work as for `status`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from patchkit.run import journal
from patchkit.run.installed import ChangedFile, InstalledDist, installed
from patchkit.run.journal import PATCHED, UNEXPLAINED, Explanation  # noqa: F401 - re-exported
from patchkit.run.results import HostResult, RunRecord, StepResult
from patchkit.run.steps.registry import written_files

if TYPE_CHECKING:
    from patchkit.run.runner import Session


def explain(changed: ChangedFile, records: list[RunRecord]) -> Explanation:
    """journal.explain, with each journaled step's files as its kind says."""
    return journal.explain(changed, records, written_files)


def rows(dist: InstalledDist, records: list[RunRecord]) -> list[StepResult]:
    out = []
    for changed in dist.changed:
        why = explain(changed, records)
        out.append(StepResult(
            name=changed.rel, kind="file", status="applied" if why.verdict == PATCHED else "drifted",
            message=why.why, file=changed.path, sha256_after=changed.sha256, package_version=dist.version,
            details={"verdict": why.verdict, "change": changed.change, "record_sha256": changed.record_sha256,
                     "run_id": why.run_id, "recipe": why.recipe, "step": why.step}))
    return out


def ours(records: list[RunRecord]) -> list[str]:
    """Every file the journal's changes still in place say patchkit wrote."""
    return sorted({path for record in journal.active_changes(records).values() for step in record.live_steps()
                   for path, _ in written_files(step)})


def outside_notice(dist: InstalledDist) -> str:
    """The RECORD rows that leave the distribution's folder: skipped, never opened."""
    shown = "; ".join(f"{row.rel!r} ({row.why})" for row in dist.outside)
    more = dist.outside_count - len(dist.outside)
    return (f"{dist.outside_count} RECORD row(s) outside {dist.location} skipped, not read"
            f" (a console script in bin/ is one): {shown}" + (f"; and {more} more" if more > 0 else ""))


async def audit_host(session: Session, dist: str, budget_s: float | None = None) -> HostResult:
    records = await session.journal.runs(None)
    found = await installed(session.agent, dist, hash_anyway=ours(records), budget_s=budget_s)
    files = rows(found, records)
    unexplained = sum(row.status == "drifted" for row in files)
    summary = (f"{found.name} {found.version} at {found.location}: {found.checked} files checked against RECORD, "
               f"{len(files)} differ" + (f", {unexplained} unexplained" if unexplained else ""))
    notices = [outside_notice(found)] if found.outside_count else []
    if found.outside_count:
        summary += f"; {found.outside_count} row(s) outside its folder skipped"
    status: Literal["drifted", "applied", "ok", "failed"] = "drifted" if unexplained else "applied" if files else "ok"
    if found.out_of_time:  # a partial audit is no verdict: say how far it got
        status = "failed"
        noun = "file" if found.unchecked == 1 else "files"
        summary += (f"; stopped at the time budget ({found.budget_s:g} s): {found.unchecked} {noun} not checked "
                    "(--time-budget raises it)")
    return HostResult(status=status, steps=files, message=summary, notices=notices)
