"""The deploy step: sync a local file or folder to `dest` on the host, by content.

plan: source manifest (hash-cached) vs the host's manifest (hash-cached in its journal)
      -> the files whose content differs; validation of the source by name.
apply: each differing file is streamed through the agent into a part file next to its
      final name, hashed on the host, the old file backed up, then renamed into place;
      an interrupted transfer resumes from the verified prefix of its part file. The
      destination is validated again after; any failure puts back what was there.
"""

from __future__ import annotations

import json
import posixpath
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from pydantic import Field, field_validator

from patchkit.host.agent.files import PART_SUFFIX
from patchkit.host.agent.protocol import (
    HASH, MANIFEST, PART_INFO, READ, READ_CHECKPOINT, RECEIVE_FILE, REMOVE_FILE, RESTORE,
    ManifestReply, ReceiveFileReply,
)
from patchkit.host.checkpoint import VALIDATORS
from patchkit.base.errors import HostError, UsageError
from patchkit.run.steps.manifest import FileEntry, sha256_of, source_manifest
from patchkit.recipe.model import KindSpec, Step, Strict
from patchkit.run.results import DeployedFile, RunRecord, StepResult, deployed_files
from patchkit.run.steps.context import HostContext
from patchkit.run.steps.kind import Planned, StepKind, Undone
from patchkit.run.steps.staleness import FileEdit, put_back, recorded_edits

if TYPE_CHECKING:  # for annotations: validating a recipe does not load the running agent
    from patchkit.host.agent.client import AgentClient
    from patchkit.host.agent.client import Pending

T = TypeVar("T")


class DeployTarget(Strict):
    """The target model a drafter must fit: its config.json on the host, or values."""

    config: str | None = Field(None, description="path of the target's config.json on the host")
    hidden_size: int | None = None
    vocab_size: int | None = None
    num_hidden_layers: int | None = None


class DeployStep(KindSpec):
    may_notify = True

    src: str = Field(description="file or folder on the control machine (relative: to the recipe's folder)")
    dest: str = Field(description="absolute path on the host (~ allowed)")
    validate_as: str | None = Field(None, alias="validate", description="validator run on src before and dest after, e.g. eagle3-drafter")
    target: DeployTarget | None = None

    @field_validator("dest")
    @classmethod
    def _dest_is_absolute(cls, value: str) -> str:
        if not (value.startswith("/") or value.startswith("~/")):
            raise ValueError(f"dest {value!r} must be an absolute path (or start with ~/)")
        if ".." in value.split("/"):
            raise ValueError(f"dest {value!r} may not contain '..'")
        return value

    @field_validator("validate_as")
    @classmethod
    def _known_validator(cls, value: str | None) -> str | None:
        if value is not None and value not in VALIDATORS:
            raise ValueError(f"unknown validator {value!r} (known: {', '.join(sorted(VALIDATORS))})")
        return value


def _size_iec(size: Any) -> str:
    """A file's size on the review page (KiB, MiB, GiB)."""
    if not isinstance(size, int):
        return ""
    if size < 1024:
        return f"{size} B"
    scaled, unit = float(size), "B"
    for unit in ("KiB", "MiB", "GiB"):
        scaled /= 1024
        if scaled < 1024:
            break
    return f"{scaled:.1f} {unit}"


def source_path(ctx: HostContext, src: str) -> Path:
    path = Path(src).expanduser()
    return path if path.is_absolute() else (ctx.loaded.path.parent / path).resolve()


def _shared(ctx: HostContext, key: str, make: Callable[[], T]) -> T:
    """Computed once per run for all hosts (source hashing and validation)."""
    if key not in ctx.edits.memo:
        ctx.edits.memo[key] = make()
    shared: T = ctx.edits.memo[key]
    return shared


