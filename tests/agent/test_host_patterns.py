"""`-l` host patterns through the real CLI: three local hosts, each a sandbox
with its own interpreter and state dir, in one inventory; only the hosts the pattern selects
are patched, and a pattern that selects nothing touches nobody."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import TOY_SPECULATIVE, make_sandbox, recipe, run_patchkit, sha256

TOY = recipe("toyllm_eagle3.yaml")


def test_a_pattern_picks_the_hosts_of_an_inventory_and_nothing_else(tmp_path: Path) -> None:
    boxes = {name: make_sandbox(tmp_path / name, ("toyllm",)) for name in ("gpu-1", "gpu-2", "cpu-1")}
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(json.dumps({
        "hosts": {name: {"address": "local", "python": str(box.python), "state_dir": str(box.state)}
                  for name, box in boxes.items()},
        "groups": {"eu": ["gpu-2", "cpu-1"]},
    }))
    original = {name: sha256(box.file(TOY_SPECULATIVE)) for name, box in boxes.items()}

    empty = run_patchkit("apply", TOY, "-i", str(inventory), "-l", "gpu-*:&eu:!gpu-2")
    assert empty.returncode == 2, empty
    assert empty.stderr == "patchkit: -l 'gpu-*:&eu:!gpu-2': the pattern matches no host\n"
    typo = run_patchkit("apply", TOY, "-i", str(inventory), "-l", "gpu-*:!gpu2")
    assert typo.returncode == 2, typo
    assert typo.stderr == ("patchkit: -l: 'gpu2' is neither a host nor a group of the inventory "
                           "(did you mean 'gpu-2'?)\n")
    assert {name: sha256(box.file(TOY_SPECULATIVE)) for name, box in boxes.items()} == original
    assert not any(box.state.exists() for box in boxes.values())

    applied = run_patchkit("apply", TOY, "-i", str(inventory), "-l", "gpu-*:!gpu-2", "--json")
    assert applied.returncode == 0, applied
    assert list(applied.hosts()) == ["gpu-1"]
    both = run_patchkit("apply", TOY, "-i", str(inventory), "-l", "eu:&gpu-*,gpu-1", "--json")
    assert both.returncode == 0, both
    assert {name: h["status"] for name, h in both.hosts().items()} == {"gpu-1": "ok", "gpu-2": "changed"}
    changed = {name for name, box in boxes.items() if sha256(box.file(TOY_SPECULATIVE)) != original[name]}
    assert changed == {"gpu-1", "gpu-2"}
