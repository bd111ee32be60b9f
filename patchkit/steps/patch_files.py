"""A patch step that changes several files: a multi-file `diff` edit, verified as one unit.

plan: read every file the diff names (paths under the package's root), apply each file's
hunks by meaning; any file not found fails the step and nothing changes. apply: the agent's
`apply_files` backs up and writes them all, then checks them all; any failure restores every
one. The step's result lists its files (`files`: path, sha256 before/after, backup, diff);
status, rollback and the journal work on that list, file by file, as one change.
"""

from __future__ import annotations

import base64
import hashlib
import posixpath
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from patchkit.agent.protocol import APPLY_FILES, HASH, READ, REMOVE_FILE, RESTORE, VERIFY
from patchkit.edits import EditError
from patchkit.edits.specs import DiffEdit
from patchkit.errors import HostError
from patchkit.journal import active_changes
from patchkit.recipe import Step
from patchkit.results import Check, FileChange, RunRecord, StepResult
from patchkit.steps.context import HostContext, gate

if TYPE_CHECKING:
    from patchkit.edits.hunk_locate import FileOutcome


@dataclass
class FilesPlan:
    result: StepResult
    contents: dict[str, bytes | None]  # path -> new content (None: removed), for the files that change
    root: str | None = None  # the package folder: the agent refuses a path that leaves it


def unified_diff(path: str, old: str, new: str) -> str:
    import difflib

    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        fromfile=f"a{path}", tofile=f"b{path}"))


async def plan_files(ctx: HostContext, step: Step) -> FilesPlan:
    spec = step.patch
    assert spec is not None and spec.edit.diff is not None
    diff: DiffEdit = spec.edit.diff
    result = StepResult(name=step.name, kind="patch", status="failed", upstream=step.upstream, why=step.why)
    verdict_gate, located = await gate(ctx, spec.package, spec.versions, spec.modules)
    result.package_version = verdict_gate.version
    if verdict_gate.fail or verdict_gate.skip:
        result.status = "failed" if verdict_gate.fail else "skipped"
        result.message = verdict_gate.fail or verdict_gate.skip or ""
        return FilesPlan(result, {})
    root = located["root"]
    reads: list[tuple[str, str, Any]] = []
    for rel, _module, patch in diff.targets():
        path = posixpath.join(root, *rel.split("/")[1:])
        reads.append((rel, path, await ctx.agent.send(READ({"path": path, "root": root}))))
    changes: list[FileChange] = []
    contents: dict[str, bytes | None] = {}
    misses: list[str] = []
    for rel, path, pending in reads:
        read = await pending.result()
        if not read["exists"]:
            outcome = diff.apply_to(rel, None)  # a file the diff adds, or one it deleted already
            if outcome.verdict == "not_found":
                misses.append(f"{path}: {outcome.message}")
                continue
            change = FileChange(file=path, message=outcome.message)
            if outcome.verdict == "changed" and outcome.source is not None:
                new = outcome.source.encode("utf-8")
                change.sha256_after = hashlib.sha256(new).hexdigest()
                change.diff = unified_diff(path, "", outcome.source).replace(f"--- a{path}", "--- /dev/null", 1)
                contents[path] = new
            changes.append(change)
            continue
        if read.get("symlink_to"):
            misses.append(f"{path} is a symlink to {read['symlink_to']}: patchkit does not write through symlinks")
            continue
        content = base64.b64decode(read["content_b64"])
        try:
            text = content.decode("utf-8")
        except UnicodeDecodeError:
            misses.append(f"{path}: not UTF-8 text")
            continue
        bom = "\ufeff" if text.startswith("\ufeff") else ""
        key = f"diff-file:{ctx.loaded.content_sha256}:{step.name}:{rel}:{read['sha256']}"
        cached: FileOutcome | None = ctx.edits.memo.get(key)  # a fleet's hosts hold the same files: once
        if cached is not None:
            outcome = cached
            ctx.edits.hits += 1
        else:
            try:
                outcome = diff.apply_to(rel, text[len(bom):])
            except EditError as exc:
                misses.append(f"{path}: {exc}")
                continue
            ctx.edits.memo[key] = outcome
        if outcome.verdict == "not_found":
            misses.append(outcome.message)
            continue
        change = FileChange(file=path, sha256_before=read["sha256"], sha256_after=read["sha256"],
                            message=outcome.message)
        if outcome.verdict == "changed" and outcome.source is None:  # the diff deletes it
            change.sha256_after = None
            change.diff = unified_diff(path, text, "").replace(f"+++ b{path}", "+++ /dev/null", 1)
            contents[path] = None
        elif outcome.verdict == "changed" and outcome.source is not None:
            new = (bom + outcome.source).encode("utf-8")
            change.sha256_after = hashlib.sha256(new).hexdigest()
            change.diff = unified_diff(path, text, bom + outcome.source)
            contents[path] = new
        changes.append(change)
    if misses:
        found = f"{spec.package} {verdict_gate.version}" if verdict_gate.version else spec.package
        note = f"; this step applies to {spec.package} {spec.versions}" if spec.versions else ""
        result.message = f"{found}: target not found — " + " | ".join(misses) + note
        return FilesPlan(result, {})
    result.files = changes
    if not contents:
        result.status, result.message = "ok", f"already in place ({len(changes)} files)"
        return FilesPlan(result, {})
    result.status = "changed"
    result.diff = "".join(c.diff for c in changes if c.diff)
    result.message = "; ".join(c.message for c in changes if c.file in contents)
    return FilesPlan(result, contents, root)