def _source(ctx: HostContext, step: Step, spec: DeployStep) -> tuple[Path, list[FileEntry], list[str]]:
    src = source_path(ctx, spec.src)

    def build() -> tuple[list[FileEntry], list[str]]:
        entries = source_manifest(src, ctx.verify_all)
        if src.is_file():  # a single file is named by dest on the host
            entries = [FileEntry(posixpath.basename(spec.dest.rstrip("/")), e.size, e.sha256, e.mode) for e in entries]
        problems: list[str] = []
        if spec.validate_as:
            from patchkit.host.checkpoint.reader import read_checkpoint

            problems = VALIDATORS[spec.validate_as](read_checkpoint(str(src)), _local_target(ctx, spec.target))
        return entries, problems

    entries, problems = _shared(ctx, f"deploy-source:{step.name}:{src}", build)
    return src, entries, problems


def _local_target(ctx: HostContext, target: DeployTarget | None) -> dict[str, Any] | None:
    if target is None or target.config is not None:
        return None  # a config on the host is read there, after the copy
    return target.model_dump(exclude_none=True, exclude={"config"})


async def _host_target(ctx: HostContext, target: DeployTarget | None) -> dict[str, Any] | None:
    if target is None:
        return None
    if target.config is None:
        return target.model_dump(exclude_none=True, exclude={"config"})
    import base64

    read = await ctx.agent.call(READ({"path": target.config}))
    if not read["exists"]:
        raise HostError(f"target config {target.config} does not exist on the host")
    try:
        config: dict[str, Any] | None = json.loads(base64.b64decode(read["content_b64"]))
        return config  # any JSON: the validator says if it is no config mapping
    except ValueError:
        raise HostError(f"target config {target.config} is not JSON") from None


def _cache_file(ctx: HostContext) -> str:
    return posixpath.join(ctx.journal.state_dir, "hashcache.json")


# What a deploy's plan hands its apply and state: the result, the files to send, and the
# host's manifest of dest (None: the plan failed before it was read).
DeployPlan = tuple[StepResult, list[FileEntry], ManifestReply | None]


async def plan_deploy(ctx: HostContext, step: Step, spec: DeployStep) -> DeployPlan:
    result = StepResult(name=step.name, kind="deploy", status="failed", file=spec.dest)
    try:
        src, entries, problems = _source(ctx, step, spec)
    except UsageError as exc:
        result.message = str(exc)
        return result, [], None
    if problems:
        result.message = f"source {src} is not a valid {spec.validate_as}; nothing sent:\n" + "\n".join(problems)
        return result, [], None
    remote = await ctx.agent.call(MANIFEST({"dest": spec.dest, "cache_file": _cache_file(ctx),
                                            "verify_all": ctx.verify_all}), reply_wait=3600)
    if remote["exists"] and src.is_dir() and not remote["is_dir"]:
        result.message = f"{spec.dest} is a file on the host, the source {src} a folder"
        return result, [], remote
    if src.is_file() and remote["is_dir"]:
        result.message = f"{spec.dest} is a folder on the host; a file source needs dest to be the file's path"
        return result, [], remote
    todo = [e for e in entries if _sha256_at(remote, e.rel) != e.sha256]
    total = sum(e.size for e in entries)
    result.details = {"files_total": len(entries), "bytes_total": total,
                      "files_to_send": len(todo), "bytes_to_send": sum(e.size for e in todo),
                      "to_send": [{"rel": e.rel, "size": e.size} for e in todo[:200]]}  # what a review lists
    if not todo:
        result.status, result.message = "ok", f"all {len(entries)} files in place ({_size(total)})"
    else:
        result.status = "changed"
        result.message = f"{len(todo)} of {len(entries)} files differ ({_size(sum(e.size for e in todo))} to send)"
    return result, todo, remote


def _sha256_at(remote: ManifestReply, rel: str) -> str | None:
    there = remote["files"].get(rel)
    return there["sha256"] if there else None


def _dest_root(spec: DeployStep, src: Path) -> str:
    """The folder files land in: dest itself for a folder source; dest's parent for a file."""
    return spec.dest if src.is_dir() else posixpath.dirname(spec.dest.rstrip("/")) or "/"


