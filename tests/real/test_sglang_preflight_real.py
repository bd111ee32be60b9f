"""The SGLang recipe's EAGLE-3 preflight on REAL SGLang release files (their wheels, pure Python
up to 0.5.10, downloaded once into the fixtures' cache): it reads the installed source, imports
none of it. Kimi-K2.5 gained EAGLE-3 layer capture in sglang#19689, first released in 0.5.10;
MLA EAGLE-3 drafters (Eagle3DeepseekV2ForCausalLM) are no draft model SGLang 0.5.10 registers.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import PATCHKIT, REPO

pytestmark = pytest.mark.wheels

RECIPE = REPO / "recipes" / "kimi_eagle3_sglang.yaml"


def preflight(tmp_path: Path, version: str, drafter_arch: str = "LlamaForCausalLMEagle3") -> dict:
    from fixtures.fake_sglang import fake_sglang_env
    from fixtures.make_drafter import drafter_config, kimi_k25_config, write_config
    from fixtures.vllm_envs import release_sources

    real = release_sources(version, "sglang/", dist="sglang") / "sglang"
    python = fake_sglang_env(tmp_path / f"env-{version}", package=real)  # the REAL release's files, not the fake
    target = write_config(tmp_path / "kimi-k2.5", kimi_k25_config())
    drafter = write_config(tmp_path / f"drafter-{drafter_arch}", {**drafter_config(), "architectures": [drafter_arch]})
    proc = subprocess.run([PATCHKIT, "apply", str(RECIPE), "--steps", "sglang-preflight", "-e", f"python={python}",
                           "-e", f"target_model={target}", "-e", f"drafter_dest={drafter}", "--json",
                           "--state-dir", str(tmp_path / "state")],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert "Traceback" not in proc.stderr, proc.stderr
    [step] = json.loads(proc.stdout)["hosts"]["local"]["steps"]
    return {"code": proc.returncode, **step}


def test_before_sglang_19689_kimi_k25_has_no_eagle3_layer_capture(tmp_path: Path) -> None:
    step = preflight(tmp_path, "0.5.9")
    assert step["code"] == 1 and step["status"] == "failed", step
    assert step["package_version"] == "0.5.9"
    assert ("KimiK25ForConditionalGeneration (sglang/srt/models/kimi_k25.py), the class SGLang loads for the "
            "target, has no set_eagle3_layers_to_capture; EAGLE-3 support for it came with sglang#19689 "
            "(2026-03-02, first released in SGLang 0.5.10)") in step["message"], step["message"]
    assert "drafter" not in step["message"].split("sglang#19689")[1], step["message"]  # the drafter is fine


def test_from_sglang_0_5_10_kimi_k25_and_a_llama_drafter_pass(tmp_path: Path) -> None:
    step = preflight(tmp_path, "0.5.10")
    assert step["code"] == 0 and step["status"] == "ok", step
    assert step["message"] == ("passed: KimiK25ForConditionalGeneration (sglang/srt/models/kimi_k25.py) captures "
                               "EAGLE-3 layers; drafter LlamaForCausalLMEagle3 (sglang/srt/models/llama_eagle3.py)")


def test_an_mla_eagle3_drafter_is_refused_by_sglang_0_5_10(tmp_path: Path) -> None:
    step = preflight(tmp_path, "0.5.10", "Eagle3DeepseekV2ForCausalLM")
    assert step["code"] == 1, step
    assert ("the drafter's architectures ['Eagle3DeepseekV2ForCausalLM'] are no EAGLE-3 draft model this SGLang "
            "registers (it has LlamaForCausalLMEagle3)") in step["message"], step["message"]


def test_patchkit_test_runs_the_preflight_on_each_sglang_release(tmp_path: Path) -> None:
    """`patchkit test --dist sglang`: the check reads only `sglang/srt/models/*.py`, so it runs on
    each release's files (no host, nothing imported); the matrix and its verdict name 0.5.9."""
    from tests.helpers import run_patchkit

    page = tmp_path / "matrix.html"
    result = run_patchkit("test", str(RECIPE), "--dist", "sglang", "--versions", "0.5.9,0.5.10", "--json",
                          "--html", str(page), "-e", f"target_model={tmp_path / 'none'}",
                          "-e", f"drafter_dest={tmp_path / 'none'}", timeout=600)
    assert result.returncode == 1, result  # a release inside the step's (absent) range fails it
    doc = result.json()
    step = doc["steps"]["sglang-preflight"]
    assert step["kind"] == "check" and step["tested"] is True and step["dist"] == "sglang", step
    old, new = step["releases"]["0.5.9"], step["releases"]["0.5.10"]
    assert old["status"] == "failed" and "came with sglang#19689" in old["message"], old
    assert new["status"] == "ok", new
    assert "checked KimiK25ForConditionalGeneration; KimiK25ForConditionalGeneration (sglang/srt/models/" \
           "kimi_k25.py) captures EAGLE-3 layers" in new["message"], new
    [failure] = doc["failures"]
    assert failure.startswith("sglang-preflight: 0.5.9 cannot pass the check"), failure
    assert doc["steps"]["serve"]["tested"] is False and doc["steps"]["deploy-drafter"]["tested"] is False
    html = page.read_text()
    assert "passes" in html and "sglang#19689" in html
