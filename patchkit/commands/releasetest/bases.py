"""The base releases of based `diff` edits: their files fetched and kept like the release
test's (index.py: one cache, one download per release), then checked against the diff and
handed to it (`DiffEdit.set_base`). A recipe is complete for a run only with them: the CLI
calls `attach` on every rendering of a recipe before any host is contacted."""

from __future__ import annotations

import asyncio
import sys

from patchkit.base import cache
from patchkit.base.errors import UsageError
from patchkit.commands.releasetest import index
from patchkit.edits.model import EditError
from patchkit.edits.ops.diff.spec import DiffEdit
from patchkit.recipe.model import LoadedRecipe
from patchkit.run.steps.patch import PatchStep

# (base, wanted files) -> the files' bytes: a recipe rendered per host fetches and reads each once
_FETCHED: dict[tuple[str, tuple[str, ...]], dict[str, bytes | None]] = {}


def based_diffs(loaded: LoadedRecipe) -> list[tuple[str, DiffEdit]]:
    """(step name, diff) of each patch step whose diff names a base and has not its files yet."""
    out = []
    for step in loaded.recipe.steps:
        patch = PatchStep.of(step)
        diff = patch.edit.diff if patch is not None else None
        if diff is not None and diff.base is not None and not diff.based:
            out.append((step.name, diff))
    return out


def _say(text: str) -> None:
    print(f"patchkit: {text}", file=sys.stderr, flush=True)


async def _files(diff: DiffEdit) -> dict[str, bytes | None]:
    release = diff.base_release()
    assert release is not None and diff.base is not None
    wanted = diff.base_paths()
    key = (diff.base, tuple(wanted))
    if key not in _FETCHED:
        kept = await index.fetch(*release, wanted, _say)
        if kept.root is None:
            raise UsageError(f"base {diff.base}: {kept.error}")
        read = {rel: cache.read_bytes(kept.root / rel) for rel in wanted}
        _FETCHED[key] = read
    return _FETCHED[key]


def attach(*rendered: LoadedRecipe) -> None:
    """Every based diff of these renderings gets its base release's files; UsageError naming
    the step when the release cannot be fetched or the diff was not made from it."""
    pending = [(name, diff) for loaded in rendered for name, diff in based_diffs(loaded)]
    if not pending:
        return
    cache.check()  # another user's cache folder: refused before anything is fetched

    async def all_files() -> list[dict[str, bytes | None]]:
        return [await _files(diff) for _, diff in pending]

    for (name, diff), files in zip(pending, asyncio.run(all_files())):
        try:
            diff.set_base(files)
        except EditError as exc:
            raise UsageError(f"step {name}: {exc}") from None
