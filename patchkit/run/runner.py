"""Runs a command (apply, plan, status, rollback, history) on every selected host.

Per host: start the agent through the host's transport, take the host lock, do the
work step by step, journal it, release. Hosts run concurrently; one host failing
never stops the others.
"""

from __future__ import annotations

import functools
import getpass
import sys
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from patchkit import __version__
from patchkit.host.agent.client import AgentClient
from patchkit.host.agent.client import Pending, UntrustedState
from patchkit.host.agent.protocol import LOCK
from patchkit.base.errors import HostError
from patchkit.run.fanout import FanOutPolicy, Interrupt, Progress, fan_out, progress_for
from patchkit.fleet.inventory import HostSpec
from patchkit.run.journal import DEFAULT_STATE_DIR, AmbiguousRun, Journal, rollback_target
from patchkit.base.logs import get_logger
from patchkit.recipe.model import LoadedRecipe, Step
from patchkit.recipe.redact import Redactor
from patchkit.run.results import HostResult, RunRecord, StepResult, StepStatus, host_status
from patchkit.base.reveal import reveal
from patchkit.base.rollout import Size
from patchkit.run.steps.context import EditCache, HostContext
from patchkit.run.steps.registry import kind_named
from patchkit.host.transport import Transport, schemes
from patchkit.host.transport.base import Reach
from patchkit.host.transport.early import EarlyReach

log = get_logger("patchkit")

# Commands that only read their hosts (plan is apply --dry-run): their runs make nothing there.
READING_COMMANDS = frozenset({"plan", "status", "history", "audit", "capture"})

# A work's first reads (Runner._first_reads): sent behind hello and the lock, before either
# is answered; what it asked for by name (Session.early), for the work to take.
EarlyReads = Callable[[AgentClient, Journal], Awaitable[dict[str, Pending[Any]]]]


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
    serial: list[Size] | None = None  # rollout batches (rollout.py)
    max_fail: Size | None = None
    progress: bool = False
    no_restart: bool = False  # launch: refuse to replace a server running a different command
    verify_all: bool = False  # deploy: re-hash every file instead of trusting size+mtime caches
    accept_new_host_keys: bool = False  # SSH: record unknown host keys (a changed key is still refused)
    changes_note: bool = True  # apply: say once per host when its changes last only as long as it (containers)
    early: EarlyReach | None = None  # the first hosts' transports, already connecting (host/transport/early.py)
    history_recipe: str | None = None  # history --recipe: only this recipe's runs
    history_since: float | None = None  # history --since: only runs started then or later (epoch seconds)


@dataclass
class Session:
    host: HostSpec
    transport: Transport
    agent: AgentClient
    journal: Journal
    early: dict[str, Pending[Any]] = field(default_factory=dict)  # what `early` asked for, by name


def transport_for(host: HostSpec, options: Options | None = None) -> Transport:
    """The host's transport, by its address's scheme (host/transport/schemes.py)."""
    options = options or Options()
    return schemes.transport_for(host, Reach(options.accept_new_host_keys, options.changes_note))


def interpreter_for(host: HostSpec, loaded: LoadedRecipe | None, options: Options) -> str:
    return options.python or host.python or (loaded.recipe.python if loaded else None) or "python3"


@asynccontextmanager
async def session(host: HostSpec, python: str, options: Options, owner: str,
                  redactor: Redactor | None = None, warnings: list[str] | None = None,
                  early: EarlyReads | None = None, read_only: bool = False) -> AsyncIterator[Session]:
    """The host's agent, locked; `warnings` gets what it reported (skipped output) once it is closed.
    `early`: the work's first reads, sent behind hello and the lock in the start's one write."""
    transport = (options.early and options.early.take(host.name)) or transport_for(host, options)
    agent: AgentClient | None = None
    try:
        agent = await AgentClient.start(transport, python, host.name)
        journal = Journal(agent, host.state_dir or options.state_dir or DEFAULT_STATE_DIR,
                          redact=(redactor or Redactor()).value)
        # Said while it lasts (stderr, --json or not): a run waiting on another run's lock looks hung.
        agent.on_notice = lambda text: print(f"{reveal(host.name)}: {reveal(text)} (up to {options.lock_timeout:g} s; "
                                             f"--lock-timeout)", file=sys.stderr, flush=True)
        # Sent behind `hello` before its answer: one round trip for both on a slow link.
        try:
            lock = await agent.send(LOCK({"state_dir": journal.state_dir, "timeout_s": options.lock_timeout,
                                          "owner": owner, "create": not read_only}))
            asked = await early(agent, journal) if early else {}
        except HostError:
            await agent.started(python)  # the agent died: its own error says why
            raise
        await agent.started(python)
        locked = await lock.result(options.lock_timeout + 30)
        agent.on_notice = None
        journal.state_dir = locked["state_dir"]  # absolute, as the host resolves ~ and relative paths
        yield Session(host, transport, agent, journal, asked)
    finally:
        if agent is not None:
            await agent.close()
            if warnings is not None:
                warnings.extend(agent.warnings)
        await transport.close()


