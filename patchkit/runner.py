"""Runs a command (apply, plan, status, rollback, history) on every selected host.

Per host: start the agent through the host's transport, take the host lock, do the
work step by step, journal it, release. Hosts run concurrently; one host failing
never stops the others.
"""

from __future__ import annotations

import getpass
import time
import traceback
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import AsyncIterator, Awaitable, Callable

from patchkit import __version__
from patchkit.agent import AgentClient
from patchkit.errors import HostError, UsageError
from patchkit.fanout import FanOutPolicy, Interrupt, Progress, fan_out, progress_for
from patchkit.inventory import HostSpec
from patchkit.journal import DEFAULT_STATE_DIR, Journal, active_step, rollback_target, unverified_step
from patchkit.logs import get_logger
from patchkit.recipe import LoadedRecipe, Step
from patchkit.redact import Redactor
from patchkit.results import HostResult, RunRecord, StepResult, host_status
from patchkit.steps.check import run_check
from patchkit.steps.context import EditCache, HostContext
from patchkit.steps.deploy import apply_deploy, plan_deploy, status_deploy, undo_files
from patchkit.steps.launch import apply_launch, plan_launch, undo_launch
from patchkit.steps.patch import apply_patch, plan_patch
from patchkit.transport import LocalTransport, Transport

log = get_logger("patchkit")


@dataclass
class Options:
    steps: list[str] | None = None
    dry_run: bool = False
    force: bool = False
    run: str | None = None
    python: str | None = None  # -e python=..., wins over inventory and recipe
    concurrency: int = 32
    lock_timeout: float = 60.0
    state_dir: str | None = None  # for hosts whose inventory entry names none
    serial: int | None = None  # canary batch size
    max_fail: int | None = None
    progress: bool = False
    no_restart: bool = False  # launch: refuse to replace a server running a different command
    verify_all: bool = False  # deploy: re-hash every file instead of trusting size+mtime caches
    accept_new_host_keys: bool = False  # SSH: record unknown host keys (a changed key is still refused)


@dataclass
class Session:
    host: HostSpec
    transport: Transport
    agent: AgentClient
    journal: Journal


def transport_for(host: HostSpec, accept_new_host_keys: bool = False) -> Transport:
    if host.is_local:
        return LocalTransport()
    from patchkit.transport.ssh_common import SSHTarget

    target = SSHTarget.from_host(host, accept_new_host_keys)  # all an SSH transport knows of the host
    if host.ssh_client == "openssh":
        from patchkit.transport.openssh import OpenSSHTransport  # the system `ssh`, opted in per host

        return OpenSSHTransport(target)
    from patchkit.transport.ssh import (
        SSHTransport,  # asyncssh only when a host needs it
    )

    return SSHTransport(target)


def interpreter_for(host: HostSpec, loaded: LoadedRecipe | None, options: Options) -> str:
    return options.python or host.python or (loaded.recipe.python if loaded else None) or "python3"


@asynccontextmanager
async def session(host: HostSpec, python: str, options: Options, owner: str,
                  redactor: Redactor | None = None, warnings: list[str] | None = None) -> AsyncIterator[Session]:
    """The host's agent, locked; `warnings` gets what it reported (skipped output) once it is closed."""
    transport = transport_for(host, options.accept_new_host_keys)
    agent: AgentClient | None = None
    try:
        agent = await AgentClient.start(transport, python, host.name)
        journal = Journal(agent, host.state_dir or options.state_dir or DEFAULT_STATE_DIR,
                          redact=(redactor or Redactor()).value)
        # Sent behind `hello` before its answer: one round trip for both on a slow link.
        try:
            lock = await agent.send("lock", state_dir=journal.state_dir, timeout_s=options.lock_timeout, owner=owner)
        except HostError:
            await agent.started(python)  # the agent died: its own error says why
            raise
        await agent.started(python)
        locked = await lock.result(options.lock_timeout + 30)
        journal.state_dir = locked["state_dir"]  # absolute, as the host resolves ~ and relative paths
        yield Session(host, transport, agent, journal)
    finally:
        if agent is not None:
            await agent.close()
            if warnings is not None:
                warnings.extend(agent.warnings)
        await transport.close()


