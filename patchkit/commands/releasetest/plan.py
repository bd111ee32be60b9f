"""One release planned as a host would be: the real agent over a folder of its files.

The release's kept files are copied into a throw-away folder laid out like site-packages;
the agent runs on this machine's interpreter with that folder first on sys.path and
nothing else that could hold a package (`-I -S`: no site-packages, no user site, no
PYTHON* variables, not the working folder), so LOCATE finds the release's package and no
other. Each patch step is planned through its kind (`kind.plan`), as `patchkit plan` does
on a host. When a later patch step follows a step that would change the release, the
change is applied to the throw-away copy through the same kind (`kind.apply`, its
verification without imports: the release's dependencies are not there), so the later
step sees what a run would have written. Nothing outside the throw-away folder is written.
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from patchkit.host.agent.client import AgentClient
from patchkit.base.errors import HostError
from patchkit.run.journal import Journal, new_run_id
from patchkit.recipe.model import LoadedRecipe, Step
from patchkit.commands.releasetest.index import copy_release
from patchkit.commands.releasetest.touchable import VERSION_FILES, release_reads
from patchkit.run.results import StepResult
from patchkit.run.steps.context import EditCache, HostContext
from patchkit.run.steps.registry import kind_named
from patchkit.run.steps.unit import UnitPlan
from patchkit.host.transport.local import LocalTransport, _LocalStreams


class FolderTransport(LocalTransport):
    """The local transport, with `folder` as the agent's only place to find packages."""

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = folder

    async def spawn(self, argv: list[str]) -> _LocalStreams:
        python, flag, program, *rest = argv  # [python, -c, BOOTSTRAP, nonce] (agent_argv)
        if flag != "-c":
            raise HostError(f"unexpected agent command line {argv[:2]}")
        # The folder first for the agent, and for the programs it starts (a check step's): PYTHONPATH
        # is set inside the agent, which itself ignores it (-I).
        folder = repr(str(self.folder))
        prelude = f"import sys,os;sys.path.insert(0,{folder});os.environ['PYTHONPATH']={folder};"
        return await super().spawn([python, "-I", "-S", "-c", prelude + program, *rest])


def version_record(root: Path, package: str, version: str) -> None:
    """A distribution record giving `package` its version (read by the agent when no version file
    of the package's says it; the dist-info files of a wheel are not among the kept files)."""
    info = root / f"{package}-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n")
    (info / "top_level.txt").write_text(package + "\n")


@dataclass
class StepOutcome:
    """A step on one release: its plan, and (outside its range) the plan without the range."""

    result: StepResult
    unranged: StepResult | None = None  # would the edit change this release the range skips?


def without_range(step: Step) -> Step:
    return step.model_copy(update={step.kind: step.spec.model_copy(update={"versions": None})})


def without_imports(step: Step) -> Step:
    """The step as a throw-away copy is written: syntax and read-back checks, no imports."""
    return step.model_copy(update={"verify": None})


async def plan_release(version: str, files: Path, wanted: list[str], steps: list[Step],
                       loaded: LoadedRecipe, edits: EditCache, known: bool = False,
                       contents: dict[str, dict[str, bytes | None]] | None = None) -> dict[str, StepOutcome]:
    """Every step of `steps` (each one a kind plans on releases) on the release whose kept files are in `files`, in order.
    `known`: `version` is the release's (the index's), for a package whose files do not say it.
    `contents`, if given, gets each changing step's new files: step -> {path in the release
    (`vllm/config/speculative.py`): its bytes, None for a file the step removes} (a bundle's)."""
    with tempfile.TemporaryDirectory(prefix="patchkit-test-") as tmp:
        site = Path(tmp, "site")
        site.mkdir()
        copy_release(files, wanted, site)
        for package in sorted({r.package for s in steps if (r := release_reads(s))}) if known else ():
            if not any((site / package / name).is_file() for name in VERSION_FILES[:2]):
                version_record(site, package, version)
        transport = FolderTransport(site)
        agent: AgentClient | None = None
        try:
            agent = await AgentClient.start(transport, sys.executable, f"release {version}")
            await agent.started(sys.executable)
            ctx = HostContext(host=version, agent=agent, journal=Journal(agent, str(Path(tmp, "state"))),
                              run_id=new_run_id(), loaded=loaded, edits=edits, dry_run=True)
            out: dict[str, StepOutcome] = {}
            for i, step in enumerate(steps):
                out[step.name] = await _one_step(ctx, step, chain=i + 1 < len(steps),
                                                 kept=None if contents is None else contents.setdefault(step.name, {}),
                                                 site=site)
            return {name: _relative(o, site) for name, o in out.items()}
        finally:
            if agent is not None:
                await agent.close()
            await transport.close()


async def _one_step(ctx: HostContext, step: Step, chain: bool, kept: dict[str, bytes | None] | None = None,
                    site: Path | None = None) -> StepOutcome:
    """HostError (the agent failed us: nothing learned about the release) goes up to the caller.
    kept: gets the planned new files, by their path relative to `site`."""
    kind = kind_named(step.kind)
    spec = kind.spec_of(step)
    planned = await kind.plan_on_release(ctx, step, spec)
    outcome = StepOutcome(planned.result)
    if kept is not None and site is not None and isinstance(planned.data, UnitPlan):
        kept.update({str(Path(path).relative_to(site)): data for path, data in planned.data.contents.items()})
    reads = kind.release_reads(spec)
    assert reads is not None
    if planned.result.status == "skipped" and reads.versions:
        unranged = without_range(step)
        outcome.unranged = (await kind.plan_on_release(ctx, unranged, kind.spec_of(unranged))).result
    if planned.result.status == "changed" and chain:
        ctx.dry_run = False
        try:
            quiet = without_imports(step)
            written = await kind.apply(ctx, quiet, kind.spec_of(quiet), planned)
        finally:
            ctx.dry_run = True
        if written.status != "changed":
            outcome.result = planned.result.model_copy(update={
                "status": "failed",
                "message": f"{planned.result.message}; writing it for the steps after it failed: {written.message}"})
    return outcome


def _relative(outcome: StepOutcome, site: Path) -> StepOutcome:
    """Paths as the release names them (`vllm/config/speculative.py`), not the throw-away folder's."""
    prefix = str(site) + "/"
    pairs = [("a" + prefix, "a/"), ("b" + prefix, "b/"), (prefix, "")]  # diff headers, then the rest

    def fix(result: StepResult | None) -> StepResult | None:
        if result is None:
            return None
        data = result.model_dump()
        return StepResult.model_validate(_replace(data, pairs))

    fixed = fix(outcome.result)
    assert fixed is not None
    return StepOutcome(fixed, fix(outcome.unranged))


def _replace(value: object, pairs: list[tuple[str, str]]) -> object:
    if isinstance(value, str):
        for old, new in pairs:
            value = value.replace(old, new)
        return value
    if isinstance(value, list):
        return [_replace(v, pairs) for v in value]
    if isinstance(value, dict):
        return {k: _replace(v, pairs) for k, v in value.items()}
    return value
