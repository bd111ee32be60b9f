"""The journal on each host: run records and backups, kept outside site-packages.

Layout under the state dir (0700 folders, 0600 files):
    runs/<recipe>/<run_id>.json     one RunRecord per run
    backups/<run_id>/<step>--<path>  the original of every file a run changed (backup_name)
    lock                             held (flock) by the run working on the host
"""

from __future__ import annotations

import hashlib
import posixpath
import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from patchkit.host.agent.protocol import (
    END,
    JOURNAL_LIST,
    JOURNAL_PRUNE,
    JOURNAL_WRITE,
    JournalListReply,
    JournalWriteReply,
)
from patchkit.run.results import RunRecord, StepResult

if TYPE_CHECKING:  # annotations: reading records does not load the running agent
    from patchkit.host.agent.client import AgentClient, Pending
    from patchkit.run.installed import ChangedFile

DEFAULT_STATE_DIR = "~/.local/state/patchkit"


def new_run_id() -> str:
    """UTC time to the microsecond, then random: runs sort by id in the order they started
    (the journal relies on it: newest run to roll back, oldest runs to prune)."""
    now = time.time()
    micro = int(now % 1 * 1_000_000)
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f".{micro:06d}Z-" + secrets.token_hex(3)


@dataclass
class Journal:
    agent: AgentClient
    state_dir: str
    redact: Callable[[Any], Any] = lambda data: data  # the recipe's Redactor.value: no secret is journaled
    _unconfirmed: list[Pending[JournalWriteReply]] = field(default_factory=list)
    # (recipe, run_id) -> the record as last written in this session (this run's, and earlier
    # runs' it amended): what a listing taken now would show of them (see finish)
    _written: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    def backup_path(self, run_id: str, step: str, file: str) -> str:
        return posixpath.join(self.state_dir, "backups", run_id, backup_name(step, file))

    async def write(self, record: RunRecord, wait: bool = True) -> None:
        """Write a run record; with wait=False the answer is checked by the next `flush` (or
        any read of the journal), so a write costs no round trip of its own."""
        data = self.redact(record.model_dump(mode="json"))
        self._written[(record.recipe, record.run_id)] = data
        self._unconfirmed.append(await self.agent.send(JOURNAL_WRITE({
            "state_dir": self.state_dir,
            "recipe": record.recipe,
            "run_id": record.run_id,
            "record": data,
        })))
        if wait:
            await self.flush()

    async def flush(self) -> None:
        """Raise if any record written so far did not land."""
        while self._unconfirmed:
            await self._unconfirmed.pop(0).result()

    async def runs(self, recipe: str | None = None) -> list[RunRecord]:
        listing = await self.agent.send(JOURNAL_LIST({"state_dir": self.state_dir, "recipe": recipe}))
        return await self.read_runs(listing)

    async def prefetch(self, recipe: str) -> Pending[JournalListReply]:
        """Ask for the records now, read them later (`read_runs`): pipelined with the requests
        that follow, so a run that may need them pays no round trip of its own."""
        return await self.agent.send(JOURNAL_LIST({"state_dir": self.state_dir, "recipe": recipe}))

    async def read_runs(self, listing: Pending[JournalListReply]) -> list[RunRecord]:
        await self.flush()
        return _parsed(await listing.result())

    async def finish(self, record: RunRecord, keep: int, listing: Pending[JournalListReply]) -> int:
        """The run's final record, the prune and the agent's `end` in one write, then their answers:
        they come back with the agent's exit, so the run's last records cost no round trip of
        their own. Raises if a record did not land; returns how many runs were pruned.

        The runs to prune are picked from `listing` (the records as this run found them, under
        its lock: only this session wrote them since) with every record this session wrote in
        place of its listed version (this run's, and earlier runs' it amended: a change settled
        or voided): the journal a listing taken now would show, without asking for it. Were a
        write of this run to fail, the agent refuses the prune (journal_prune is guarded like
        every change)."""
        await self.write(record, wait=False)
        now = {r.run_id: r for r in _parsed(await listing.result())}
        for (recipe, run_id), data in self._written.items():
            if recipe == record.recipe:
                now[run_id] = RunRecord.model_validate(data)
        doomed = _doomed(sorted(now.values(), key=lambda r: r.run_id), keep)
        pruned = None
        if doomed:
            pruned = await self.agent.send(JOURNAL_PRUNE({"state_dir": self.state_dir, "recipe": record.recipe,
                                                          "drop_run_ids": doomed}))
        ended = await self.agent.send(END({}))
        await self.flush()
        if pruned is not None:
            await pruned.result()
        await ended.result()
        return len(doomed)


def _parsed(raw: JournalListReply) -> list[RunRecord]:
    records = []
    for item in raw:
        try:
            records.append(RunRecord.model_validate(item))
        except ValueError:
            continue  # a record we cannot read is not ours to act on
    return sorted(records, key=lambda r: r.run_id)


def _doomed(records: list[RunRecord], keep: int) -> list[str]:
    """The runs a journal of `records` (sorted by id) drops to keep `keep`: the oldest, except
    those whose backup is the way back for a change still in place."""
    protected = {r.run_id for r in active_changes(records).values()}
    return [r.run_id for r in records[:-keep] if r.run_id not in protected] if keep < len(records) else []


