"""A patch step's files as one unit: apply, settle, state and undo, whatever the edit.

The plan (run/steps/patch.py) finds the files a step changes and their new content: the one
module an edit targets, or every file a diff names. From there on there is one pipeline, for
one file as for thirty: the agent's `apply_files` backs up, writes and verifies the unit and
puts every file it wrote back on any failure (a check, a write error); a run cut off before
its checks were recorded is settled by the next; status compares the plan with the journal;
rollback puts every file back, or none.

A unit of one file that exists before and after is recorded in the single-file fields of
StepResult (`file`, `sha256_before/after`, `backup`, `diff`: the product's JSON for a
one-file step), any other in `files`; `unit_files` reads either form, journals written by
earlier versions included.
"""

from __future__ import annotations

import base64
import posixpath
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

from patchkit.host.agent.protocol import APPLY_FILES, HASH, REMOVE_FILE, RESTORE, VERIFY, VerifyProgram
from patchkit.base.errors import HostError
from patchkit.run.journal import live_change
from patchkit.recipe.model import Step
from patchkit.run.results import Check, FileChange, RunRecord, StepResult
from patchkit.run.steps.context import HostContext


@dataclass
class UnitPlan:
    result: StepResult
    contents: dict[str, bytes | None] = field(default_factory=dict)  # path -> new content (None: removed)
    root: str | None = None  # the package folder: the agent refuses a path that leaves it


def verify_program(ctx: HostContext, step: Step) -> VerifyProgram | None:
    """The step's `verify: python` for the agent: its code, the recipe's variables (real values:
    the host needs them; what comes back is redacted before it is journaled), its timeout."""
    verify = step.checks
    if verify.python is None:
        return None
    return {"code": verify.python, "variables": ctx.loaded.variables, "timeout_s": verify.timeout_s}


def checks_wait(step: Step) -> float:
    """How long the control side waits for a write and its checks: the import check, then the
    verify program or (a failed import check) the import again on the restored files, each
    with the step's timeout."""
    return step.checks.timeout_s * 2 + 120


def unit_files(step: StepResult) -> list[FileChange]:
    """The files of a patch step's unit, from either form it is recorded in."""
    if step.files is not None:
        return step.files
    if step.file:
        return [FileChange(file=step.file, sha256_before=step.sha256_before, sha256_after=step.sha256_after,
                           backup=step.backup, diff=step.diff)]
    return []


def set_unit(result: StepResult, changes: list[FileChange], many: bool) -> None:
    """Record a unit's files in result: as `files` (many), or in the one file's fields."""
    if many:
        result.files = changes
        diffs = [c.diff for c in changes if c.diff]
        result.diff = "".join(diffs) if diffs else None
        return
    (change,) = changes
    result.file, result.sha256_before, result.sha256_after = change.file, change.sha256_before, change.sha256_after
    result.backup, result.diff = change.backup, change.diff


def _many(step: StepResult) -> bool:
    return step.files is not None


Standing = Literal["holds", "untouched", "half"]


def standing(done: StepResult, now: list[FileChange]) -> Standing | None:
    """Where the host stands against a journaled change `done`, from what a plan read (`now`:
    each file's sha256_before): every file as it wrote them, none of them, or some (a run cut
    off between two files); None when a file is neither (changed by someone else)."""
    seen = {c.file: c.sha256_before for c in now}
    files = unit_files(done)
    if not files or any(c.file not in seen for c in files):
        return None
    after = [seen[c.file] == c.sha256_after for c in files]
    before = [seen[c.file] == c.sha256_before for c in files]
    if all(after):
        return "holds"
    if all(before):
        return "untouched"
    if all(a or b for a, b in zip(after, before)):
        return "half"
    return None


def _cut_off_mid_write(record: RunRecord, done: StepResult, now: list[FileChange]) -> str:
    seen = {c.file: c.sha256_before for c in now}
    files = [c for c in unit_files(done) if c.sha256_before != c.sha256_after]
    wrote = [c.file for c in files if seen.get(c.file) == c.sha256_after]
    return f"run {record.run_id} was cut off while writing: {len(wrote)} of its {len(files)} files written ({', '.join(wrote)})"


# ---------------------------------------------------------------- apply