async def apply_deploy(ctx: HostContext, step: Step, spec: DeployStep, planned: DeployPlan) -> StepResult:
    result, todo, remote = planned
    result = result.model_copy(deep=True)
    if result.status == "ok" and not ctx.dry_run:
        cut = _cut_off(await ctx.records(), step.name)
        if cut is not None:
            return await _complete_cut_off(ctx, step, spec, result, *cut)
    if result.status != "changed" or ctx.dry_run:
        return result
    assert remote is not None  # a change was planned from the host's manifest
    src = source_path(ctx, spec.src)
    root = _dest_root(spec, src)
    if spec.validate_as and spec.target is not None:
        try:  # the target's config on the host is needed after the copy: make sure it is there first
            await _host_target(ctx, spec.target)
        except HostError as exc:
            result.status, result.message = "failed", f"{exc}; nothing sent"
            return result
    written: list[DeployedFile] = []  # the files that landed, as the host reported them
    backups = posixpath.join(ctx.journal.state_dir, "backups", ctx.run_id, step.name)
    backup_of = {e.rel: posixpath.join(backups, e.rel) for e in todo}
    await ctx.record_intent(_intent(result, todo, remote, root, backup_of).model_copy(update={"backup": backups}))
    ctx.agent.on_bytes = _progress_line(ctx, step.name, sum(e.size for e in todo))
    try:
        await _send_files(ctx, src, root, todo, remote, backup_of, written)
        if spec.validate_as:
            view = await ctx.agent.call(READ_CHECKPOINT({"path": spec.dest}), reply_wait=600)
            problems = VALIDATORS[spec.validate_as](view, await _host_target(ctx, spec.target))
            if problems:
                raise HostError(f"{spec.dest} on the host is not a valid {spec.validate_as}:\n" + "\n".join(problems))
    except HostError as exc:
        sent = _bytes_sent(todo, written)
        undone = await undo_files(ctx.agent, written, force=False, state_dir=ctx.journal.state_dir, root=root)
        result.status = "failed"
        result.message = f"{exc}; {undone.message}"
        result.details = {**(result.details or {}), "files": [], "bytes_sent": sent}
        return result
    sent = _bytes_sent(todo, written)
    result.details = {**(result.details or {}), "files": [w.as_json() for w in written], "bytes_sent": sent}
    resumed = sum(1 for w in written if w.resumed_from)
    result.message = (f"sent {len(written)} file(s), {_size(sent)}" + (f" ({resumed} resumed)" if resumed else "")
                      + (f"; {spec.validate_as} valid at {spec.dest}" if spec.validate_as else ""))
    result.backup = backups
    return result


async def _send_files(ctx: HostContext, src: Path, root: str, todo: list[FileEntry], remote: ManifestReply,
                      backup_of: dict[str, str], written: list[DeployedFile]) -> None:
    """Stream every file, one after the other without waiting for the host's answers (it
    answers in order), then read the answers: no round trip per file. What landed goes into
    `written` even if another file failed (the caller undoes it)."""
    offsets = [await _resume_offset(ctx, root, entry.rel, _local(src, entry), entry, remote) for entry in todo]
    pending: list[tuple[int, Pending[ReceiveFileReply]]] = []
    failure: HostError | None = None
    for entry, offset in zip(todo, offsets):
        try:
            pending.append((offset, await ctx.agent.send_file(RECEIVE_FILE({
                "dest": root, "rel": entry.rel, "offset": offset, "length": entry.size - offset,
                "expected_sha256": entry.sha256, "mode": entry.mode, "backup_path": backup_of[entry.rel],
                "cache_file": _cache_file(ctx),
            }), _local(src, entry), offset, entry.size - offset)))
        except HostError as exc:  # the connection broke: the answers that did come are still read
            failure = exc
            break
    for (offset, answer), entry in zip(pending, todo):
        try:
            done = await answer.result(None)
        except HostError as exc:
            failure = failure or exc
            continue
        written.append(DeployedFile(rel=entry.rel, path=done["path"], sha256_after=done["sha256"],
                                    sha256_before=done["sha256_before"], backup=done["backup"],
                                    mode_before=done.get("mode_before"), resumed_from=offset,
                                    created_dirs=done.get("created_dirs", [])))
    if failure is not None:
        raise failure


def _local(src: Path, entry: FileEntry) -> Path:
    return src / entry.rel if src.is_dir() else src


def _bytes_sent(todo: list[FileEntry], written: list[DeployedFile]) -> int:
    size = {entry.rel: entry.size for entry in todo}
    return sum(size[w.rel] - w.resumed_from for w in written)


