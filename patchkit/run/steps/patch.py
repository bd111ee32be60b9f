"""The patch step: plan (read the files, edit them on the control side, diff); everything
after the plan, the write and its checks, status, rollback, is the unit pipeline of
run/steps/unit.py, for the one file an edit of a module changes as for the files of a diff."""

from __future__ import annotations

import base64
import difflib
import hashlib
import os
import posixpath
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from pydantic import Field, field_validator, model_validator

from patchkit.host.agent.protocol import LOCATE, READ, Request
from patchkit.edits import Edit, EditError, EditResult
from patchkit.edits.encoding import decode_source, encode_source
from patchkit.edits.model import is_ambiguity
from patchkit.edits.ops.diff.spec import DiffEdit
from patchkit.base.errors import HostError
from patchkit.run.journal import PATCHED, UNEXPLAINED, explain
from patchkit.recipe.model import BindError, PackageGate, Step, check_module
from patchkit.run.results import FileChange, RunRecord, StepResult
from patchkit.run.steps import edit_cache
from patchkit.run.steps.context import HostContext, gate, locate_args
from patchkit.run.steps.kind import Planned, StepKind
from patchkit.run.steps.release_reads import ReleaseReads, is_plain_relative, with_version_files
from patchkit.run.steps.unit import (
    UnitPlan,
    apply_unit,
    refused_undo,
    set_unit,
    undo_unit,
    unit_files,
    unit_state,
)
from patchkit.run.steps.staleness import FileEdit, put_back, recorded_edits
from patchkit.run.steps.upstream import released_with_it, with_release_note, with_upstream_note

if TYPE_CHECKING:
    from patchkit.edits.hunk_locate import FileOutcome


class PatchStep(PackageGate):
    takes_verify = True
    may_notify = True

    package: str = Field(description="top-level package to patch, found on the target without importing it")
    modules: list[str] = Field(default_factory=list, description=(
        "candidate modules; the first holding the target wins. Optional for a `diff` edit (its files "
        "name them); given, they must be the diff's"))
    edit: Edit

    @field_validator("modules")
    @classmethod
    def _modules_are_dotted(cls, value: list[str]) -> list[str]:
        for m in value:
            check_module(m)
        return value

    @model_validator(mode="after")
    def _modules_given(self) -> "PatchStep":
        if self.edit.diff is None and not self.modules:
            raise ValueError("missing required key 'modules' (the candidate modules that may hold the target; "
                             "only a diff edit names its own)")
        if self.edit.diff is not None and self.edit.diff.text is not None:
            self.agree_with_diff()
        return self

    def agree_with_diff(self) -> None:
        """A diff names its files: `modules` are those (filled in when not given)."""
        assert self.edit.diff is not None
        named = self.edit.diff.modules
        if self.modules and sorted(set(self.modules)) != sorted(set(named)):
            raise ValueError(f"modules {', '.join(self.modules)} do not agree with the files the diff changes "
                             f"({', '.join(named)}): leave `modules` out, or list those")
        if named and named[0].split(".")[0] != self.package:
            raise ValueError(f"the diff changes {named[0]}, not a module of package {self.package} "
                             "(check `strip`)")
        self.modules = named

    def bind(self, folder: Path) -> None:
        if self.edit.codemod:
            self.edit.codemod.bind(folder)
        if self.edit.diff and self.edit.diff.file is not None:
            try:
                self.edit.diff.bind(folder)
                self.agree_with_diff()
            except (EditError, ValueError) as exc:
                raise BindError(("edit", "diff", "file"), str(exc)) from None


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


def _edit(ctx: HostContext, step: Step, spec: PatchStep, source: bytes, sha: str) -> EditResult:
    key = (f"{ctx.loaded.render_key}:{step.name}", sha)  # per rendering: a host variable may change the edit
    cached = ctx.edits.results.get(key)
    if cached is not None:
        ctx.edits.hits += 1
        return cached
    try:
        text = decode_source(source)  # as the interpreter reads it: its PEP 263 declaration, else UTF-8
    except EditError as exc:
        result = EditResult("not_found", "", str(exc))
    else:
        # A UTF-8 byte order mark is not Python: edit what follows it, then put it back.
        bom = "\ufeff" if text.startswith("\ufeff") else ""
        body = text[len(bom):]
        result = edit_cache.load(spec, body) or edit_cache.compute(spec, body, ctx.loaded.redactor)
        if bom:
            result = EditResult(result.verdict, bom + result.source, result.message, result.refused)
    ctx.edits.results[key] = result
    return result


def _start(step: Step) -> StepResult:
    return StepResult(name=step.name, kind=PatchKind.name, status="failed", upstream=step.upstream, why=step.why)