@dataclass
class Runner:
    loaded: LoadedRecipe | None  # rendered with the recipe's and -e's variables
    options: Options
    run_id: str
    command: str
    edits: EditCache = field(default_factory=EditCache)
    progress: Progress | None = None
    interrupt: Interrupt = field(default_factory=Interrupt)
    # host -> the recipe rendered with that host's variables too (variables.py); a host not
    # here gets `loaded`. Hosts with the same variables share one rendering (and its caches).
    per_host: dict[str, LoadedRecipe] = field(default_factory=dict)
    # hosts whose state dir the agent refused (another user's, or writable by others): the
    # run exits 2, as for a usage error, since the state dir given is what is wrong
    untrusted_state: set[str] = field(default_factory=set)

    @property
    def read_only(self) -> bool:
        """Does this run only read its hosts (then it makes nothing there, not even the state dir)?"""
        return self.options.dry_run or self.command in READING_COMMANDS

    def recipe_for(self, host: str) -> LoadedRecipe | None:
        return self.per_host.get(host, self.loaded)

    def redactor_for(self, host: str) -> Redactor:
        loaded = self.recipe_for(host)
        return loaded.redactor if loaded else Redactor()

    async def on_hosts(self, hosts: list[HostSpec], work: Callable[[Session], Awaitable[HostResult]],
                       early: EarlyReads | None = None) -> dict[str, HostResult]:
        async def one(host: HostSpec) -> HostResult:
            started = time.monotonic()
            python = interpreter_for(host, self.recipe_for(host.name), self.options)
            redactor = self.redactor_for(host.name)
            warnings: list[str] = []
            try:
                async with session(host, python, self.options, f"{self.command} {self.run_id}", redactor,
                                   warnings, early or self._early_for(work, host.name), self.read_only) as s:
                    result = await work(s)
                    result.exec_requests = s.transport.exec_requests
            except HostError as exc:
                if isinstance(exc, UntrustedState):
                    self.untrusted_state.add(host.name)
                result = HostResult(status="failed", message=str(exc))
            except Exception as exc:  # a bug must fail its host, not the fleet
                where = traceback.extract_tb(exc.__traceback__)[-1]
                log.error("host.crashed", host=host.name, error=repr(exc), at=f"{where.filename}:{where.lineno}")
                result = HostResult(status="failed", message=f"internal error: {type(exc).__name__}: {exc}")
            result.warnings = warnings
            if redactor:  # what the report and the progress lines show: no secret values
                result = HostResult.model_validate(redactor.value(result.model_dump()))
            result.seconds = round(time.monotonic() - started, 3)
            result.transport, result.address = transport_of(host)
            log.info("host.done", host=host.name, status=result.status, command=self.command,
                     seconds=result.seconds, exec_requests=result.exec_requests)
            return result

        policy = FanOutPolicy(self.options.concurrency, self.options.serial, self.options.max_fail)
        self.progress = progress_for(hosts, self.options.progress)
        return await fan_out(hosts, one, policy, self.progress, self.interrupt)

    # ------------------------------------------------------------------ first reads

    def _early_for(self, work: Callable[[Session], Awaitable[HostResult]], host: str) -> EarlyReads | None:
        """What apply, plan and status read first on `host`, asked for in the start's write."""
        loaded = self.recipe_for(host)
        if loaded is None or work not in (self.apply, self.status):
            return None
        listing = work == self.status or not self.options.dry_run
        return functools.partial(self._first_reads, loaded, listing=listing)

    async def _first_reads(self, loaded: LoadedRecipe, agent: AgentClient, journal: Journal,
                           listing: bool) -> dict[str, Pending[Any]]:
        """The recipe's journal records (if the work reads them) and the first step's reads
        (its kind's `first_reads`): asked for behind the lock, answered in the start's round trip."""
        asked: dict[str, Pending[Any]] = {}
        if listing:
            asked["records"] = await journal.prefetch(loaded.recipe.name)
        for step in loaded.recipe.select(self.options.steps)[:1]:
            kind = kind_named(step.kind)
            for request in kind.first_reads(kind.spec_of(step)):
                await agent.prefetch(request)
        return asked

    # ------------------------------------------------------------------ apply / plan

    def _context(self, s: Session) -> HostContext:
        loaded = self.recipe_for(s.host.name)
        assert loaded
        return HostContext(s.host.name, s.agent, s.journal, self.run_id, loaded, self.edits,
                           self.options.dry_run, self.options.force, self.options.verify_all,
                           self.options.no_restart, self._note_for(s.host.name))

    def _note_for(self, host: str) -> Callable[[str], None]:
        progress = self.progress
        return (lambda text: progress.note(host, text)) if progress else (lambda text: None)

    async def apply(self, s: Session) -> HostResult:
        ctx = self._context(s)
        recipe = ctx.loaded.recipe  # this host's rendering
        record = RunRecord(run_id=self.run_id, kind="apply", recipe=recipe.name,
                           recipe_sha256=ctx.loaded.content_sha256, host=s.host.name, user=_user(),
                           patchkit_version=__version__, started=time.time())
        stopped_by: str | None = None

        async def write_intent(in_progress: StepResult) -> None:
            await s.journal.write(record.model_copy(update={"steps": [*record.steps, in_progress]}), wait=False)

        if not self.options.dry_run:
            ctx.record_intent = write_intent
            # A change an earlier run left unverified is settled by this one (see apply_patch).
            ctx.records_request = s.early.pop("records", None) or await s.journal.prefetch(recipe.name)
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
            ctx.done.append(result)
            if result.status == "failed" and not self.options.dry_run:
                stopped_by = step.name  # a plan reads only: it goes on, to show every problem at once
            if result.status in ("changed", "failed") and not self.options.dry_run:
                # After every change: a crash never loses a backup's record. Pipelined: the agent
                # writes it before it reads its next request; its answer is checked at the end.
                await s.journal.write(record, wait=False)
        status = host_status(record.steps)
        notices = []
        note = getattr(s.transport, "changes_note", None)  # a transport's optional word on its changes (base.py)
        if note and status == "changed" and not self.options.dry_run:
            notices.append(note)
        if not self.options.dry_run:
            record.finished, record.status = time.time(), status
            try:
                assert ctx.records_request is not None  # asked for above: the journal as this run found it
                await s.journal.finish(record, recipe.keep_runs, ctx.records_request)  # waits for the writes too
            except HostError as exc:
                return _journal_failed(record, exc)
        return HostResult(status=status, steps=record.steps, notices=notices)

    async def _run_step(self, ctx: HostContext, step: Step) -> StepResult:
        try:
            return await kind_named(step.kind).run(ctx, step)
        except HostError as exc:
            return StepResult(name=step.name, kind=step.kind, status="failed", message=str(exc))

    # ------------------------------------------------------------------ status

    async def status(self, s: Session) -> HostResult:
        ctx = self._context(s)
        ctx.dry_run = True
        listing: Pending[Any] | None = s.early.pop("records", None)
        records = await s.journal.read_runs(listing or await s.journal.prefetch(ctx.loaded.recipe.name))
        steps = []
        for step in ctx.loaded.recipe.select(self.options.steps):
            try:
                steps.append(await kind_named(step.kind).status(ctx, step, records))
            except HostError as exc:
                steps.append(StepResult(name=step.name, kind=step.kind, status="failed", message=str(exc)))
        order: list[Literal["failed", "drifted", "stale", "pending"]] = ["failed", "drifted", "stale", "pending"]
        worst: Literal["failed", "drifted", "stale", "pending", "ok"] = next(
            (o for o in order if any(st.status == o for st in steps)), "ok")
        return HostResult(status=worst, steps=steps)

    # ------------------------------------------------------------------ rollback

    async def rollback(self, s: Session) -> HostResult:
        loaded = self.recipe_for(s.host.name)
        assert loaded
        recipe = loaded.recipe
        records = await s.journal.runs(recipe.name)
        wanted = self.options.steps
        if wanted:
            recipe.select(wanted)  # unknown names are a usage error
        try:
            target = rollback_target(records, self.options.run, wanted)
        except AmbiguousRun as exc:
            return HostResult(status="failed", message=str(exc))
        if target is None:
            what = f"run {self.options.run}" if self.options.run else "applied change"
            if self.options.run:
                return HostResult(status="failed", message=f"no {what} of {recipe.name} in the journal")
            return HostResult(status="ok", message=f"nothing to roll back: no {what} of {recipe.name} in the journal")
        record = RunRecord(run_id=self.run_id, kind="rollback", recipe=recipe.name,
                           recipe_sha256=loaded.content_sha256, host=s.host.name, user=_user(),
                           patchkit_version=__version__, started=time.time(), rollback_of=target.run_id)
        ctx = self._context(s)
        # Kinds that restart what runs (launch) go last: a server restarted onto the original
        # code must start after the files are the original again.
        undo_order = list(reversed(target.live_steps()))
        undo_order.sort(key=lambda st: kind_named(st.kind).undo_last)  # stable
        for step in undo_order:
            if wanted and step.name not in wanted:
                continue
            try:
                record.steps.append(await kind_named(step.kind).undo(ctx, step, target))
            except HostError as exc:
                record.steps.append(StepResult(name=step.name, kind=step.kind, status="failed", message=str(exc)))
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

    # ------------------------------------------------------------------ history

    async def history(self, s: Session) -> HostResult:
        records = await s.journal.runs(self.options.history_recipe or (self.loaded.recipe.name if self.loaded else None))
        since = self.options.history_since
        records = [r for r in records if since is None or r.started >= since]
        steps = [
            StepResult(name=r.run_id, kind=r.kind, status=_history_status(r), message=_history_line(r))
            for r in records
        ]
        return HostResult(status="ok", steps=steps, runs=[_history_details(r) for r in records])