def _intent(result: StepResult, todo: list[FileEntry], remote: ManifestReply, root: str,
            backup_of: dict[str, str]) -> StepResult:
    """The step as the journal should see it if the run dies mid-transfer: every file it is
    about to write, with what was there before. A rollback of that run puts back what did
    change (a file at its new hash) and leaves the rest (still at its old hash, or absent)."""
    planned = []
    for entry in todo:
        before = remote["files"].get(entry.rel)
        planned.append(DeployedFile(
            rel=entry.rel, path=posixpath.join(root, entry.rel), sha256_after=entry.sha256,
            sha256_before=before["sha256"] if before else None, mode_before=before["mode"] if before else None,
            backup=backup_of[entry.rel] if before else None, resumed_from=0, created_dirs=[], planned=True))
    return result.model_copy(update={
        "message": f"interrupted while sending {len(todo)} file(s)",
        "details": {**(result.details or {}), "files": [f.as_json() for f in planned], "in_progress": True}})


def _cut_off(records: list[RunRecord], step_name: str) -> tuple[RunRecord, StepResult] | None:
    """The newest live deploy of this step whose run was cut off before it finished."""
    for record in sorted(records, key=lambda r: r.run_id, reverse=True):
        if record.kind != "apply":
            continue
        for done in record.live_steps():
            if done.name == step_name and done.kind == "deploy":
                return (record, done) if (done.details or {}).get("in_progress") else None
    return None


async def _complete_cut_off(ctx: HostContext, step: Step, spec: DeployStep, result: StepResult,
                            record: RunRecord, done: StepResult) -> StepResult:
    """Every file is in place, but run `record` was cut off before it validated them and
    recorded what landed: validate now, then complete its record (so status and rollback see
    a finished deploy)."""
    if spec.validate_as:
        try:
            view = await ctx.agent.call(READ_CHECKPOINT({"path": spec.dest}), reply_wait=600)
            problems = VALIDATORS[spec.validate_as](view, await _host_target(ctx, spec.target))
        except HostError as exc:
            problems = [str(exc)]
        if problems:
            result.status = "failed"
            result.message = (f"run {record.run_id} was cut off while deploying, and {spec.dest} is not a valid "
                              f"{spec.validate_as}:\n" + "\n".join(problems) + "\n(rollback puts back what it replaced)")
            return result
    details = dict(done.details or {})
    files = deployed_files(done)
    for f in files:
        f.planned = False
    details["files"] = [f.as_json() for f in files]
    details["in_progress"] = False
    done.details = details
    done.message = f"completed by run {ctx.run_id}"
    await ctx.amend(record)
    result.message = f"{result.message}; run {record.run_id} was cut off while deploying: completed and validated now"
    return result


def _deployed(records: list[RunRecord], step_name: str) -> dict[str, str]:
    """Path on the host -> sha256 patchkit left there, over this step's live deploys (newest wins)."""
    out: dict[str, str] = {}
    for record in sorted(records, key=lambda r: r.run_id):
        if record.kind != "apply":
            continue
        for done in record.live_steps():
            if done.name == step_name and done.kind == "deploy":
                out.update({f.path: f.sha256_after for f in deployed_files(done)
                            if not f.planned})  # planned: a run that died before it knew
    return out


async def status_deploy(step: Step, planned_deploy: DeployPlan, records: list[RunRecord]) -> StepResult:
    """applied | pending | drifted: drifted means a file patchkit deployed changed on the host
    since; a new version at the source (the host untouched) is pending, not drift."""
    planned, _, remote = planned_deploy
    out = planned.model_copy(deep=True)
    if planned.status == "failed" or remote is None:  # no manifest: the plan failed before it
        return out
    cut = _cut_off(records, step.name)
    if cut is not None:
        out.status = "pending"
        out.message = (f"run {cut[0].run_id} was cut off while deploying (rollback undoes what landed); "
                       f"apply completes and validates it: {planned.message}")
        return out
    root = remote["dest"]
    here: dict[str, str] = {}
    if root:
        for rel, info in remote["files"].items():
            here[posixpath.join(root, rel) if remote["is_dir"] else root] = info["sha256"]
    deployed = {path: sha for path, sha in _deployed(records, step.name).items()
                if root and (path == root or path.startswith(root.rstrip("/") + "/"))}
    changed = sorted(path for path, sha in deployed.items() if here.get(path) != sha)
    if changed:
        out.status = "drifted"
        out.message = (f"{len(changed)} file(s) changed on the host since patchkit deployed them: "
                       + ", ".join(changed[:5]) + (" ..." if len(changed) > 5 else ""))
    elif planned.status == "changed":
        out.status = "pending"
        if deployed:
            out.message = f"the source changed since the last deploy: {planned.message}"
    else:
        out.status = "applied"
        out.message = (f"deployed by patchkit; {planned.message}" if deployed
                       else f"in place (not deployed by patchkit: nothing to roll back); {planned.message}")
    return out