def _refused(result: StepResult, path: str, why: str, one_file: bool = True) -> UnitPlan:
    """The target is there, but the edit cannot be made as asked: the step fails on that file."""
    result.message = f"{path}: {why}"
    if one_file:  # a diff's unit is recorded in `files`
        result.file = path
    return UnitPlan(result)


TARGET_NOT_FOUND = "target not found"  # in a failed plan's message: the edit found nothing to change


def _not_found(result: StepResult, spec: PatchStep, version: str | None, misses: list[str]) -> None:
    gate_note = f"; this step applies to {spec.package} {spec.versions}" if spec.versions else ""
    found = f"{spec.package} {version}" if version else spec.package
    what = "ambiguous target" if any(is_ambiguity(m) for m in misses) else TARGET_NOT_FOUND
    result.message = f"{found}: {what} — " + " | ".join(misses) + gate_note


async def plan_module_edit(ctx: HostContext, step: Step, spec: PatchStep) -> UnitPlan:
    """An edit of a module: the first candidate module holding the target is the unit's one file."""
    result = _start(step)
    verdict_gate, located = await gate(ctx, spec.package, spec.versions, spec.modules, read_first=True)
    result.package_version = verdict_gate.version
    if verdict_gate.fail or verdict_gate.skip:
        result.status = "failed" if verdict_gate.fail else "skipped"
        result.message = verdict_gate.fail or verdict_gate.skip or ""
        return UnitPlan(result)

    misses: list[str] = []
    for module in spec.modules:
        path = located["files"].get(module)
        loaded = located.get("not_source", {}).get(module)
        if loaded is not None:
            misses.append(f"{module}: the target imports it from {loaded}, not from Python source patchkit could edit")
            continue
        if path is None:
            alike = located.get("suggest", {}).get(module)
            misses.append(f"{module}: no such module" + (f" (did you mean {' or '.join(alike)}?)" if alike else ""))
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
            return UnitPlan(result)
        content = base64.b64decode(read["content_b64"])
        edit = _edit(ctx, step, spec, content, read["sha256"])
        if edit.refused:
            return _refused(result, path, edit.message)
        if edit.verdict == "not_found":
            misses.append(f"{path}: {edit.message}")
            continue
        change = FileChange(file=path, sha256_before=read["sha256"], sha256_after=read["sha256"])
        if edit.verdict == "already":
            result.status, result.message = "ok", "already in place"
            set_unit(result, [change], many=False)
            return UnitPlan(result)
        try:
            new_content = encode_source(edit.source)  # in the encoding the new text declares
        except EditError as exc:
            return _refused(result, path, str(exc))
        result.status, result.message = "changed", edit.message
        change.sha256_after = hashlib.sha256(new_content).hexdigest()
        change.diff = _diff(ctx, path, decode_source(content), edit.source, (read["sha256"], change.sha256_after))
        set_unit(result, [change], many=False)
        return UnitPlan(result, {path: new_content}, located["root"])

    _not_found(result, spec, verdict_gate.version, misses)
    return UnitPlan(result)


