"""The one shape every step kind has: plan, apply, state, undo.

The runner knows no kind by name: it looks the step's kind up in `steps.registry` and
calls these four. A kind's module owns all four (and whatever helpers they share), so
adding a kind touches its own module and the registry only.

- plan:  read the host, decide what would change; nothing is written (plan, status, apply)
- apply: make the planned change, verified and journaled; under --dry-run, the plan itself
- state: the plan and the journal -> applied | pending | drifted | not-applicable (status)
- undo:  put back what a journaled run changed (rollback)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, Generic, TypeVar

from patchkit.recipe import Step
from patchkit.results import RunRecord, StepResult
from patchkit.steps.context import HostContext


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


class StepKind(ABC, Generic[Data]):
    name: ClassVar[str]  # the recipe key: `patch:`, `check:`, ...

    @abstractmethod
    async def plan(self, ctx: HostContext, step: Step) -> Planned[Data]: ...

    @abstractmethod
    async def apply(self, ctx: HostContext, step: Step, planned: Planned[Data]) -> StepResult: ...

    @abstractmethod
    async def state(self, ctx: HostContext, step: Step, planned: Planned[Data],
                    records: list[RunRecord]) -> StepResult: ...

    @abstractmethod
    async def undo(self, ctx: HostContext, done: StepResult, target: RunRecord) -> StepResult:
        """Undo `done`, a step of journaled run `target` (ctx.force: even if it drifted)."""

    def written(self, done: StepResult) -> list[tuple[str, str | None]]:
        """(path, sha256 after) of each installed file `done` wrote: what `audit` and `status`
        explain as patched by patchkit. None for most kinds."""
        return []