async def apply_files(ctx: HostContext, step: Step, plan: FilesPlan) -> StepResult:
    """Write every changed file through the agent's `apply_files`: one unit, all or none."""
    result = plan.result.model_copy(deep=True)
    if ctx.dry_run or result.status not in ("changed", "ok") or not result.files:
        return result
    if result.status == "ok":
        left = _live(await ctx.records(), step.name)
        if left is not None and left[1].verified is False and _holds(result, left[1]):
            return await _settle(ctx, step, result, *left)
        return result
    for change in result.files:
        if change.file in plan.contents and change.sha256_before is not None:
            change.backup = ctx.journal.backup_path(ctx.run_id, step.name, change.file)
    ordered = [c for c in result.files if c.file in plan.contents]
    await ctx.record_intent(result.model_copy(update={"verified": False,
                                                      "message": "cut off while writing or verifying"}))
    verify = step.checks
    try:
        outcome = await ctx.agent.call(APPLY_FILES({
            "files": [{"path": c.file, "expected_sha256": c.sha256_before, "backup_path": c.backup or "",
                       "content_b64": _b64(plan.contents[c.file])} for c in ordered],
            "verify_imports": verify.import_,
            "import_timeout_s": verify.timeout_s,
            "root": plan.root,
        }), reply_wait=verify.timeout_s + 120)
    except HostError as exc:
        result.status, result.message = "failed", str(exc)
        return result
    result.checks = [Check.model_validate(c) for c in outcome["checks"]]
    if outcome["ok"]:
        result.verified = True
        result.message = f"{result.message}; verified as one unit ({', '.join(c.name for c in result.checks)})"
        return result
    result.status = "failed"
    result.restored = outcome["restored"]
    restored = (f"all {len(ordered)} files restored" if outcome["restored"]
                else "NOT ALL FILES RESTORED, backups at " + ", ".join(c.backup or "" for c in ordered))
    result.message = f"{outcome['failure']}; {restored}"
    if outcome["restored"]:
        for change in result.files:
            change.sha256_after = change.sha256_before
    return result


def _b64(content: bytes | None) -> str | None:
    return None if content is None else base64.b64encode(content).decode()


def _live(records: list[RunRecord], name: str) -> tuple[RunRecord, StepResult] | None:
    """The journaled run whose change to this multi-file step is in place (not rolled back)."""
    record = active_changes(records).get((name, ""))
    if record is None:
        return None
    done = next((s for s in record.changed_steps() if s.name == name and s.files), None)
    return (record, done) if done is not None else None


def _ours(records: list[RunRecord], name: str) -> StepResult | None:
    live = _live(records, name)
    return live[1] if live else None


def _holds(planned: StepResult, done: StepResult) -> bool:
    """Every file is what that run wrote."""
    now = {c.file: c.sha256_before for c in planned.files or []}
    return all(now.get(c.file) == c.sha256_after for c in done.files or [])