def _journal_failed(record: RunRecord, exc: HostError) -> HostResult:
    """The journal stopped taking records: the host fails, and the report still shows what was
    done (each change was named by its intent record before it was made)."""
    changed = [st.name for st in record.steps if st.status == "changed"]
    tail = (f"; in place: {', '.join(changed)} (each named by the record written before it: status shows it, "
            "rollback undoes it)" if changed else "")
    return HostResult(status="failed", steps=record.steps,
                      message=f"{exc}; the journal takes no more records, so the run stopped{tail}")


_HISTORY_STATUS: dict[str, StepStatus] = {"changed": "changed", "ok": "ok", "skipped": "skipped"}


def _history_status(record: RunRecord) -> StepStatus:
    return _HISTORY_STATUS.get(record.status, "failed")


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


def transport_of(host: HostSpec) -> tuple[str, str]:
    """How a host is reached, and at what address, as the report says it (its scheme's words)."""
    return schemes.reported(host)


def _history_details(record: RunRecord) -> dict[str, object]:
    """The run as fields (history --json): what the message line says, one key each."""
    return {"run_id": record.run_id, "command": record.kind, "recipe": record.recipe, "status": record.status,
            "started": _utc(record.started), "finished": _utc(record.finished) if record.finished else None,
            "user": record.user, "patchkit_version": record.patchkit_version,
            "changed_steps": [s.name for s in record.changed_steps()],
            "steps": [{"name": s.name, "kind": s.kind, "status": s.status} for s in record.steps],
            "rollback_of": record.rollback_of, "rolled_back_by": record.rolled_back_by,
            "rolled_back_steps": record.rolled_back_steps}


def _utc(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:
        return ""