async def apply_unit(ctx: HostContext, step: Step, plan: UnitPlan,
                     replan: Callable[[], Awaitable[UnitPlan]]) -> StepResult:
    """Write a planned unit through the agent's verified pipeline; first settle what an earlier
    run left of a change to the same unit when it was cut off (`replan`: read the host again)."""
    result = plan.result.model_copy(deep=True)
    if ctx.dry_run or result.status not in ("changed", "ok") or not unit_files(result):
        return result
    note = ""
    live = live_change(await ctx.records(), step.name, result.file)
    if live is not None and live[1].verified is False:
        record, done = live
        where = standing(done, unit_files(result))
        if where == "holds" and result.status == "ok":
            return await settle(ctx, step, result, record, done, plan.root)
        if where == "untouched" and result.status == "changed":
            await void(ctx, record, step.name)  # it never wrote: nothing of it to undo
            note = f" (run {record.run_id} was cut off before its write; this run makes it)"
        elif where == "half":
            # Part of that run's unit is on the host: put it back first, so this run's record holds
            # every file's original and one rollback undoes the whole unit.
            cut = _cut_off_mid_write(record, done, unit_files(result))
            problem = await _put_back_all(ctx, unit_files(done), force=False, root=plan.root)
            if problem:
                result.status, result.message = "failed", f"{cut}; putting them back failed: {problem}"
                return result
            await void(ctx, record, step.name)
            plan = await replan()
            result = plan.result.model_copy(deep=True)
            note = f" ({cut}: put back first, the unit written whole by this run)"
    if result.status != "changed":
        return result
    return await _write(ctx, step, result, plan.contents, note, plan.root)


async def _write(ctx: HostContext, step: Step, result: StepResult, contents: dict[str, bytes | None],
                 note: str, root: str | None = None) -> StepResult:
    many = _many(result)
    changes = unit_files(result)
    ordered = [c for c in changes if c.file in contents]
    for change in ordered:
        if change.sha256_before is not None:
            change.backup = ctx.journal.backup_path(ctx.run_id, step.name, change.file)
    set_unit(result, changes, many)
    result.root = root  # journaled: rollback and a later verification hold the files to it too
    # In the journal before the write (same round trip, pipelined): a run cut off after the
    # host wrote a file still names it and its backup, so it can be rolled back. The agent
    # refuses the write if this record did not land.
    await ctx.record_intent(result.model_copy(update={"verified": False,
                                                      "message": "cut off while writing or verifying"}))
    verify = step.checks
    try:
        outcome = await ctx.agent.call(APPLY_FILES({
            "files": [{"path": c.file, "expected_sha256": c.sha256_before, "backup_path": c.backup or "",
                       "content_b64": _b64(contents[c.file])} for c in ordered],
            "verify_imports": verify.import_,
            "import_timeout_s": verify.timeout_s,
            "verify_python": verify_program(ctx, step),
            "root": root,
            "package": step.patch.package if step.patch else None,
        }), reply_wait=checks_wait(step))
    except HostError as exc:
        result.status, result.message = "failed", str(exc)
        return result
    result.checks = [Check.model_validate(c) for c in outcome["checks"]]
    made = outcome.get("created_dirs", {})
    for change in ordered:
        if change.sha256_before is None:  # a file the unit adds
            change.created_dirs = made.get(change.file, [])
    set_unit(result, changes, many)
    passed = ", ".join(c.name for c in result.checks)
    if outcome["ok"]:
        result.verified = True
        result.message = f"{result.message}; {'verified as one unit' if many else 'verified'} ({passed}){note}"
        return result
    result.status = "failed"
    result.restored = outcome["restored"]
    written, back = outcome["written"], outcome["restored_files"]
    for change in ordered:
        if change.file not in written or change.file in back:
            change.sha256_after = change.sha256_before  # as it was: nothing of this run to undo
    set_unit(result, changes, many)
    result.details = {"written": written, "restored": back}
    result.message = f"{outcome['failure']}; {_restored_note(ordered, written, back, outcome['restored'], many)}"
    return result


def _restored_note(ordered: list[FileChange], written: list[str], back: list[str], restored: bool,
                   many: bool) -> str:
    """What a failed write left: the journal and the report say which files were put back."""
    if not restored:
        left = [c for c in ordered if c.file in written and c.file not in back]
        if not many:
            return f"ORIGINAL NOT RESTORED, backup at {ordered[0].backup}"
        return ("NOT ALL FILES RESTORED: " + ", ".join(c.file for c in left) + " still hold this run's change "
                "(rollback puts them back; backups at " + ", ".join(c.backup or "none: added" for c in left) + ")")
    if len(written) == len(ordered):
        return f"all {len(ordered)} files restored" if many else "original restored"
    if not written:
        return "nothing was written"
    return (f"{len(back)} of {len(ordered)} files were written before it and are restored ({', '.join(back)}); "
            "the others were never written")


