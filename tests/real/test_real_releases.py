"""The shipped kimi_eagle3 recipe against the real vllm/config files of ten releases.

Wheels come from PyPI at test time (cached under PATCHKIT_CACHE_DIR, never committed).
Each release's package shape (version file + config modules) is laid out in a
throw-away venv and planned through the real `patchkit` executable, so the locator,
the version gate, the module fallback and the edit all run as they do for users.
"""

from __future__ import annotations

import ast
import difflib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.vllm_envs import release_file
from patchkit.recipe.model import load_recipe
from tests.helpers import PATCHKIT

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "kimi_eagle3.yaml"
CONFIG_FILES = ["vllm/_version.py", "vllm/config/__init__.py", "vllm/config/speculative.py"]

BASE4 = ["llama", "qwen", "minicpm", "gpt_oss"]
V016 = BASE4 + ["hunyuan_vl", "hunyuan_v1_dense", "afmoe"]

# release -> (file holding the list, list name, exact list after the recipe) | "already" | "skipped"
EXPECTED: dict[str, tuple[str, str, list[str]] | str] = {
    "0.10.2": ("vllm/config/__init__.py", "eagle3_target_supported", ["llama", "qwen", "kimi_k2", "deepseek_v3"]),
    "0.11.0": ("vllm/config/speculative.py", "eagle3_target_supported", BASE4 + ["kimi_k2", "deepseek_v3"]),
    "0.13.0": ("vllm/config/speculative.py", "eagle3_target_supported", BASE4 + ["kimi_k2", "deepseek_v3"]),
    "0.15.1": ("vllm/config/speculative.py", "eagle3_target_supported", BASE4 + ["kimi_k2", "deepseek_v3"]),
    "0.16.0": ("vllm/config/speculative.py", "eagle3_target_supported", V016 + ["kimi_k2", "deepseek_v3"]),
    "0.17.1": ("vllm/config/speculative.py", "aux_hidden_states_supported",
               V016 + ["kimi_k2", "deepseek_v3", "nemotron_h"]),
    "0.18.0": "already",
    "0.21.0": "already",
    "0.22.0": "skipped",
    "0.32.0": "skipped",
}

pytestmark = pytest.mark.wheels


def whitelist_edit():
    step = next(s for s in load_recipe(RECIPE).recipe.steps if s.name == "eagle3-whitelist")
    return step.patch.edit


def list_node(source: str, names: set[str]) -> ast.List:
    """The list assigned inside SpeculativeConfig._verify_args."""
    for cls in ast.walk(ast.parse(source)):
        if isinstance(cls, ast.ClassDef) and cls.name == "SpeculativeConfig":
            for fn in cls.body:
                if isinstance(fn, ast.FunctionDef) and fn.name == "_verify_args":
                    for node in ast.walk(fn):
                        if isinstance(node, ast.Assign) and any(
                            isinstance(t, ast.Name) and t.id in names for t in node.targets
                        ):
                            assert isinstance(node.value, ast.List)
                            return node.value
    raise AssertionError("no whitelist assignment in SpeculativeConfig._verify_args")


def lay_out_release(version: str, root: Path) -> tuple[Path, Path]:
    """A venv whose sys.path sees the release's vllm/_version.py and config modules."""
    site = root / "site"
    for rel in CONFIG_FILES:
        src = release_file(version, rel)
        if src is not None:
            (site / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, site / rel)
    (site / "vllm" / "__init__.py").touch()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    purelib = subprocess.run([str(root / "venv" / "bin" / "python"), "-c",
                              "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    Path(purelib, "release.pth").write_text(str(site) + "\n")
    return root / "venv" / "bin" / "python", site


@pytest.mark.parametrize("version", list(EXPECTED))
def test_recipe_on_real_release(version: str, tmp_path: Path) -> None:
    python, site = lay_out_release(version, tmp_path)
    proc = subprocess.run(
        [PATCHKIT, "plan", str(RECIPE), "--json", "--steps", "eagle3-whitelist",
         "-e", f"python={python}", "--state-dir", str(tmp_path / "state")],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    step = json.loads(proc.stdout)["hosts"]["local"]["steps"][0]
    assert step["package_version"] == version
    expected = EXPECTED[version]

    if expected == "skipped":
        assert step["status"] == "skipped"
        assert f"vllm {version} is outside >=0.10.1,<0.22" in step["message"]
        return
    if expected == "already":
        assert step["status"] == "ok" and step["diff"] is None
        return

    rel, name, wanted = expected
    assert step["status"] == "changed", step["message"]
    assert step["file"] == str(site / rel)
    original = (site / rel).read_text()
    patched = whitelist_edit().apply(original).source
    new_list = list_node(patched, {name})
    assert [ast.literal_eval(e) for e in new_list.elts] == wanted
    compile(patched, rel, "exec")
    # The diff touches nothing but the list's own lines.
    old_list = list_node(original, {name})
    old_lines, new_lines = original.splitlines(), patched.splitlines()
    for tag, i1, i2, _j1, _j2 in difflib.SequenceMatcher(None, old_lines, new_lines).get_opcodes():
        if tag != "equal":
            assert old_list.lineno - 1 <= i1 and i2 <= old_list.end_lineno, (tag, i1, i2)
    # Layout: a one-line list stays one line; a multi-line one grows by exactly two lines.
    if old_list.lineno == old_list.end_lineno:
        assert new_list.lineno == new_list.end_lineno
    else:
        assert len(new_lines) == len(old_lines) + 2
    assert whitelist_edit().apply(patched).verdict == "already"


@pytest.mark.parametrize("version", ["0.22.0", "0.32.0"])
def test_without_the_version_gate_a_removed_list_is_a_loud_miss(version: str) -> None:
    """Upstream removed the whitelist: the edit says so and names what it looked for."""
    source = Path(release_file(version, "vllm/config/speculative.py")).read_text()
    result = whitelist_edit().apply(source)
    assert result.verdict == "not_found"
    assert "eagle3_target_supported or aux_hidden_states_supported within SpeculativeConfig._verify_args" in result.message


def test_a_renamed_list_is_reported_as_a_near_miss() -> None:
    """0.17.1 renamed the list: looking only for the old name points at the new one."""
    from patchkit.edits import Edit

    source = Path(release_file("0.17.1", "vllm/config/speculative.py")).read_text()
    old_name_only = Edit.model_validate({"list_insert": {
        "names": ["eagle3_target_supported"], "within": "SpeculativeConfig._verify_args", "values": ["kimi_k2"]}})
    result = old_name_only.apply(source)
    assert result.verdict == "not_found"
    assert "aux_hidden_states_supported" in result.message