@dataclass
class Runner:
    loaded: LoadedRecipe | None
    options: Options
    run_id: str
    command: str
    edits: EditCache = field(default_factory=EditCache)
    progress: Progress | None = None
    interrupt: Interrupt = field(default_factory=Interrupt)

    @property
    def redactor(self) -> Redactor:
        return self.loaded.redactor if self.loaded else Redactor()

    async def on_hosts(self, hosts: list[HostSpec], work: Callable[[Session], Awaitable[HostResult]]) -> dict[str, HostResult]:
        async def one(host: HostSpec) -> HostResult:
            started = time.monotonic()
            python = interpreter_for(host, self.loaded, self.options)
            warnings: list[str] = []
            try:
                async with session(host, python, self.options, f"{self.command} {self.run_id}", self.redactor,
                                   warnings) as s:
                    result = await work(s)
                    result.exec_requests = s.transport.exec_requests
            except HostError as exc:
                result = HostResult(status="failed", message=str(exc))
            except Exception as exc:  # a bug must fail its host, not the fleet
                where = traceback.extract_tb(exc.__traceback__)[-1]
                log.error("host.crashed", host=host.name, error=repr(exc), at=f"{where.filename}:{where.lineno}")
                result = HostResult(status="failed", message=f"internal error: {type(exc).__name__}: {exc}")
            result.warnings = warnings
            if self.redactor:  # what the report and the progress lines show: no secret values
                result = HostResult.model_validate(self.redactor.value(result.model_dump()))
            log.info("host.done", host=host.name, status=result.status, command=self.command,
                     seconds=round(time.monotonic() - started, 3), exec_requests=result.exec_requests)
            return result

        policy = FanOutPolicy(self.options.concurrency, self.options.serial, self.options.max_fail)
        self.progress = progress_for(hosts, self.options.progress)
        return await fan_out(hosts, one, policy, self.progress, self.interrupt)

    # ------------------------------------------------------------------ apply / plan

    def _context(self, s: Session) -> HostContext:
        assert self.loaded
        return HostContext(s.host.name, s.agent, s.journal, self.run_id, self.loaded, self.edits,
                           self.options.dry_run, self.options.force, self.options.verify_all,
                           self.options.no_restart, self._note_for(s.host.name))

    def _note_for(self, host: str) -> Callable[[str], None]:
        progress = self.progress
        return (lambda text: progress.note(host, text)) if progress else (lambda text: None)

    async def apply(self, s: Session) -> HostResult:
        assert self.loaded
        recipe = self.loaded.recipe
        ctx = self._context(s)
        record = RunRecord(run_id=self.run_id, kind="apply", recipe=recipe.name,
                           recipe_sha256=self.loaded.content_sha256, host=s.host.name, user=_user(),
                           patchkit_version=__version__, started=time.time())
        stopped_by: str | None = None

        async def write_intent(in_progress: StepResult) -> None:
            await s.journal.write(record.model_copy(update={"steps": [*record.steps, in_progress]}), wait=False)

        if not self.options.dry_run:
            ctx.record_intent = write_intent
            # A change an earlier run left unverified is settled by this one (see apply_patch).
            ctx.records_request = await s.journal.prefetch(recipe.name)
        for step in recipe.select(self.options.steps):
            if self.interrupt.requested and not stopped_by:
                stopped_by = "interrupt"
            if stopped_by:
                why = "interrupted (Ctrl-C)" if stopped_by == "interrupt" else f"step {stopped_by} failed"
                result = StepResult(name=step.name, kind=step.kind, status="skipped", message=f"not run: {why}")
            else:
                try:
                    await s.journal.flush()  # a record that did not land stops the run before more changes
                except HostError as exc:
                    return _journal_failed(record, exc)
                result = await self._run_step(ctx, step)
                log.info("step.done", host=s.host.name, step=step.name, status=result.status, message=result.message)
            record.steps.append(result)
            if result.status == "failed" and not self.options.dry_run:
                stopped_by = step.name  # a plan reads only: it goes on, to show every problem at once
            if result.status in ("changed", "failed") and not self.options.dry_run:
                # After every change: a crash never loses a backup's record. Pipelined: the agent
                # writes it before it reads its next request; its answer is checked at the end.
                await s.journal.write(record, wait=False)
        status = host_status(record.steps)
        if not self.options.dry_run:
            record.finished, record.status = time.time(), status
            try:
                await s.journal.write(record, wait=False)
                await s.journal.prune(recipe.name, recipe.keep_runs)  # waits for the writes too
            except HostError as exc:
                return _journal_failed(record, exc)
        return HostResult(status=status, steps=record.steps)

    async def _run_step(self, ctx: HostContext, step: Step) -> StepResult:
        try:
            if step.patch:
                return await apply_patch(ctx, step, await plan_patch(ctx, step))
            if step.check:
                return await run_check(ctx, step)
            if step.deploy:
                return await apply_deploy(ctx, step)
            if step.launch:
                return await apply_launch(ctx, step)
        except HostError as exc:
            return StepResult(name=step.name, kind=step.kind, status="failed", message=str(exc))
        raise UsageError(f"step {step.name}: unknown kind")  # pragma: no cover - validated earlier

    # ------------------------------------------------------------------ status

    async def status(self, s: Session) -> HostResult:
        assert self.loaded
        ctx = self._context(s)
        ctx.dry_run = True
        records = await s.journal.runs(self.loaded.recipe.name)
        steps = []
        for step in self.loaded.recipe.select(self.options.steps):
            if step.check:
                steps.append(StepResult(name=step.name, kind=step.kind, status="not-applicable",
                                        message="a check has no state; apply runs it"))
                continue
            try:
                if step.launch:
                    steps.append(_launch_state((await plan_launch(ctx, step))[0]))
                    continue
                if step.deploy:
                    steps.append(await status_deploy(ctx, step, records))
                    continue
                planned = (await plan_patch(ctx, step)).result if step.patch else (await plan_deploy(ctx, step))[0]
            except HostError as exc:
                steps.append(StepResult(name=step.name, kind=step.kind, status="failed", message=str(exc)))
                continue
            steps.append(_state_of(planned, records))
        order = ["failed", "drifted", "pending"]
        worst = next((o for o in order if any(st.status == o for st in steps)), "applied")
        return HostResult(status=worst if worst != "applied" else "ok", steps=steps)

    # ------------------------------------------------------------------ rollback

    async def rollback(self, s: Session) -> HostResult:
        assert self.loaded
        recipe = self.loaded.recipe
        records = await s.journal.runs(recipe.name)
        wanted = self.options.steps
        if wanted:
            recipe.select(wanted)  # unknown names are a usage error
        target = rollback_target(records, self.options.run, wanted)
        if target is None:
            what = f"run {self.options.run}" if self.options.run else "applied change"
            if self.options.run:
                return HostResult(status="failed", message=f"no {what} of {recipe.name} in the journal")
            return HostResult(status="ok", message=f"nothing to roll back: no {what} of {recipe.name} in the journal")
        record = RunRecord(run_id=self.run_id, kind="rollback", recipe=recipe.name,
                           recipe_sha256=self.loaded.content_sha256, host=s.host.name, user=_user(),
                           patchkit_version=__version__, started=time.time(), rollback_of=target.run_id)
        for step in reversed(target.live_steps()):
            if wanted and step.name not in wanted:
                continue
            record.steps.append(await self._restore(s, step, target))
        record.finished, record.status = time.time(), host_status(record.steps)
        await s.journal.write(record)
        done = [st.name for st in record.steps if st.status in ("changed", "ok")]
        if done:
            target.rolled_back_steps = sorted(set(target.rolled_back_steps) | set(done))
            target.rolled_back_by = self.run_id
            await s.journal.write(target)
        message = f"rollback of run {target.run_id}"
        older = rollback_target([r for r in records if r.run_id != target.run_id], None, wanted)
        if older is not None and not self.options.run:
            message += f"; run {older.run_id} also has changes in place: roll back again to undo them"
        return HostResult(status=record.status, steps=record.steps, message=message)

    async def _restore(self, s: Session, step: StepResult, target: RunRecord) -> StepResult:
        if step.kind == "deploy":
            return await self._undeploy(s, step, target)
        if step.kind == "launch":
            ok, message = await undo_launch(s.agent, s.journal.state_dir, step, self.options.force,
                                            self.redactor, self._launch_env(step.name))
            return StepResult(name=step.name, kind="launch", status="changed" if ok else "failed", message=message)
        result = StepResult(name=step.name, kind=step.kind, status="failed", file=step.file,
                            sha256_before=step.sha256_after, sha256_after=step.sha256_before, backup=step.backup)
        try:
            outcome = await s.agent.call("restore", path=step.file, backup_path=step.backup,
                                         expected_current=step.sha256_after, original_sha256=step.sha256_before,
                                         force=self.options.force)
        except HostError as exc:
            result.message = str(exc)
            return result
        if outcome["already"]:
            result.status, result.message = "ok", "already the original"
        else:
            result.status, result.message = "changed", f"restored the original from run {target.run_id}"
        return result

    def _launch_env(self, step: str) -> dict[str, str]:
        """The env the rolled-back recipe gives a launch step: journals keep only the names."""
        assert self.loaded
        found = next((s for s in self.loaded.recipe.steps if s.name == step and s.launch), None)
        return dict(found.launch.env) if found and found.launch else {}

    async def _undeploy(self, s: Session, step: StepResult, target: RunRecord) -> StepResult:
        written = (step.details or {}).get("files", [])
        message = await undo_files(s.agent, written, force=self.options.force)
        failed = message.startswith("NOT")
        return StepResult(name=step.name, kind="deploy", status="failed" if failed else "changed", file=step.file,
                          message=message if failed else f"{message} (deployed by run {target.run_id})")

    # ------------------------------------------------------------------ history

    async def history(self, s: Session) -> HostResult:
        records = await s.journal.runs(self.loaded.recipe.name if self.loaded else None)
        steps = [
            StepResult(name=r.run_id, kind=r.kind, status=_history_status(r),
                       message=_history_line(r))
            for r in records
        ]
        return HostResult(status="ok", steps=steps)