async def _resume_offset(ctx: HostContext, root: str, rel: str, local: Path, entry: FileEntry,
                         remote: ManifestReply) -> int:
    if rel not in remote["parts"]:
        return 0
    info = await ctx.agent.call(PART_INFO({"dest": root, "rel": rel, "prefix_len": entry.size}))
    n = info["size"]
    if 0 < n <= entry.size and info["sha256"] == sha256_of(local, n):
        return n
    return 0


def _undo_root(ctx: HostContext, spec: DeployStep, files: list[DeployedFile]) -> str:
    """The folder a rollback of this deploy is held to: its dest's as _dest_root says, from the
    source as it is now; a source gone since: dest itself, or dest's folder when the record
    is one file named as dest is (a single-file deploy)."""
    src = source_path(ctx, spec.src)
    if src.exists():
        return _dest_root(spec, src)
    name = posixpath.basename(spec.dest.rstrip("/"))
    if len(files) == 1 and files[0].rel == name and posixpath.basename(files[0].path) == name:
        return posixpath.dirname(spec.dest.rstrip("/")) or "/"
    return spec.dest


async def undo_files(agent: AgentClient, written: list[DeployedFile], force: bool, state_dir: str,
                     root: str) -> Undone:
    """Put back what a deploy replaced and remove what it created (newest first), with the
    folders it created. Unless forced, all or nothing: if any file changed since the deploy
    wrote it, or left its folder through a symlink, nothing is touched (a half-undone
    checkpoint is worse than either version). `root`: the folder the files land in as the
    recipe's dest says now (_dest_root), every file held to it on the host (what a record
    says is where to write, not where writing is allowed); forced or not, a file outside
    it is refused."""
    if written and not force:
        try:
            current = await agent.call(HASH({"paths": [item.path for item in written], "confined": True,
                                             "root": root}), reply_wait=3600)
        except HostError as exc:
            return Undone(False, f"NOT put back (nothing was changed): cannot hash the deployed files: {exc}")
        drifted = []
        for item in written:
            now = current.get(item.path)
            # a restore is also fine if the original is back already; a removal if the file is gone
            fine = {item.sha256_after, item.sha256_before if item.backup else None}
            if now not in fine:
                drifted.append(f"{item.path} changed since the deploy wrote it (sha256 "
                               f"{(now or 'missing')[:12]}, not {item.sha256_after[:12]})")
        if drifted:
            return Undone(False, "NOT put back (nothing was changed): " + "; ".join(drifted)
                          + " (--force puts back anyway)")
    problems = []
    for item in reversed(written):
        try:
            if item.backup:
                await agent.call(RESTORE({"path": item.path, "backup_path": item.backup,
                                          "expected_current": item.sha256_after, "original_sha256": item.sha256_before,
                                          "force": force, "mode": item.mode_before, "root": root,
                                          "state_dir": state_dir}), reply_wait=3600)
            else:
                await agent.call(REMOVE_FILE({"path": item.path, "expected_sha256": item.sha256_after, "force": force,
                                              "remove_dirs": item.created_dirs, "root": root}))
            if item.planned:  # the run died mid-transfer: its unfinished part file goes too
                folder, name = posixpath.split(item.path)
                await agent.call(REMOVE_FILE({"path": posixpath.join(folder, f".{name}{PART_SUFFIX}"),
                                              "expected_sha256": "", "force": True, "root": root}))
        except HostError as exc:
            problems.append(str(exc))
    if problems:
        return Undone(False, "NOT everything was put back: " + "; ".join(problems))
    if not written:
        return Undone(True, "nothing was written")
    restored = sum(1 for item in written if item.backup)
    removed = len(written) - restored
    said = ([f"put back {restored} file(s) from their backups"] if restored else []) + (
        [f"removed {removed} file(s) the deploy had created"] if removed else [])
    return Undone(True, " and ".join(said))


