"""The patch step: plan (read, edit on the control side, diff) and apply (verified write)."""

from __future__ import annotations

import base64
import difflib
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from patchkit import __version__
from patchkit.agent.protocol import APPLY, READ, RESTORE, VERIFY
from patchkit.cache import cache_dir, write_json_quietly
from patchkit.edits import EditError, EditResult
from patchkit.errors import HostError
from patchkit.journal import active_step, unverified_step
from patchkit.recipe import Step
from patchkit.results import Check, RunRecord, StepResult
from patchkit.steps.context import HostContext, gate
from patchkit.steps.kind import Planned, StepKind
from patchkit.steps.patch_files import (
    FilesPlan,
    apply_files,
    files_state,
    plan_files,
    undo_files,
)
from patchkit.steps.upstream import with_upstream_note


@dataclass
class PatchPlan:
    result: StepResult
    new_content: bytes | None = None
    root: str | None = None  # the package folder: the agent refuses a write that leaves it


_HUNK = re.compile(r"^@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@")


def unified_diff(path: str, old: str, new: str, context: int = 3) -> str:
    """difflib's unified diff, over the lines between the common head and tail only (an
    edit of a 7,000-line file changes a few): difflib's time grows with what it compares."""
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    head = len(os.path.commonprefix([a, b]))
    tail = len(os.path.commonprefix([a[head:][::-1], b[head:][::-1]]))
    start = max(0, head - context)
    keep = max(0, tail - context)
    lines = difflib.unified_diff(a[start:len(a) - keep], b[start:len(b) - keep],
                                 fromfile=f"a{path}", tofile=f"b{path}", n=context)
    if not start:
        return "".join(lines)

    def shifted(match: re.Match[str]) -> str:
        old_start, old_len, new_start, new_len = match.groups()
        return f"@@ -{int(old_start) + start}{old_len or ''} +{int(new_start) + start}{new_len or ''} @@"

    return "".join(_HUNK.sub(shifted, line, count=1) if line.startswith("@@") else line for line in lines)


def _diff(ctx: HostContext, path: str, old: str, new: str, key: tuple[str, str]) -> str:
    """The diff of one edit, computed once per run: hosts of a fleet differ only in the path."""
    memo_key = "diff:" + ":".join(key)
    body = ctx.edits.memo.get(memo_key)
    if body is None:
        body = unified_diff("", old, new).split("\n", 2)[2]  # without the ---/+++ lines
        ctx.edits.memo[memo_key] = body
    return f"--- a{path}\n+++ b{path}\n{body}"


def _edit(ctx: HostContext, step: Step, source: bytes, sha: str) -> EditResult:
    key = (f"{ctx.loaded.content_sha256}:{step.name}", sha)
    cached = ctx.edits.results.get(key)
    if cached is not None:
        ctx.edits.hits += 1
        return cached
    assert step.patch
    try:
        text = source.decode("utf-8")
    except UnicodeDecodeError:
        result = EditResult("not_found", "", "the file is not UTF-8 text")
    else:
        # A UTF-8 byte order mark is not Python: edit what follows it, then put it back.
        bom = "\ufeff" if text.startswith("\ufeff") else ""
        result = _stored_edit(step, sha, text[len(bom):]) or _compute_edit(step, sha, text[len(bom):])
        if bom:
            result = EditResult(result.verdict, bom + result.source, result.message)
    ctx.edits.results[key] = result
    return result


# Edits are pure: (edit parameters, file content) -> result. A fleet re-applied daily sees
# the same few file versions again and again, so results are kept on the control machine;
# a no-op run then needs neither libcst nor a parse of the file.
def _edit_cache_path(step: Step, sha: str) -> Path | None:
    assert step.patch
    if step.patch.edit.codemod or step.patch.edit.diff:
        return None  # depends on the user's transformer (or diff) file too
    params = json.dumps([__version__, step.patch.edit.model_dump(mode="json")], sort_keys=True)
    digest = hashlib.sha256(params.encode()).hexdigest()[:24]
    return cache_dir() / "edits" / f"{digest}-{sha}.json"


def _stored_edit(step: Step, sha: str, text: str) -> EditResult | None:
    path = _edit_cache_path(step, sha)
    try:
        data = json.loads(path.read_text()) if path else None
    except (OSError, ValueError):
        return None
    if not data:
        return None
    new = data.get("source", text)
    if data["verdict"] == "changed" and hashlib.sha256(new.encode()).hexdigest() != data.get("sha256_after"):
        return None  # a damaged entry is recomputed, never trusted
    return EditResult(data["verdict"], new, data["message"])


