"""Edit results kept on the control machine (run/steps/edit_cache.py): bound to what produced them,
sealed with this user's key, checked again on use, never holding a secret value."""

from __future__ import annotations

import hashlib
import json
import stat
from pathlib import Path

import pytest

from patchkit.base import cache
from patchkit.recipe.model import load_recipe
from patchkit.run.steps import edit_cache

REPO = Path(__file__).resolve().parents[2]
SOURCE = 'class SpeculativeConfig:\n    def _verify_args(self):\n        eagle3_target_supported = ["llama", "afmoe"]\n'


@pytest.fixture(name="root")
def root_fixture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def step(root: Path):
    recipe = load_recipe(REPO / "recipes" / "kimi_eagle3.yaml").recipe
    return next(s for s in recipe.steps if s.name == "eagle3-whitelist").patch  # the step's spec: what an edit reads


def entry_of(root: Path) -> Path:
    [path] = (root / "edits").glob("*.json")
    return path


def test_a_computed_edit_is_stored_0600_in_a_0700_folder_and_reused(step, root: Path) -> None:
    assert edit_cache.load(step, SOURCE) is None
    first = edit_cache.compute(step, SOURCE)
    assert first.verdict == "changed" and '"kimi_k2"' in first.source
    assert edit_cache.load(step, SOURCE) == first
    path = entry_of(root)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((root / "edits").stat().st_mode) == 0o700 and stat.S_IMODE(root.stat().st_mode) == 0o700
    assert stat.S_IMODE((root / cache.KEY_FILE).stat().st_mode) == 0o600
    assert not [p for p in (root / "edits").iterdir() if p.name.endswith(".tmp")]


def test_an_entry_whose_own_hash_matches_its_poisoned_source_is_not_used(step, root: Path) -> None:
    """What a poisoner writes: the source changed, and every hash it carries recomputed."""
    edit_cache.compute(step, SOURCE)
    path = entry_of(root)
    entry = json.loads(path.read_text())
    poisoned = entry["source"].replace('"deepseek_v3"', '"deepseek_v3"; import os; os.system("id")')
    entry.update(source=poisoned, sha256_after=hashlib.sha256(poisoned.encode()).hexdigest(),
                 sha256=hashlib.sha256(poisoned.encode()).hexdigest())
    path.write_text(json.dumps(entry))
    assert edit_cache.load(step, SOURCE) is None
    again = edit_cache.compute(step, SOURCE)
    assert "os.system" not in again.source and '"kimi_k2"' in again.source


def test_a_sealed_entry_of_another_input_is_not_the_edit_of_this_one(step, root: Path) -> None:
    other = SOURCE.replace('"llama"', '"llama", "qwen"')
    edit_cache.compute(step, other)
    [other_entry] = (root / "edits").glob("*.json")
    # Renamed to the key of SOURCE: the seal covers the input's hash, not only the file name.
    target = other_entry.with_name(other_entry.name.split("-")[0] + "-" + hashlib.sha256(SOURCE.encode()).hexdigest() + ".json")
    other_entry.rename(target)
    assert edit_cache.load(step, SOURCE) is None


def test_a_sealed_changed_entry_that_no_longer_compiles_is_recomputed(step, root: Path) -> None:
    edit_cache.compute(step, SOURCE)
    path = entry_of(root)
    entry = json.loads(path.read_text())
    broken = entry["source"] + "def (:\n"
    params = edit_cache._params(step)
    assert params is not None
    text_sha = hashlib.sha256(SOURCE.encode()).hexdigest()
    entry.update(source=broken, seal=cache.seal(*edit_cache._seal_parts(params, text_sha, "changed",
                                                                        entry["message"], broken)))
    path.write_text(json.dumps(entry))
    assert edit_cache.load(step, SOURCE) is None


@pytest.mark.parametrize("content", ["{not json", "[]", "null", '"text"', "{}", '{"verdict": 1, "message": []}',
                                     '{"verdict": "changed", "message": "m", "source": 5, "seal": "x"}',
                                     '{"verdict": "already", "message": "m", "seal": 7}', "[" * 100000])
def test_a_corrupt_entry_is_recomputed_never_a_traceback(step, root: Path, content: str) -> None:
    edit_cache.compute(step, SOURCE)
    entry_of(root).write_text(content)
    assert edit_cache.load(step, SOURCE) is None
    assert '"kimi_k2"' in edit_cache.compute(step, SOURCE).source
    assert edit_cache.load(step, SOURCE) is not None  # written again, whole


def test_an_entry_another_user_could_write_is_not_read(step, root: Path) -> None:
    edit_cache.compute(step, SOURCE)
    path = entry_of(root)
    path.chmod(0o666)
    assert edit_cache.load(step, SOURCE) is None


def test_an_edit_holding_a_secret_value_is_never_written_to_the_cache(tmp_path: Path, root: Path) -> None:
    recipe = tmp_path / "secret.yaml"
    recipe.write_text("""name: secret
vars: {api_key: "sk-live-0123456789abcdef"}
steps:
  - name: key
    patch:
      package: toyllm
      modules: [toyllm.config.speculative]
      edit: {set_value: {names: [API_KEY], value: "{{ api_key }}"}}
""")
    loaded = load_recipe(recipe)
    spec = loaded.recipe.steps[0].patch
    assert spec is not None and loaded.redactor
    result = edit_cache.compute(spec, 'API_KEY = "none"\n', loaded.redactor)
    assert result.verdict == "changed" and "sk-live-0123456789abcdef" in result.source  # the host still gets it
    written = [p for p in root.rglob("*") if p.is_file()]
    assert not any(b"sk-live-0123456789abcdef" in p.read_bytes() for p in written)
    assert not list(root.rglob("edits/*.json"))
    # The same edit of a file holding the secret already (a second run): not kept either.
    again = edit_cache.compute(spec, 'API_KEY = "sk-live-0123456789abcdef"\nOTHER = 1\n', loaded.redactor)
    assert again.verdict == "already"
    assert not any(b"sk-live-0123456789abcdef" in p.read_bytes() for p in root.rglob("*") if p.is_file())


def test_a_key_others_can_read_seals_nothing(step, root: Path) -> None:
    edit_cache.compute(step, SOURCE)
    cache._keys.clear()
    (root / cache.KEY_FILE).chmod(0o644)
    assert edit_cache.load(step, SOURCE) is None
    cache._keys.clear()


def test_edits_and_entry_checks_never_run_in_two_threads_at_once(step, root: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """CPython 3.11's ast/compile state is shared by threads (`patchkit test` plans releases in
    threads): an edit, and the compile check of a kept entry, run one at a time."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    import patchkit.edits.ops.list_insert.engine as engine
    import patchkit.run.steps.edit_cache as module

    inside, most, guard = 0, 0, threading.Lock()

    def counted(work):
        def run(*args):
            nonlocal inside, most
            with guard:
                inside += 1
                most = max(most, inside)
            time.sleep(0.02)
            try:
                return work(*args)
            finally:
                with guard:
                    inside -= 1
        return run

    monkeypatch.setattr(engine, "run", counted(engine.run))
    monkeypatch.setattr(module, "compile_error", counted(module.compile_error))
    sources = [SOURCE.replace('"llama"', f'"llama{i}"') for i in range(6)]
    with ThreadPoolExecutor(6) as pool:
        computed = list(pool.map(lambda s: edit_cache.compute(step, s), sources))
        loaded = list(pool.map(lambda s: edit_cache.load(step, s), sources))
    assert [r.verdict for r in computed] == ["changed"] * 6 and loaded == computed
    assert most == 1