def _progress_line(ctx: HostContext, step: str, total: int) -> Callable[[int], None]:
    """bytes, rate and ETA for the host's live progress line."""
    started = time.monotonic()
    first = ctx.agent.bytes_sent

    def update(sent_so_far: int) -> None:
        done = sent_so_far - first
        rate = done / max(time.monotonic() - started, 1e-6)
        eta = (total - done) / rate if rate > 0 else 0
        ctx.note(f"{step}: {_size(done)} / {_size(total)}, {_size(int(rate))}/s, ETA {eta:.0f}s")

    return update


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


class DeployKind(StepKind[DeployStep, DeployPlan]):
    name = "deploy"
    spec_model = DeployStep
    undo_last = False
    not_tested = "skipped (a deploy copies files to a host: nothing of a release to test)"

    def facts(self, step: Step, spec: DeployStep, shown: Callable[[Any], Any], dry_run: bool) -> list[tuple[str, str]]:
        return [("copies", f"{shown(spec.src)} → {shown(spec.dest)}")]

    def measured(self, done: StepResult) -> list[tuple[str, str]]:
        details = done.details or {}
        to_send = details.get("to_send")
        if to_send:
            return [("files it would send", "\n".join(f"{f.get('rel')}  {_size_iec(f.get('size'))}" for f in to_send))]
        if details.get("files"):
            return [("files written", "\n".join(f"{f.get('rel') or f.get('path')}" for f in details["files"]
                                                 if isinstance(f, dict)))]
        return []

    def file_edits(self, done: StepResult, undone: StepResult | None) -> list[FileEdit]:
        deployed = (done.details or {}).get("files")
        if isinstance(deployed, list) and deployed:
            return [FileEdit(str(f.get("path")), f.get("sha256_before"), f.get("sha256_after"))
                    for f in deployed if isinstance(f, dict) and f.get("path")]
        return recorded_edits(done) or put_back(undone)  # an undo names no files: it put back the undone's

    async def plan(self, ctx: HostContext, step: Step, spec: DeployStep) -> Planned[DeployPlan]:
        result, todo, remote = await plan_deploy(ctx, step, spec)
        return Planned(result, (result, todo, remote))

    async def apply(self, ctx: HostContext, step: Step, spec: DeployStep, planned: Planned[DeployPlan]) -> StepResult:
        return await apply_deploy(ctx, step, spec, planned.data)

    async def state(self, ctx: HostContext, step: Step, spec: DeployStep, planned: Planned[DeployPlan],
                    records: list[RunRecord]) -> StepResult:
        return await status_deploy(step, planned.data, records)

    async def undo(self, ctx: HostContext, done: StepResult, target: RunRecord) -> StepResult:
        step = self.step_now(ctx, done)
        if step is None:
            return StepResult(name=done.name, kind=self.name, status="failed", file=done.file, message=(
                f"the recipe has no deploy step {done.name} now: rollback writes and removes only inside the dest "
                "the step names, so nothing was put back (roll back with the recipe that deployed it)"))
        files = deployed_files(done)
        undone = await undo_files(ctx.agent, files, force=ctx.force, state_dir=ctx.journal.state_dir,
                                  root=_undo_root(ctx, self.spec_of(step), files))
        message = undone.message if not undone.ok else f"{undone.message} (deployed by run {target.run_id})"
        return StepResult(name=done.name, kind=self.name, status="changed" if undone.ok else "failed",
                          file=done.file, message=message)

    def changed(self, done: StepResult) -> bool:
        """A deploy that finished (changed) wrote its files; the record names each with its backup."""
        return done.status == "changed" and bool(done.file and done.backup)