def _journal_failed(record: RunRecord, exc: HostError) -> HostResult:
    """The journal stopped taking records: the host fails, and the report still shows what was
    done (each change was named by its intent record before it was made)."""
    changed = [st.name for st in record.steps if st.status == "changed"]
    tail = (f"; in place: {', '.join(changed)} (each named by the record written before it: status shows it, "
            "rollback undoes it)" if changed else "")
    return HostResult(status="failed", steps=record.steps,
                      message=f"{exc}; the journal takes no more records, so the run stopped{tail}")


def _state_of(planned: StepResult, records: list[RunRecord]) -> StepResult:
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


def _launch_state(planned: StepResult) -> StepResult:
    """running and healthy -> applied; running, unhealthy -> drifted; stopped -> pending."""
    out = planned.model_copy(deep=True)
    details = planned.details or {}
    if planned.status == "ok":
        out.status, out.message = "applied", f"running, healthy (pid {details.get('pid')})"
    elif details.get("running") and planned.message.startswith("running"):
        out.status, out.message = "drifted", f"unhealthy: {planned.message}"
    elif details.get("running"):
        out.status = "pending"
    else:
        out.status, out.message = "pending", f"stopped: {planned.message}"
    return out


def _history_status(record: RunRecord) -> str:
    return record.status if record.status in ("changed", "ok", "skipped", "failed") else "failed"


def _history_line(record: RunRecord) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.started))
    changed = [s.name for s in record.changed_steps()]
    parts = [when, record.recipe, record.kind, record.status]
    if record.rollback_of:
        parts.append(f"undoes {record.rollback_of}")
    if changed:
        parts.append("changed " + ", ".join(changed))
    if record.rolled_back_steps:
        parts.append(f"rolled back by {record.rolled_back_by}")
    return " | ".join(parts)


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:
        return ""
