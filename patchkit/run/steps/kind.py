"""The one shape every step kind has: plan, apply, state, undo, and what it owns of the recipe.

The runner knows no kind by name: it looks the step's kind up in `steps.registry` and
calls these. A kind's module owns them all (and whatever helpers they share), its spec model
(`spec_model`: what the recipe holds under the kind's key) and its judgement of a journaled
result (`changed`: did it change the host, so rollback has something to undo). Its methods
receive the step's spec typed as that model: no kind digs it out of the step itself.

- plan:  read the host, decide what would change; nothing is written (plan, status, apply)
- apply: make the planned change, verified and journaled; under --dry-run, the plan itself
- state: the plan and the journal -> applied | pending | drifted | not-applicable (status)
- undo:  put back what a journaled run changed (rollback)

and what the rest of patchkit asks of a kind, each kind answering for itself (no default: a
new kind cannot be skipped unnoticed): its facts on the review page (`facts`, and `measured` of a host's result), the files its
journaled results changed for a server's staleness (`file_edits`), whether its undo goes last
(`undo_last`), what the release test says of it (`not_tested`). A kind with host ops of its
own ships their host file (`host_files`) and types them with `Op`s in its module.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Generic, TypeVar

from pydantic import BaseModel

from patchkit.host.agent.protocol import Request
from patchkit.recipe.model import Step
from patchkit.run.results import RunRecord, StepResult
from patchkit.run.steps.context import HostContext
from patchkit.run.steps.release_reads import ReleaseReads
from patchkit.run.steps.staleness import FileEdit

Spec = TypeVar("Spec", bound=BaseModel)  # the kind's recipe model (PatchStep, CheckStep, ...)
Data = TypeVar("Data")  # a kind's own plan data, between its plan and its apply or state


@dataclass
class Planned(Generic[Data]):
    """What a kind found for one step before any change: the result a plan reports, and the
    kind's own data its apply goes on from (new file content, files to send, the server seen)."""

    result: StepResult
    data: Data


@dataclass(frozen=True)
class Undone:
    """What putting back a step's change did, as a value: all of it put back (`ok`), or not
    (the message says what was left and why). A kind's undo turns it into its StepResult."""

    ok: bool
    message: str


# The class attributes every kind sets itself (StepKind gives them no default; registry checks).
CHOSEN = ("undo_last", "not_tested")


class StepKind(ABC, Generic[Spec, Data]):
    name: ClassVar[str]  # the recipe key: `patch:`, `check:`, ...
    spec_model: type[Spec]  # what the recipe holds under that key (a class attribute of each kind)
    # Rollback undoes steps in reverse; those of a kind with undo_last go after all others (a
    # server restarted onto the original code starts once the files are the original again).
    undo_last: ClassVar[bool]
    # What `patchkit test` says of a step it does not plan on releases (release_reads None).
    not_tested: ClassVar[str | None]
    # The host files declaring this kind's own ops, in load order (patchkit package, file name):
    # sent with the first request for one of them (host/agent/client.py AGENT_EXTENSIONS).
    host_files: ClassVar[tuple[tuple[str, str], ...]] = ()

    def spec_of(self, step: Step) -> Spec:
        """The step's spec, as this kind's model (the recipe validated exactly one kind key)."""
        spec = step.spec
        assert isinstance(spec, self.spec_model), (step.name, self.name)
        return spec

    @abstractmethod
    async def plan(self, ctx: HostContext, step: Step, spec: Spec) -> Planned[Data]: ...

    @abstractmethod
    async def apply(self, ctx: HostContext, step: Step, spec: Spec, planned: Planned[Data]) -> StepResult: ...

    @abstractmethod
    async def state(self, ctx: HostContext, step: Step, spec: Spec, planned: Planned[Data],
                    records: list[RunRecord]) -> StepResult: ...

    @abstractmethod
    async def undo(self, ctx: HostContext, done: StepResult, target: RunRecord) -> StepResult:
        """Undo `done`, a step of journaled run `target` (ctx.force: even if it drifted)."""

    def step_now(self, ctx: HostContext, done: StepResult) -> Step | None:
        """The recipe's step of `done`'s name and this kind, as rendered for this run: what an
        undo confines its writes to (the package or dest it resolves to now, not what the
        journaled record says). None when the recipe has no such step any more."""
        for step in ctx.loaded.recipe.steps:
            if step.name == done.name and step.kind == self.name:
                return step
        return None

    @abstractmethod
    def changed(self, done: StepResult) -> bool:
        """Did this journaled result change the host (so rollback has something to undo)?"""

    @abstractmethod
    def facts(self, step: Step, spec: Spec, shown: Callable[[Any], Any], dry_run: bool) -> list[tuple[str, str]]:
        """What the review page says the step does, as (label, text) rows; `shown` redacts a value."""

    @abstractmethod
    def measured(self, done: StepResult) -> list[tuple[str, str]]:
        """What a host's result of this kind adds to the step's facts on the review page (the
        checks that verified a write are shown for every kind)."""

    @abstractmethod
    def file_edits(self, done: StepResult, undone: StepResult | None) -> list[FileEdit]:
        """The files a journaled changed result of this kind changed, with their hashes (what
        makes a running server stale). `undone`: for a rollback's step, the step it undid."""

    def written(self, done: StepResult) -> list[tuple[str, str | None]]:
        """(path, sha256 after) of each installed file `done` wrote: what `audit` and `status`
        explain as patched by patchkit. None for most kinds."""
        return []

    def first_reads(self, spec: Spec) -> list[Request[Any]]:
        """The read-only requests this kind's plan makes first, exactly as it makes them: a run
        whose first step this is asks for them behind hello and the lock (one round trip for
        all); the plan's own identical request then gets that answer. None by default."""
        return []

    def release_reads(self, spec: Spec) -> ReleaseReads | None:
        """What `patchkit test` needs to plan this step on a release's files alone (its package,
        range and the files it reads); None: not planned on releases (`not_tested` says why)."""
        return None

    async def plan_on_release(self, ctx: HostContext, step: Step, spec: Spec) -> Planned[Data]:
        """The step's outcome on a release's files laid out as a throw-away site-packages
        (`patchkit test`): its plan, unless the kind's verdict needs more (a check runs)."""
        return await self.plan(ctx, step, spec)

    async def run(self, ctx: HostContext, step: Step) -> StepResult:
        """plan, then apply (apply and plan commands)."""
        spec = self.spec_of(step)
        return await self.apply(ctx, step, spec, await self.plan(ctx, step, spec))

    async def status(self, ctx: HostContext, step: Step, records: list[RunRecord]) -> StepResult:
        """plan, then state (the status command)."""
        spec = self.spec_of(step)
        return await self.state(ctx, step, spec, await self.plan(ctx, step, spec), records)