def _compute_edit(step: Step, sha: str, text: str) -> EditResult:
    assert step.patch
    try:
        result = step.patch.edit.apply(text)
    except EditError as exc:
        return EditResult("not_found", text, str(exc))
    path = _edit_cache_path(step, sha)
    if path is not None:
        entry: dict[str, str] = {"verdict": result.verdict, "message": result.message}
        if result.verdict == "changed":
            entry.update(source=result.source, sha256_after=hashlib.sha256(result.source.encode()).hexdigest())
        write_json_quietly(path, entry)
    return result


async def plan_patch(ctx: HostContext, step: Step) -> PatchPlan:
    spec = step.patch
    assert spec is not None
    result = StepResult(name=step.name, kind="patch", status="failed", upstream=step.upstream, why=step.why)
    verdict_gate, located = await gate(ctx, spec.package, spec.versions, spec.modules, read_first=True)
    result.package_version = verdict_gate.version
    if verdict_gate.fail or verdict_gate.skip:
        result.status = "failed" if verdict_gate.fail else "skipped"
        result.message = verdict_gate.fail or verdict_gate.skip or ""
        return PatchPlan(result)

    misses: list[str] = []
    for module in spec.modules:
        path = located["files"].get(module)
        if path is None:
            misses.append(f"{module}: no such module")
            continue
        first = located.pop("read", None)  # once: a later step must see what this one wrote
        read = first if first and first["path"] == path else await ctx.agent.call(READ({"path": path,
                                                                                          "root": located["root"]}))
        if not read["exists"]:
            misses.append(f"{module}: {path} vanished")
            continue
        if read.get("symlink_to"):
            result.file = path
            result.message = (f"{path} is a symlink to {read['symlink_to']}: patchkit does not write through "
                              "symlinks (the file behind it may belong to other environments); nothing changed")
            return PatchPlan(result)
        content = base64.b64decode(read["content_b64"])
        edit = _edit(ctx, step, content, read["sha256"])
        if edit.verdict == "not_found":
            misses.append(f"{path}: {edit.message}")
            continue
        result.file = path
        result.sha256_before = read["sha256"]
        if edit.verdict == "already":
            result.status, result.message = "ok", "already in place"
            result.sha256_after = read["sha256"]
            return PatchPlan(result)
        new_content = edit.source.encode("utf-8")
        result.status = "changed"
        result.message = edit.message
        result.sha256_after = hashlib.sha256(new_content).hexdigest()
        result.diff = _diff(ctx, path, content.decode("utf-8"), edit.source, (read["sha256"], result.sha256_after))
        return PatchPlan(result, new_content, located["root"])

    gate_note = f"; this step applies to {spec.package} {spec.versions}" if spec.versions else ""
    found = f"{spec.package} {verdict_gate.version}" if verdict_gate.version else spec.package
    result.message = f"{found}: target not found — " + " | ".join(misses) + gate_note
    return PatchPlan(result)