def _b64(content: bytes | None) -> str | None:
    return None if content is None else base64.b64encode(content).decode()


# ---------------------------------------------------------------- settle

async def settle(ctx: HostContext, step: Step, result: StepResult, record: RunRecord,
                 done: StepResult, root: str | None) -> StepResult:
    """The unit holds what run `record` wrote, but that run was cut off before its checks were
    recorded: run them now; on failure put every original back, as that run would have, inside
    `root`, the package folder this run's plan located (not the one the record names)."""
    verify = step.checks
    files = unit_files(done)
    cut = f"run {record.run_id} was cut off before its checks were recorded"
    try:
        outcome = await ctx.agent.call(VERIFY({
            "files": [{"path": c.file, "expected_sha256": c.sha256_after} for c in files],
            "verify_imports": verify.import_, "import_timeout_s": verify.timeout_s, "root": root,
            "verify_python": verify_program(ctx, step),
            "package": step.patch.package if step.patch else None,
        }), reply_wait=checks_wait(step))
    except HostError as exc:
        result.status, result.message = "failed", f"pending verification of run {record.run_id}: {exc}"
        return result
    result.checks = [Check.model_validate(c) for c in outcome["checks"]]
    if outcome["ok"]:
        done.verified = True
        await ctx.amend(record)
        result.message = f"already in place; {cut}: verified now ({', '.join(c.name for c in result.checks)})"
        return result
    result.status = "failed"
    many = _many(result)
    problem = await _put_back_all(ctx, files, force=False, root=root)
    if problem:
        lost = "NOT ALL FILES RESTORED" if many else "ORIGINAL NOT RESTORED"
        result.message = f"{cut}, and its change fails: {outcome['failure']}; {lost}: {problem}"
        return result
    await void(ctx, record, step.name)
    originals = {c.file: c.sha256_before for c in files}
    now = unit_files(result)
    for change in now:
        change.sha256_after = originals.get(change.file, change.sha256_after)
    set_unit(result, now, many)
    result.restored = True
    restored = f"all {len(files)} files restored" if many else "original restored"
    result.message = f"{cut}, and its change fails: {outcome['failure']}; {restored}"
    return result


async def void(ctx: HostContext, record: RunRecord, step_name: str) -> None:
    """Mark an earlier run's change to this step as undone (by this run)."""
    record.rolled_back_steps = sorted(set(record.rolled_back_steps) | {step_name})
    record.rolled_back_by = ctx.run_id
    await ctx.amend(record)


# ---------------------------------------------------------------- state

