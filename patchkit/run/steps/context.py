"""What a step sees of the host it runs on, and what it shares with other hosts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Sequence

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from patchkit.host.agent.protocol import LOCATE, JournalListReply, LocateArgs, LocateReply
from patchkit.edits import EditResult
from patchkit.run.journal import Journal
from patchkit.recipe.model import LoadedRecipe
from patchkit.run.results import RunRecord, StepResult

if TYPE_CHECKING:  # for annotations: validating a recipe does not load the running agent
    from patchkit.host.agent.client import AgentClient
    from patchkit.host.agent.client import Pending


@dataclass
class EditCache:
    """Hosts of a fleet hold identical files: compute each distinct edit once."""

    results: dict[tuple[str, str], EditResult] = field(default_factory=dict)
    hits: int = 0
    memo: dict[str, Any] = field(default_factory=dict)  # other once-per-run work (deploy sources)


async def _no_intent(step: StepResult) -> None:
    return None


@dataclass
class HostContext:
    host: str
    agent: AgentClient
    journal: Journal
    run_id: str
    loaded: LoadedRecipe
    edits: EditCache
    dry_run: bool
    force: bool = False
    verify_all: bool = False
    no_restart: bool = False
    note: Callable[[str], None] = lambda text: None  # live progress line for this host
    # Journal a step that is about to change the host, before it does (see apply_deploy):
    # if the connection dies half-way, the run's record already names what may have changed.
    record_intent: Callable[[StepResult], Awaitable[None]] = _no_intent
    # This run's results so far on this host, in order: a launch step restarts its server when
    # an earlier step changed a file (staleness.py).
    done: list[StepResult] = field(default_factory=list)
    _located: dict[str, LocateReply] = field(default_factory=dict)
    records_request: Pending[JournalListReply] | None = None  # the journal listing asked for at the run's start
    _records: list[RunRecord] | None = None

    async def records(self) -> list[RunRecord]:
        """This recipe's run records on the host, read once per run (prefetched by apply)."""
        if self._records is None:
            if self.records_request is not None:
                self._records = await self.journal.read_runs(self.records_request)
            else:
                self._records = await self.journal.runs(self.loaded.recipe.name)
        return self._records

    async def amend(self, record: RunRecord) -> None:
        """Rewrite an earlier run's record (a change it left unverified, now settled)."""
        await self.journal.write(record)

    async def locate(self, package: str, modules: list[str], read_first: bool = False) -> LocateReply:
        key = f"{package}\0{read_first}\0" + "\0".join(modules)
        if key not in self._located:
            self._located[key] = await self.agent.call(LOCATE(locate_args(package, modules, read_first)))
        return self._located[key]


def locate_args(package: str, modules: list[str], read_first: bool = False) -> LocateArgs:
    """The one form of a locate's request: a kind's first_reads must ask exactly what its plan does."""
    return {"package": package, "modules": modules, "read_first": read_first}


@dataclass(frozen=True)
class Gate:
    """The outcome of a package/version gate: go, skip (with why) or fail (with why)."""

    version: str | None
    skip: str | None = None
    fail: str | None = None


async def gate(ctx: HostContext, package: str | None, versions: str | None, modules: Sequence[str] = (),
               read_first: bool = False) -> tuple[Gate, LocateReply]:
    if package is None:
        return Gate(None), {"found": False}
    located = await ctx.locate(package, list(modules), read_first)
    python = ctx.agent.info.get("python", "the target interpreter")
    return version_gate(package, located, versions, python), located


def version_gate(package: str, located: LocateReply, versions: str | None, python: str) -> Gate:
    """The gate's verdict on what `locate` found (the package or not, its version, the
    recipe's `versions`): pure, tested as a table (tests/unit/test_decision_tables.py)."""
    if not located["found"]:
        return Gate(None, fail=f"package {package} is not importable by {python} "
                               f"(set python in the inventory or -e python=PATH)")
    version = located.get("version")
    if versions:
        if version is None:
            return Gate(None, fail=f"cannot read the version of {package} at {located['root']}")
        try:
            inside = Version(version) in SpecifierSet(versions, prereleases=True)
        except InvalidVersion:
            return Gate(version, fail=f"{package} reports an unparsable version {version!r}")
        if not inside:
            return Gate(version, skip=f"{package} {version} is outside {versions}")
    return Gate(version)