async def plan_diff(ctx: HostContext, step: Step, spec: PatchStep) -> UnitPlan:
    """A diff over several files (or one it adds or deletes): every file it names, under the
    package's root, is one file of the unit; any file not found fails the step."""
    assert spec.edit.diff is not None
    diff: DiffEdit = spec.edit.diff
    result = _start(step)
    verdict_gate, located = await gate(ctx, spec.package, spec.versions, spec.modules)
    result.package_version = verdict_gate.version
    if verdict_gate.fail or verdict_gate.skip:
        result.status = "failed" if verdict_gate.fail else "skipped"
        result.message = verdict_gate.fail or verdict_gate.skip or ""
        return UnitPlan(result)
    root = located["root"]
    reads = []
    for rel, _module, _patch in diff.targets():
        path = posixpath.join(root, *rel.split("/")[1:])
        reads.append((rel, path, await ctx.agent.send(READ({"path": path, "root": root}))))
    changes: list[FileChange] = []
    contents: dict[str, bytes | None] = {}
    misses: list[str] = []
    refusals: list[str] = []  # files there, whose change the step refuses (a merge's conflicts)
    for rel, path, pending in reads:
        read = await pending.result()
        if not read["exists"]:
            with edit_cache.EDITING:  # its text is compiled too
                outcome = diff.apply_to(rel, None)  # a file the diff adds, or one it deleted already
            if outcome.verdict == "not_found":
                misses.append(f"{path}: {outcome.message}")
                continue
            change = FileChange(file=path, message=outcome.message)
            if outcome.verdict == "changed" and outcome.source is not None:  # an empty file too
                # journaled with the intent, before the write: a run cut off after it made them
                # still names them for rollback (the apply's answer then says what it made)
                change.created_dirs = read.get("missing_dirs")
                try:
                    new = encode_source(outcome.source)
                except EditError as exc:
                    return _refused(result, path, str(exc), one_file=False)
                change.sha256_after = hashlib.sha256(new).hexdigest()
                change.diff = unified_diff(path, "", outcome.source).replace(f"--- a{path}", "--- /dev/null", 1) \
                    or f"--- /dev/null\n+++ b{path}\n"  # an empty new file: no hunk, the header says it
                contents[path] = new
            changes.append(change)
            continue
        if read.get("symlink_to"):
            misses.append(f"{path} is a symlink to {read['symlink_to']}: patchkit does not write through symlinks")
            continue
        content = base64.b64decode(read["content_b64"])
        try:
            text = decode_source(content)
        except EditError as exc:
            misses.append(f"{path}: {exc}")
            continue
        bom = "\ufeff" if text.startswith("\ufeff") else ""
        key = f"diff-file:{ctx.loaded.render_key}:{step.name}:{rel}:{read['sha256']}"
        cached: FileOutcome | None = ctx.edits.memo.get(key)  # a fleet's hosts hold the same files: once
        if cached is not None:
            outcome = cached
            ctx.edits.hits += 1
        else:
            try:
                with edit_cache.EDITING:  # ast and compile: one thread at a time (edit_cache.py)
                    outcome = diff.apply_to(rel, text[len(bom):])
            except EditError as exc:
                misses.append(f"{path}: {exc}")
                continue
            ctx.edits.memo[key] = outcome
        if outcome.refused:
            refusals.append(f"{path}: {outcome.message}")
            continue
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
            try:
                new = encode_source(bom + outcome.source)
            except EditError as exc:
                return _refused(result, path, str(exc), one_file=False)
            change.sha256_after = hashlib.sha256(new).hexdigest()
            change.diff = unified_diff(path, text, bom + outcome.source)
            contents[path] = new
        changes.append(change)
    if refusals or misses:
        if misses:
            _not_found(result, spec, verdict_gate.version, misses)
        result.message = "\n".join(refusals + ([result.message] if misses else []))
        return UnitPlan(result)
    set_unit(result, changes, many=True)
    if not contents:
        result.status, result.message = "ok", f"already in place ({len(changes)} files)"
        result.diff = None
        return UnitPlan(result)
    result.status = "changed"
    result.message = "; ".join(c.message for c in changes if c.file in contents)
    return UnitPlan(result, contents, root)


async def _record_view(ctx: HostContext, package: str, out: StepResult, records: list[RunRecord]) -> None:
    """What `audit` says of the step's files, added to its status: do they match the installed
    distribution's RECORD, and if not, does a patchkit change explain the difference?"""
    from patchkit.run.installed import installed

    paths = [out.file] if out.file else [f.file for f in out.files or []]
    try:
        dist = await installed(ctx.agent, package, only=paths)
    except HostError:
        return  # not installed from a wheel (no RECORD): nothing to compare with
    if not dist.listed:
        return
    where = f"{dist.name} {dist.version}'s RECORD"
    whys = [explain(changed, records, written_files) for changed in dist.changed]
    verdict = "matches" if not whys else UNEXPLAINED if any(w.verdict == UNEXPLAINED for w in whys) else PATCHED
    out.details = {**(out.details or {}), "record": verdict}
    if verdict == "matches":
        out.message += f"; {'the file matches' if out.file else 'the files match'} {where}"
    elif verdict == PATCHED:
        out.message += f"; differs from {where}: {PATCHED}"
    else:
        why = next(w.why for w in whys if w.verdict == UNEXPLAINED)
        out.message += f"; differs from {where}: {why} (patchkit audit lists every such file)"


def written_files(step: StepResult) -> list[tuple[str, str | None]]:
    """(path, sha256 after) of each file a journaled patch step wrote (its unit); none for another kind."""
    if step.kind != PatchKind.name:  # a journaled step of another kind
        return []
    return [(c.file, c.sha256_after) for c in unit_files(step)]


def _is_many(spec: PatchStep) -> bool:
    """A diff over several files, or adding or deleting one: recorded as `files`; an edit of one
    module (a one-file diff too) in the single-file fields the product's JSON names."""
    targets = spec.edit.diff.targets() if spec.edit.diff else []
    return len(targets) > 1 or any(p.added or p.deleted for _, _, p in targets)


VERIFY_NOTE = "; apply runs the step's verify program after the write"


def _says_it_verifies(ctx: HostContext, step: Step, result: StepResult) -> StepResult:
    """A change that a `verify: python` program will judge says so in the plan (VERIFY_NOTE)."""
    if ctx.dry_run and result.status == "changed" and step.checks.python is not None:
        result.message += VERIFY_NOTE
    return result


