"""The files of a release a patch step can touch: all `patchkit test` keeps of a wheel for it.

Each kind says what it reads (`release_reads`, run/steps/release_reads.py); for a patch step:
the package's version file, every `modules` alternative with the `__init__.py`s on the way
to it, and every file a `diff` edit names.
"""

from __future__ import annotations

from patchkit.recipe.model import Step
from patchkit.run.steps.patch import PatchKind, PatchStep
from patchkit.run.steps.registry import kind_named
from patchkit.run.steps.release_reads import VERSION_FILES, ReleaseReads

__all__ = ["VERSION_FILES", "release_reads", "touchable_paths"]


def touchable_paths(patch: PatchStep) -> list[str]:
    """Paths relative to a site-packages folder (`vllm/config/speculative.py`), sorted."""
    return list(PatchKind().release_reads(patch).paths)


def release_reads(step: Step) -> ReleaseReads | None:
    """What the release test keeps and plans for this step; None: its kind is not planned on releases."""
    kind = kind_named(step.kind)
    return kind.release_reads(kind.spec_of(step))