async def apply_patch(ctx: HostContext, step: Step, plan: PatchPlan) -> StepResult:
    """Write a planned change through the agent's verified pipeline; first settle a change to
    the same file that an earlier run left unverified (it was cut off)."""
    result = plan.result.model_copy(deep=True)
    if ctx.dry_run or result.status not in ("changed", "ok") or not result.file:
        return result
    left = unverified_step(await ctx.records(), step.name, result.file)
    note = ""
    if left is not None:
        record, done = left
        if result.status == "ok" and done.sha256_after == result.sha256_before:
            return await _settle_unverified(ctx, step, result, record, done)
        if result.status == "changed" and done.sha256_before == result.sha256_before:
            await _void(ctx, record, step.name)  # it never wrote: nothing of it to undo
            note = f" (run {record.run_id} was cut off before its write; this run makes it)"
    if result.status != "changed":
        return result
    assert plan.new_content is not None and result.file and result.sha256_before
    backup = ctx.journal.backup_path(ctx.run_id, step.name, result.file)
    verify = step.checks
    # In the journal before the write (same round trip, pipelined): a run cut off after the
    # host wrote the file still names it and its backup, so it can be rolled back. The agent
    # refuses the write if this record did not land.
    await ctx.record_intent(result.model_copy(update={
        "backup": backup, "verified": False, "message": "cut off while writing or verifying"}))
    try:
        outcome = await ctx.agent.call(APPLY({
            "path": result.file,
            "expected_sha256": result.sha256_before,
            "content_b64": base64.b64encode(plan.new_content).decode(),
            "backup_path": backup,
            "verify_imports": verify.import_,
            "import_timeout_s": verify.timeout_s,
            "root": plan.root,
        }), reply_wait=verify.timeout_s + 120)
    except HostError as exc:
        result.status, result.message = "failed", str(exc)
        return result
    result.checks = [Check.model_validate(c) for c in outcome["checks"]]
    result.backup = backup
    if outcome["ok"]:
        passed = ", ".join(c.name for c in result.checks)
        result.message = f"{result.message}; verified ({passed}){note}"
        result.verified = True
        return result
    result.status = "failed"
    result.restored = outcome["restored"]
    restored = "original restored" if outcome["restored"] else "ORIGINAL NOT RESTORED, backup at " + backup
    result.message = f"{outcome['failure']}; {restored}"
    result.sha256_after = result.sha256_before if outcome["restored"] else None
    return result


async def _settle_unverified(ctx: HostContext, step: Step, result: StepResult, record: RunRecord,
                             done: StepResult) -> StepResult:
    """The file holds what run `record` wrote, but that run was cut off before its checks were
    recorded: run them now; on failure put its original back, as that run would have."""
    verify = step.checks
    assert result.file
    try:
        outcome = await ctx.agent.call(VERIFY({
            "path": result.file, "expected_sha256": done.sha256_after,
            "verify_imports": verify.import_, "import_timeout_s": verify.timeout_s,
        }), reply_wait=verify.timeout_s + 120)
    except HostError as exc:
        result.status, result.message = "failed", f"pending verification of run {record.run_id}: {exc}"
        return result
    result.checks = [Check.model_validate(c) for c in outcome["checks"]]
    cut = f"run {record.run_id} was cut off before its checks were recorded"
    if outcome["ok"]:
        done.verified = True
        await ctx.amend(record)
        result.message = f"already in place; {cut}: verified now ({', '.join(c.name for c in result.checks)})"
        return result
    result.status = "failed"
    assert done.backup  # a journaled change to a file names its backup (RunRecord.changed_steps)
    try:
        await ctx.agent.call(RESTORE({"path": result.file, "backup_path": done.backup,
                                      "expected_current": done.sha256_after, "original_sha256": done.sha256_before,
                                      "force": False}))
    except HostError as exc:
        result.message = f"{cut}, and its change fails: {outcome['failure']}; ORIGINAL NOT RESTORED: {exc}"
        return result
    await _void(ctx, record, step.name)
    result.restored, result.sha256_after = True, done.sha256_before
    result.message = f"{cut}, and its change fails: {outcome['failure']}; original restored"
    return result


async def _void(ctx: HostContext, record: RunRecord, step_name: str) -> None:
    """Mark an earlier run's change to this step as undone (by this run)."""
    record.rolled_back_steps = sorted(set(record.rolled_back_steps) | {step_name})
    record.rolled_back_by = ctx.run_id
    await ctx.amend(record)


def state_of(planned: StepResult, records: list[RunRecord]) -> StepResult:
    """Map a dry plan plus the journal to applied | pending | drifted | not-applicable."""
    out = planned.model_copy(deep=True)
    out.diff = planned.diff
    if planned.status == "skipped":
        out.status = "not-applicable"
        return out
    left = unverified_step(records, planned.name, planned.file) if planned.file else None
    if left is not None:
        record, done = left
        if planned.status == "ok" and done.sha256_after == planned.sha256_before:
            out.status = "pending"
            out.message = (f"pending verification: run {record.run_id} wrote this change and was cut off before "
                           "its checks were recorded; apply re-runs them (and restores the original if they fail)")
            return out
        if planned.status == "changed" and done.sha256_before == planned.sha256_before:
            out.status = "pending"
            out.message = f"run {record.run_id} was cut off before its write; {planned.message}"
            return out
    ours = active_step(records, planned.name, planned.file) if planned.file else None
    if planned.status == "failed":
        mine = [s for r in records for s in r.live_steps() if s.name == planned.name]
        if mine:
            out.status, out.message = "drifted", f"patched by patchkit, but now: {planned.message}"
        return out
    if planned.status == "changed":
        if ours:
            out.status = "drifted"
            out.message = f"patched by patchkit, but the file changed since and the change is gone: {planned.message}"
        else:
            out.status = "pending"
        return out
    # already in place
    if ours and ours.sha256_after != planned.sha256_before:
        out.status = "drifted"
        out.message = "in place, but the file changed since patchkit wrote it (rollback would refuse)"
    elif ours:
        out.status, out.message = "applied", f"applied by patchkit (backup {ours.backup})"
    else:
        out.status, out.message = "applied", "in place (not applied by patchkit: nothing to roll back)"
    return out


