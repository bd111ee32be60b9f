"""Every step kind, by the recipe key that names it. The runner looks kinds up here only.

Adding a kind: its module (the StepKind subclass with its spec model), one line in KINDS,
the recipe's key for it (a `Step` field typed with the kind's spec model, checked here at
import), and its tests."""

from __future__ import annotations

from typing import Any

from patchkit.run import results
from patchkit.recipe.model import STEP_KINDS, Step
from patchkit.run.results import StepResult
from patchkit.run.steps.check import CheckKind
from patchkit.run.steps.deploy import DeployKind
from patchkit.run.steps.kind import StepKind
from patchkit.run.steps.launch import LaunchKind
from patchkit.run.steps.patch import PatchKind

KINDS: dict[str, StepKind[Any, Any]] = {kind.name: kind for kind in (
    PatchKind(), CheckKind(), DeployKind(), LaunchKind(),
)}


def _recipe_keys_are_the_kinds() -> None:
    """The recipe's step keys are exactly these kinds, each typed with its kind's spec model:
    a kind added to one and not the other fails every run at once, not a user's recipe."""
    if set(STEP_KINDS) != set(KINDS):
        raise RuntimeError(f"recipe step keys {sorted(STEP_KINDS)} are not the registered kinds {sorted(KINDS)}")
    for name, kind in KINDS.items():
        if Step.model_fields[name].annotation != kind.spec_model | None:
            raise RuntimeError(f"recipe key {name!r} is not typed {kind.spec_model.__name__} | None")


_recipe_keys_are_the_kinds()
# Whether a journaled step changed the host is its kind's answer (RunRecord.changed_steps).
results.CHANGES_HOST.update({name: kind.changed for name, kind in KINDS.items()})


def written_files(step: StepResult) -> list[tuple[str, str | None]]:
    """(path, sha256 after) of each file a journaled step wrote, as its kind says (journal.explain)."""
    kind = KINDS.get(step.kind)
    return kind.written(step) if kind is not None else []


def kind_named(name: str) -> StepKind[Any, Any]:
    """The kind of a recipe step (`step.kind`) or of a journaled one (`StepResult.kind`)."""
    return KINDS[name]