class PatchKind(StepKind[PatchStep, UnitPlan]):
    name = "patch"
    spec_model = PatchStep
    undo_last = False
    not_tested = None  # the release test is for this kind: its edit planned on each release

    def release_reads(self, spec: PatchStep) -> ReleaseReads:
        """Every `modules` alternative (as `a/b.py` or `a/b/__init__.py`) with the `__init__.py`s
        on the way to it, and every file a `diff` edit names."""
        paths: set[str] = set()
        for module in spec.modules:
            parts = module.split(".")
            for depth in range(1, len(parts)):
                paths.add("/".join(parts[:depth]) + "/__init__.py")
            base = "/".join(parts)
            paths.update((base + ".py", base + "/__init__.py"))
        if spec.edit.diff is not None:
            paths.update(rel for rel, _module, _patch in spec.edit.diff.targets() if is_plain_relative(rel))
        return ReleaseReads(spec.package, spec.versions, with_version_files(spec.package, paths))

    def facts(self, step: Step, spec: PatchStep, shown: Callable[[Any], Any], dry_run: bool) -> list[tuple[str, str]]:
        gate = f" {spec.versions}" if spec.versions else ""
        facts = [("patches", f"{spec.package}{gate}: {', '.join(spec.modules)}")]
        if step.verify is not None and step.verify.import_:
            facts.append(("verified by importing", ", ".join(step.verify.import_)))
        if step.verify is not None and step.verify.python:  # what decides "verified": the approver reads it
            label = "verified by this program (runs on apply; a plan does not run it)" if dry_run else \
                "verified by this program"
            facts.append((label, str(shown(step.verify.python))))
        return facts

    def file_edits(self, done: StepResult, undone: StepResult | None) -> list[FileEdit]:
        return recorded_edits(done) or put_back(undone)

    def measured(self, done: StepResult) -> list[tuple[str, str]]:
        return []  # its checks are shown for every kind

    def first_reads(self, spec: PatchStep) -> list[Request[Any]]:
        if _is_many(spec) or spec.package is None:
            return []
        return [LOCATE(locate_args(spec.package, list(spec.modules), read_first=True))]  # plan_module_edit's gate

    async def plan(self, ctx: HostContext, step: Step, spec: PatchStep) -> Planned[UnitPlan]:
        planned = await (plan_diff(ctx, step, spec) if _is_many(spec) else plan_module_edit(ctx, step, spec))
        return Planned(_says_it_verifies(ctx, step, planned.result), planned)

    async def apply(self, ctx: HostContext, step: Step, spec: PatchStep, planned: Planned[UnitPlan]) -> StepResult:
        async def replan() -> UnitPlan:
            return (await self.plan(ctx, step, spec)).data

        done = await apply_unit(ctx, step, UnitPlan(planned.result, planned.data.contents, planned.data.root), replan)
        return await with_release_note(ctx, spec.package, done, [c.file for c in unit_files(done)])

    async def state(self, ctx: HostContext, step: Step, spec: PatchStep, planned: Planned[UnitPlan],
                    records: list[RunRecord]) -> StepResult:
        out = unit_state(planned.result, records)
        if out.file or out.files:
            await _record_view(ctx, spec.package, out, records)
        if planned.result.status == "ok" and (out.details or {}).get("record") == "matches" and out.package_version:
            out.message += "; " + released_with_it(spec.package, out.package_version)  # the release ships it
        return with_upstream_note(out, step, spec)

    async def undo(self, ctx: HostContext, done: StepResult, target: RunRecord) -> StepResult:
        """Every file's backup back in place, only if each still holds what the run wrote (or
        forced), and only inside the package folder the recipe's step locates on the host now."""
        step = self.step_now(ctx, done)
        if step is None:
            return refused_undo(done, f"the recipe has no patch step {done.name} now: rollback writes only inside "
                                      "the package folder the step locates on the host, so nothing was restored "
                                      "(roll back with the recipe that applied it)")
        package = self.spec_of(step).package
        located = await ctx.agent.call(LOCATE(locate_args(package, [])))
        if not located["found"]:
            return refused_undo(done, f"package {package} is not found on the host now: rollback writes only "
                                      "inside the package folder the step locates, so nothing was restored")
        return await undo_unit(ctx, done, target, located["root"])

    def changed(self, done: StepResult) -> bool:
        """A change in place, or a failure that could not put every file back (restored False):
        rollback puts back what it left."""
        named = bool(done.file and done.backup or done.files)
        return named and (done.status == "changed" or done.status == "failed" and done.restored is False)

    def written(self, done: StepResult) -> list[tuple[str, str | None]]:
        return written_files(done)
