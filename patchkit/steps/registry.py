"""Every step kind, by the recipe key that names it. The runner looks kinds up here only."""

from __future__ import annotations

from typing import Any

from patchkit.results import StepResult
from patchkit.steps.check import CheckKind
from patchkit.steps.deploy import DeployKind
from patchkit.steps.kind import StepKind
from patchkit.steps.launch import LaunchKind
from patchkit.steps.patch import PatchKind

KINDS: dict[str, StepKind[Any]] = {kind.name: kind for kind in (PatchKind(), CheckKind(), DeployKind(), LaunchKind())}


def written_files(step: StepResult) -> list[tuple[str, str | None]]:
    """(path, sha256 after) of each file a journaled step wrote, as its kind says (journal.explain)."""
    kind = KINDS.get(step.kind)
    return kind.written(step) if kind is not None else []


def kind_named(name: str) -> StepKind[Any]:
    """The kind of a recipe step (`step.kind`) or of a journaled one (`StepResult.kind`)."""
    return KINDS[name]
