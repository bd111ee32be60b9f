"""Every step kind, by the recipe key that names it. The runner looks kinds up here only.

Adding a kind: its module under run/steps/ (the StepKind subclass with its spec model, its
review facts, its word for the release test, its staleness contribution, and any host ops it
declares with their host file), one line in KINDS, and its tests."""

from __future__ import annotations

from typing import Any

from patchkit.host.agent.files import add_extension
from patchkit.recipe.model import register_kind
from patchkit.run import results
from patchkit.run.results import StepResult
from patchkit.run.steps import staleness
from patchkit.run.steps.check import CheckKind
from patchkit.run.steps.deploy import DeployKind
from patchkit.run.steps.kind import CHOSEN, StepKind
from patchkit.run.steps.launch import LaunchKind
from patchkit.run.steps.patch import PatchKind
from patchkit.run.steps.pip import PipKind

KINDS: dict[str, StepKind[Any, Any]] = {kind.name: kind for kind in (
    PatchKind(), CheckKind(), DeployKind(), LaunchKind(), PipKind(),
)}


def every_kind_chooses(kinds: dict[str, StepKind[Any, Any]]) -> None:
    """What the StepKind shape leaves to each kind without a default, each kind says (its
    abstract methods are enforced when it is made; these class attributes, here)."""
    for name, kind in kinds.items():
        missing = [attr for attr in CHOSEN if not hasattr(kind, attr)]
        if missing:
            raise RuntimeError(f"step kind {name!r} does not say its {', '.join(missing)}")


every_kind_chooses(KINDS)
for _name, _kind in KINDS.items():
    register_kind(_name, _kind.spec_model)
    if _kind.host_files:
        add_extension(_name, _kind.host_files)
# Whether a journaled step changed the host is its kind's answer (RunRecord.changed_steps).
results.CHANGES_HOST.update({name: kind.changed for name, kind in KINDS.items()})
# The files a journaled step changed, for a server's staleness, are its kind's answer too.
staleness.KIND_EDITS.update({name: kind.file_edits for name, kind in KINDS.items()})


def written_files(step: StepResult) -> list[tuple[str, str | None]]:
    """(path, sha256 after) of each file a journaled step wrote, as its kind says (journal.explain)."""
    kind = KINDS.get(step.kind)
    return kind.written(step) if kind is not None else []


def kind_named(name: str) -> StepKind[Any, Any]:
    """The kind of a recipe step (`step.kind`) or of a journaled one (`StepResult.kind`)."""
    return KINDS[name]
