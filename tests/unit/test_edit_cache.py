"""Edit results are cached on the control machine by (edit parameters, file content)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from patchkit.recipe import load_recipe
from patchkit.steps import patch

REPO = Path(__file__).resolve().parents[2]
SOURCE = 'class SpeculativeConfig:\n    def _verify_args(self):\n        eagle3_target_supported = ["llama", "afmoe"]\n'


@pytest.fixture
def step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(tmp_path / "cache"))
    recipe = load_recipe(REPO / "recipes" / "kimi_eagle3.yaml").recipe
    return next(s for s in recipe.steps if s.name == "eagle3-whitelist").patch  # the step's spec: what an edit reads


def test_a_computed_edit_is_stored_and_reused(step) -> None:
    sha = hashlib.sha256(SOURCE.encode()).hexdigest()
    assert patch._stored_edit(step, sha, SOURCE) is None
    first = patch._compute_edit(step, sha, SOURCE)
    assert first.verdict == "changed" and '"kimi_k2"' in first.source
    again = patch._stored_edit(step, sha, SOURCE)
    assert again == first


def test_a_damaged_entry_is_recomputed_not_trusted(step) -> None:
    sha = hashlib.sha256(SOURCE.encode()).hexdigest()
    patch._compute_edit(step, sha, SOURCE)
    path = patch._edit_cache_path(step, sha)
    entry = json.loads(path.read_text())
    entry["source"] = entry["source"].replace("kimi_k2", "evil")
    path.write_text(json.dumps(entry))
    assert patch._stored_edit(step, sha, SOURCE) is None