def backup_name(step: str, file: str) -> str:
    """`<step>--<the file's full path, / as %2F>`: one name per file, so files of one step that
    share a basename (three `serving.py`) never share a backup. A path too long for one file
    name keeps its tail (the part inside the package), made unique by a hash of the whole."""
    encoded = file.lstrip("/").replace("%", "%25").replace("/", "%2F")
    name = f"{step}--{encoded}"
    if len(name.encode()) <= 240:
        return name
    digest = hashlib.sha256(file.encode()).hexdigest()[:16]
    tail = encoded.encode()[-max(40, 200 - len(step.encode())):].decode("utf-8", "ignore")
    return f"{step}--{digest}--{tail}"


def active_changes(records: list[RunRecord]) -> dict[tuple[str, str], RunRecord]:
    """(step, file) -> the newest apply run that changed it and was not rolled back.

    That run's backup is the way back to the original, so it is never pruned.
    """
    stacks: dict[tuple[str, str], list[RunRecord]] = {}
    for record in sorted(records, key=lambda r: r.run_id):
        if record.kind != "apply":
            continue
        for step in record.changed_steps():
            key = (step.name, step.file or "")
            stack = stacks.setdefault(key, [])
            if step.name not in record.rolled_back_steps:
                stack.append(record)  # an undone run drops out; an older one still in place stays
    return {key: stack[-1] for key, stack in stacks.items() if stack}


def live_change(records: list[RunRecord], step: str, file: str | None) -> tuple[RunRecord, StepResult] | None:
    """The journaled change to (step, file) still in place: its run and its step (file: the
    one file of a single-file step, None or "" for a step recorded with `files`)."""
    record = active_changes(records).get((step, file or ""))
    if record is None:
        return None
    done = next(s for s in record.changed_steps() if s.name == step and (s.file or "") == (file or ""))
    return record, done


def active_step(records: list[RunRecord], step: str, file: str | None) -> StepResult | None:
    live = live_change(records, step, file)
    return live[1] if live else None


def unverified_step(records: list[RunRecord], step: str, file: str | None) -> tuple[RunRecord, StepResult] | None:
    """The live change to (step, file) whose run was cut off before its checks were recorded."""
    live = live_change(records, step, file)
    return live if live is not None and live[1].verified is False else None


class AmbiguousRun(Exception):
    """A --run prefix that names several runs."""


def rollback_target(records: list[RunRecord], run_id: str | None, steps: list[str] | None) -> RunRecord | None:
    """The named run (its whole id, or a prefix only it has), or the newest apply run with a
    change (in `steps`) not yet undone. AmbiguousRun when a prefix names several."""
    applies = [r for r in records if r.kind == "apply"]
    if run_id:
        exact = [r for r in applies if r.run_id == run_id]
        named = exact or [r for r in applies if r.run_id.startswith(run_id)]
        if len(named) > 1:
            raise AmbiguousRun(f"--run {run_id} names {len(named)} runs: " + ", ".join(r.run_id for r in named)
                               + "; give more of the id")
        return named[0] if named else None
    for record in reversed(applies):
        if any(not steps or s.name in steps for s in record.live_steps()):
            return record
    return None


# ---------------------------------------------------------------- why a file differs from RECORD

PATCHED = "patched by patchkit"
UNEXPLAINED = "unexplained"


@dataclass(frozen=True)
class Explanation:
    verdict: str  # PATCHED | UNEXPLAINED
    why: str
    run_id: str | None = None
    recipe: str | None = None
    step: str | None = None


WrittenFiles = Callable[[StepResult], "list[tuple[str, str | None]]"]  # a journaled step -> (path, sha256 after)


def explain(changed: ChangedFile, records: list[RunRecord], written: WrittenFiles) -> Explanation:
    """Why a file differs from RECORD, from the journal's changes still in place (`written`:
    the files a journaled step wrote, as its kind says: steps.registry.written_files)."""
    if changed.change != "modified":
        return Explanation(UNEXPLAINED, f"{changed.change}: patchkit never removes a package's files")
    resized = (f" ({changed.size} bytes, RECORD says {changed.record_size}; not hashed)"
               if changed.sha256 is None and changed.size is not None else "")
    ours = []
    for record in active_changes(records).values():
        for step in record.live_steps():
            for path, sha_after in written(step):
                if path in (changed.path, changed.real):
                    ours.append((record, step, sha_after))
    ours.sort(key=lambda found: found[0].run_id)
    for record, step, sha_after in reversed(ours):
        if sha_after == changed.sha256:
            return Explanation(PATCHED, f"{PATCHED}: run {record.run_id}, recipe {record.recipe}, step {step.name}",
                               record.run_id, record.recipe, step.name)
    if ours:
        record, step, _ = ours[-1]
        return Explanation(UNEXPLAINED, (
            f"{UNEXPLAINED}: changed since patchkit wrote it (run {record.run_id}, recipe {record.recipe}, "
            f"step {step.name}): an edit on top of the patch"), record.run_id, record.recipe, step.name)
    return Explanation(UNEXPLAINED, f"{UNEXPLAINED}: modified{resized}, and no patchkit run on this host wrote it")