def unit_state(planned: StepResult, records: list[RunRecord]) -> StepResult:
    """A dry plan plus the journal -> applied | pending | drifted | not-applicable."""
    out = planned.model_copy(deep=True)
    if planned.status == "skipped":
        out.status = "not-applicable"
        return out
    many = _many(planned)
    now = unit_files(planned)
    live = live_change(records, planned.name, planned.file)
    ours = live[1] if live else None
    if live is not None and live[1].verified is False:
        record, done = live
        where = standing(done, now)
        if where == "holds" and planned.status == "ok":
            out.status = "pending"
            out.message = (f"pending verification: run {record.run_id} wrote this change and was cut off before "
                           "its checks were recorded; apply re-runs them (and restores the original if they fail)")
            return out
        if where == "untouched" and planned.status == "changed":
            out.status = "pending"
            out.message = f"run {record.run_id} was cut off before its write; {planned.message}"
            return out
        if where == "half":
            out.status = "pending"
            out.message = (f"{_cut_off_mid_write(record, done, now)}; apply puts them back and writes the whole "
                           "unit, rollback puts them back")
            return out
    moved_away = _journaled_elsewhere(records, planned.name, now) if ours is None else None
    if moved_away is not None and planned.status in ("changed", "ok"):
        out.status = "drifted"
        loads = ", ".join(c.file for c in now)
        out.message = (f"patched by patchkit in {', '.join(moved_away)}, but the target now loads {loads} instead "
                       f"(what runs is not the file patchkit changed; rollback undoes only that change): "
                       f"{planned.message}")
        return out
    if planned.status == "failed":
        if any(s.name == planned.name for r in records for s in r.live_steps()):
            out.status, out.message = "drifted", f"patched by patchkit, but now: {planned.message}"
        return out
    if planned.status == "changed":
        if ours is not None:
            out.status = "drifted"
            what = "a file" if many else "the file"
            out.message = f"patched by patchkit, but {what} changed since and the change is gone: {planned.message}"
        else:
            out.status = "pending"
        return out
    if ours is None:  # already in place
        out.status, out.message = "applied", "in place (not applied by patchkit: nothing to roll back)"
        return out
    wrote = {c.file: c.sha256_after for c in unit_files(ours)}
    seen = {c.file: c.sha256_before for c in now}
    moved = [f for f, sha in wrote.items() if seen.get(f, sha) != sha]
    if moved:
        out.status = "drifted"
        out.message = "in place, but changed since patchkit wrote it (rollback would refuse)" + (
            f": {', '.join(moved)}" if many else "")
    else:  # short enough for a table row; the backup's path is in --json (`backup`)
        run_id = live[0].run_id if live else "?"
        out.status = "applied"
        out.message = f"applied by patchkit in run {run_id}" + (f" ({len(wrote)} files)" if many else "")
        out.backup = ours.backup
    return out


def _journaled_elsewhere(records: list[RunRecord], name: str, now: list[FileChange]) -> list[str] | None:
    """The files of the step's live journaled change when none of them is a file the target
    resolves now (`now`, what the plan located): patchkit's change sits in a copy that no longer
    runs (another copy first on the path, a package folder or extension beside the module)."""
    seen = {c.file for c in now}
    live = [s for r in sorted(records, key=lambda r: r.run_id) for s in r.live_steps()
            if s.name == name and s.kind == "patch"]
    files = [c.file for c in unit_files(live[-1])] if live else []
    return files if files and seen and not seen & set(files) else None


# ---------------------------------------------------------------- undo

def refused_undo(done: StepResult, message: str) -> StepResult:
    """A journaled unit that rollback does not touch, failed with why (its files as recorded, swapped)."""
    many = _many(done)
    files = unit_files(done)
    changed = [c for c in files if c.sha256_before != c.sha256_after]
    result = StepResult(name=done.name, kind=done.kind, status="failed", upstream=done.upstream, why=done.why,
                        message=message)
    swapped = [c.model_copy(update={"sha256_before": c.sha256_after, "sha256_after": c.sha256_before,
                                    "diff": reverse_diff(c.diff) if c.diff else c.diff})
               for c in (changed if many else files)]
    if swapped:
        set_unit(result, swapped, many)
    return result


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def reverse_diff(diff: str) -> str:
    """The unified diff that undoes `diff`: what a rollback does, from the file as the apply
    left it to the file as it was. Each run of changed lines keeps its removed lines first (as
    a review page pairs them). On the text, line by line (split at "\\n" only), so every other
    byte of a line (a "\\r", a form feed) stays as the apply's diff showed it; unified_diff.
    reversed_diff works on a parsed diff, which keeps neither."""
    out: list[str] = []
    removed: list[str] = []
    added: list[str] = []
    left = 0  # lines of the hunk still to come (a line "--- x" inside a hunk is a removed "-- x")
    lines = diff.split("\n")
    for i, line in enumerate(lines):
        hunk = _HUNK.match(line) if not left else None
        if line[:1] not in ("-", "+", "\\") or not left and line.startswith(("--- ", "+++ ")):
            out.extend(removed + added)
            removed.clear()
            added.clear()
        if not left and line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            old, new = line[4:], lines[i + 1][4:]
            out.append("--- " + ("a" + new[1:] if new.startswith("b/") else new))
            out.append("+++ " + ("b" + old[1:] if old.startswith("a/") else old))
        elif not left and line.startswith("+++ ") and out and out[-1].startswith("+++ "):
            continue  # the header's second line, written above
        elif hunk:
            old_start, old_len, new_start, new_len = hunk.groups()
            left = int(old_len or 1) + int(new_len or 1)
            out.append(f"@@ -{new_start}{',' + new_len if new_len else ''} "
                       f"+{old_start}{',' + old_len if old_len else ''} @@" + line[hunk.end():])
        elif line.startswith("\\"):  # "\ No newline at end of file": stays with the line it follows
            (added if added and lines[i - 1].startswith("-") else removed if removed else out).append(line)
        elif line[:1] in ("-", "+") and left:
            (added if line[0] == "-" else removed).append(("+" if line[0] == "-" else "-") + line[1:])
            left -= 1
        else:
            out.append(line)
            left = max(0, left - 2)  # a context line counts on both sides
    out.extend(removed + added)
    return "\n".join(out)