async def _record_view(ctx: HostContext, package: str, out: StepResult, records: list[RunRecord]) -> None:
    """What `audit` says of the step's files, added to its status: do they match the installed
    distribution's RECORD, and if not, does a patchkit change explain the difference?"""
    from patchkit.audit import PATCHED, UNEXPLAINED, explain
    from patchkit.installed import installed

    paths = [out.file] if out.file else [f.file for f in out.files or []]
    try:
        dist = await installed(ctx.agent, package, only=paths)
    except HostError:
        return  # not installed from a wheel (no RECORD): nothing to compare with
    if not dist.listed:
        return
    where = f"{dist.name} {dist.version}'s RECORD"
    whys = [explain(changed, records) for changed in dist.changed]
    verdict = "matches" if not whys else UNEXPLAINED if any(w.verdict == UNEXPLAINED for w in whys) else PATCHED
    out.details = {**(out.details or {}), "record": verdict}
    if verdict == "matches":
        out.message += f"; {'the file matches' if out.file else 'the files match'} {where}"
    elif verdict == PATCHED:
        out.message += f"; differs from {where}: {PATCHED}"
    else:
        why = next(w.why for w in whys if w.verdict == UNEXPLAINED)
        out.message += f"; differs from {where}: {why} (patchkit audit lists every such file)"


PatchData = PatchPlan | FilesPlan  # one file's plan, or a multi-file plan (patch_files.py)


class PatchKind(StepKind[PatchData]):
    name = "patch"

    async def plan(self, ctx: HostContext, step: Step) -> Planned[PatchData]:
        targets = step.patch.edit.diff.targets() if step.patch and step.patch.edit.diff else []
        if len(targets) > 1 or any(p.added or p.deleted for _, _, p in targets):
            files = await plan_files(ctx, step)  # several files, or one added/removed (patch_files.py)
            return Planned(files.result, files)
        planned = await plan_patch(ctx, step)
        return Planned(planned.result, planned)

    async def apply(self, ctx: HostContext, step: Step, planned: Planned[PatchData]) -> StepResult:
        if isinstance(planned.data, FilesPlan):
            return await apply_files(ctx, step, planned.data)
        return await apply_patch(ctx, step, PatchPlan(planned.result, planned.data.new_content, planned.data.root))

    async def state(self, ctx: HostContext, step: Step, planned: Planned[PatchData],
                    records: list[RunRecord]) -> StepResult:
        if isinstance(planned.data, FilesPlan):
            out = files_state(planned.result, records)
        else:
            out = state_of(planned.result, records)
        if step.patch and (out.file or out.files):
            await _record_view(ctx, step.patch.package, out, records)
        return with_upstream_note(out, step)

    async def undo(self, ctx: HostContext, done: StepResult, target: RunRecord) -> StepResult:
        """The backup back in place, only if the file still holds what the run wrote (or forced)."""
        if done.files:
            return await undo_files(ctx, done, target)
        result = StepResult(name=done.name, kind="patch", status="failed", file=done.file,
                            sha256_before=done.sha256_after, sha256_after=done.sha256_before, backup=done.backup)
        assert done.file and done.backup  # a journaled change to a file names both (RunRecord.changed_steps)
        try:
            outcome = await ctx.agent.call(RESTORE({"path": done.file, "backup_path": done.backup,
                                                    "expected_current": done.sha256_after,
                                                    "original_sha256": done.sha256_before, "force": ctx.force}))
        except HostError as exc:
            result.message = str(exc)
            return result
        if outcome["already"]:
            result.status, result.message = "ok", "already the original"
        else:
            result.status, result.message = "changed", f"restored the original from run {target.run_id}"
        return result