async def _settle(ctx: HostContext, step: Step, result: StepResult, record: RunRecord,
                  done: StepResult) -> StepResult:
    """The files hold what run `record` wrote, but it was cut off before its checks were
    recorded: run them now (each file's syntax, the imports once); on failure put every
    original back, as that run would have."""
    verify = step.checks
    imports = verify.import_
    timeout_s = verify.timeout_s
    cut = f"run {record.run_id} was cut off before its checks were recorded"
    files = done.files or []
    present = [c for c in files if c.sha256_after is not None]  # a removed file has nothing to check
    failure = None
    checks: list[Check] = []
    try:
        for i, change in enumerate(present):
            outcome = await ctx.agent.call(VERIFY({
                "path": change.file, "expected_sha256": change.sha256_after,
                "verify_imports": imports if i == len(present) - 1 else [], "import_timeout_s": timeout_s,
            }), reply_wait=timeout_s + 120)
            checks += [Check.model_validate(c) for c in outcome["checks"]]
            if not outcome["ok"]:
                failure = outcome["failure"]
                break
    except HostError as exc:
        result.status, result.message = "failed", f"pending verification of run {record.run_id}: {exc}"
        return result
    result.checks = checks
    if failure is None:
        done.verified = True
        await ctx.amend(record)
        result.message = f"already in place; {cut}: verified now ({', '.join(c.name for c in checks)})"
        return result
    result.status = "failed"
    for change in files:
        try:
            await _put_back(ctx, change, force=False)
        except HostError as exc:
            result.message = f"{cut}, and its change fails: {failure}; NOT ALL FILES RESTORED: {exc}"
            return result
    record.rolled_back_steps = sorted(set(record.rolled_back_steps) | {step.name})
    record.rolled_back_by = ctx.run_id
    await ctx.amend(record)
    result.restored = True
    result.message = f"{cut}, and its change fails: {failure}; all {len(files)} files restored"
    return result


def files_state(planned: StepResult, records: list[RunRecord]) -> StepResult:
    """applied | pending | drifted | not-applicable for a multi-file step, from the plan and the journal."""
    out = planned.model_copy(deep=True)
    if planned.status == "skipped":
        out.status = "not-applicable"
        return out
    ours = _ours(records, planned.name)
    if ours is not None and ours.verified is False:
        out.status = "pending"
        out.message = f"pending verification: a run wrote these files and was cut off before its checks; {planned.message}"
        return out
    if planned.status == "failed":
        if ours is not None:
            out.status, out.message = "drifted", f"patched by patchkit, but now: {planned.message}"
        return out
    if planned.status == "changed":
        if ours is not None:
            out.status = "drifted"
            out.message = f"patched by patchkit, but a file changed since and the change is gone: {planned.message}"
        else:
            out.status = "pending"
        return out
    if ours is None:
        out.status, out.message = "applied", "in place (not applied by patchkit: nothing to roll back)"
        return out
    wrote = {c.file: c.sha256_after for c in ours.files or []}
    now = {c.file: c.sha256_before for c in planned.files or []}
    moved = [f for f, sha in wrote.items() if now.get(f, sha) != sha]
    if moved:
        out.status = "drifted"
        out.message = f"in place, but changed since patchkit wrote it (rollback would refuse): {', '.join(moved)}"
    else:
        out.status, out.message = "applied", f"applied by patchkit ({len(wrote)} files, backups in the journal)"
    return out


async def undo_files(ctx: HostContext, done: StepResult, target: RunRecord) -> StepResult:
    """Every file back from its backup, as a unit: if one drifted, none is touched (unless --force)."""
    changed = [c for c in done.files or [] if c.sha256_before != c.sha256_after]
    result = StepResult(name=done.name, kind="patch", status="failed", upstream=done.upstream, why=done.why,
                        files=[c.model_copy(update={"sha256_before": c.sha256_after, "sha256_after": c.sha256_before})
                               for c in changed])
    try:
        now = await ctx.agent.call(HASH({"paths": [c.file for c in changed]}))
    except HostError as exc:
        result.message = str(exc)
        return result
    drifted = [c.file for c in changed if now.get(c.file) not in (c.sha256_after, c.sha256_before)]
    if drifted and not ctx.force:
        result.message = (f"{', '.join(drifted)} drifted: changed since patchkit wrote it; refusing to restore any of "
                          f"the step's {len(changed)} files (--force restores anyway)")
        return result
    restored, problems = 0, []
    for change in changed:
        try:
            restored += await _put_back(ctx, change, ctx.force)
        except HostError as exc:
            problems.append(str(exc))
    if problems:
        result.message = "; ".join(problems)
        return result
    if restored:
        result.status, result.message = "changed", f"restored {restored} files from run {target.run_id}"
    else:
        result.status, result.message = "ok", "already the original"
    return result


async def _put_back(ctx: HostContext, change: FileChange, force: bool) -> bool:
    """One file as it was before the change: its backup back, or removed (a file the diff
    added); True when something changed. Refused when the file drifted (unless force)."""
    if change.sha256_before is None:
        assert change.sha256_after is not None  # a file the diff added: what it holds now
        removed = await ctx.agent.call(REMOVE_FILE({"path": change.file, "expected_sha256": change.sha256_after,
                                                    "force": force}))
        return bool(removed["removed"])
    assert change.backup is not None  # a file the run changed or deleted was backed up first
    outcome = await ctx.agent.call(RESTORE({"path": change.file, "backup_path": change.backup,
                                            "expected_current": change.sha256_after,
                                            "original_sha256": change.sha256_before, "force": force}))
    return not outcome["already"]