def outside_root(root: str, file: str) -> bool:
    """Is `file` (as a run record names it) outside the package folder `root`, by names? The
    agent checks again by real paths, through what it opens (refuse_leaving_root)."""
    root, file = posixpath.normpath(root), posixpath.normpath(file)
    return file != root and not file.startswith(root.rstrip("/") + "/")


async def undo_unit(ctx: HostContext, done: StepResult, target: RunRecord, root: str) -> StepResult:
    """Every file back from its backup, as a unit: if one drifted, none is touched (unless --force);
    if one is outside `root`, the package folder the step locates on the host now (never the
    folder the record names: a record says where to write, the host says where the package
    is), none is, forced or not."""
    many = _many(done)
    files = unit_files(done)
    changed = [c for c in files if c.sha256_before != c.sha256_after]
    result = refused_undo(done, "")
    outside = [c.file for c in files if outside_root(root, c.file)]
    if outside:
        result.message = (f"run {target.run_id} names {', '.join(outside)}, outside {root}, the package folder the "
                          "step locates on the host now: rollback writes only inside it; nothing was restored "
                          "(--force does not override this)")
        return result
    done = done.model_copy(update={"root": root})
    if len(changed) > 1:  # one file: the agent's restore makes the same check, in the same step
        try:
            now = await ctx.agent.call(HASH({"paths": [c.file for c in changed], "confined": True, "root": done.root}))
        except HostError as exc:
            result.message = str(exc)
            return result
        drifted = [c.file for c in changed if now.get(c.file) not in (c.sha256_after, c.sha256_before)]
        if drifted and not ctx.force:
            result.message = (f"{', '.join(drifted)} drifted: changed since patchkit wrote it; refusing to restore "
                              f"any of the step's {len(changed)} files (--force restores anyway)")
            return result
    restored, problems = 0, []
    for change in changed:
        try:
            restored += await _put_back(ctx, change, ctx.force, done.root)
        except HostError as exc:
            problems.append(str(exc))
    if problems:
        result.message = "; ".join(problems)
        return result
    if not restored:
        result.status, result.message = "ok", "already the original"
    elif many:
        result.status, result.message = "changed", f"restored {restored} files from run {target.run_id}"
    else:
        result.status, result.message = "changed", f"restored the original from run {target.run_id}"
    return result


async def _put_back_all(ctx: HostContext, files: list[FileChange], force: bool, root: str | None) -> str | None:
    """Every file of a unit as it was before it; the problems, None when all went back."""
    problems = []
    for change in files:
        if change.sha256_before == change.sha256_after:
            continue
        try:
            await _put_back(ctx, change, force, root)
        except HostError as exc:
            problems.append(str(exc))
    return "; ".join(problems) or None


async def _put_back(ctx: HostContext, change: FileChange, force: bool, root: str | None) -> bool:
    """One file as it was before the change: its backup back, or removed (a file the diff
    added, then the folders made for it, those left empty); True when something changed.
    Refused when the file drifted (unless force), and when it is no longer inside `root`, the
    package folder its apply was confined to (force or not)."""
    if change.sha256_before is None:
        assert change.sha256_after is not None  # a file the diff added: what it holds now
        removed = await ctx.agent.call(REMOVE_FILE({"path": change.file, "expected_sha256": change.sha256_after,
                                                    "root": root, "force": force,
                                                    "remove_dirs": change.created_dirs or []}))
        return bool(removed["removed"])
    assert change.backup is not None  # a file the run changed or deleted was backed up first
    outcome = await ctx.agent.call(RESTORE({"path": change.file, "backup_path": change.backup,
                                            "expected_current": change.sha256_after,
                                            "original_sha256": change.sha256_before, "force": force,
                                            "root": root, "state_dir": ctx.journal.state_dir}))
    return not outcome["already"]
