"""plan/status on a host whose release already ships a step's change say so in one line.

A real local host whose `vllm` is installed by real pip (`--target`, from a wheel built here:
RECORD with each file's sha256) at two releases of the EAGLE-3 whitelist's history: 0.18.1,
which lists kimi_k2 and deepseek_v3 already, and 0.17.1, which does not. The shipped Kimi
recipe's whitelist step is planned through the real `patchkit` executable. The release
ships the change when the step is in place and its file is byte for byte RECORD's; a file
patchkit wrote (or anyone else) is in place too, but not by the release, and says nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, Sandbox, make_sandbox, sha256, step, write_wheel

pytestmark = pytest.mark.agent

KIMI = str(REPO / "recipes" / "kimi_eagle3.yaml")
LISTED = ["llama", "qwen", "minicpm", "gpt_oss", "hunyuan_vl", "hunyuan_v1_dense", "afmoe", "nemotron_h"]
NOTE = "vllm 0.18.1 already has this change: the step is not needed here"


def speculative(listed: list[str]) -> str:
    """vllm/config/speculative.py of 0.17-0.21, reduced to the method the step edits."""
    items = "".join(f'            "{name}",\n' for name in listed)
    return ("class SpeculativeConfig:\n"
            "    def _verify_args(self):\n"
            f"        aux_hidden_states_supported = [\n{items}        ]\n"
            "        if self.method == \"eagle3\" and not any(\n"
            "                supported_model in self.model_type for supported_model in aux_hidden_states_supported):\n"
            "            raise ValueError(f\"{self.method} is only supported for {aux_hidden_states_supported}\")\n"
            "        return self\n")


def install_vllm(box: Sandbox, version: str, listed: list[str], tmp: Path) -> Path:
    """`pip install --target` of a wheel of `vllm` at `version` into the host's package folder."""
    info = f"vllm-{version}.dist-info"
    wheel = write_wheel(tmp, "vllm", version, {
        "vllm/__init__.py": "from vllm._version import __version__\n",
        "vllm/_version.py": f'__version__ = "{version}"\n',
        "vllm/config/__init__.py": "from vllm.config.speculative import SpeculativeConfig\n",
        "vllm/config/speculative.py": speculative(listed),
    })
    for old in [p for p in (box.pkgs / "vllm", *box.pkgs.glob("vllm-*.dist-info")) if p.exists()]:
        shutil.rmtree(old)  # the uninstall pip does in site-packages (with --target it leaves the old dist-info)
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1"}
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target",
                    str(box.pkgs), str(wheel)], check=True, env=env, capture_output=True)
    installed = box.pkgs / "vllm" / "config" / "speculative.py"
    assert any(line.startswith("vllm/config/speculative.py,sha256=")
               for line in (box.pkgs / info / "RECORD").read_text().splitlines())
    return installed


def host_at(tmp_path: Path, version: str, listed: list[str]) -> tuple[Sandbox, Path]:
    box = make_sandbox(tmp_path / "host", packages=())
    box.pkgs.mkdir(parents=True, exist_ok=True)
    return box, install_vllm(box, version, listed, tmp_path)


def test_plan_and_status_on_a_release_that_ships_the_change_say_the_step_is_not_needed(tmp_path: Path) -> None:
    box, file = host_at(tmp_path, "0.18.1", LISTED[:7] + ["deepseek_v2", "deepseek_v3", "kimi_k2", "kimi_k25",
                                                          "nemotron_h"])
    before = sha256(file)
    plan = box.run("plan", KIMI, "--steps", "eagle3-whitelist", json_out=True)
    assert plan.returncode == 0, plan
    planned = step(plan, "eagle3-whitelist")
    assert (planned["status"], planned["message"]) == ("ok", f"already in place; {NOTE}")
    text = box.run("plan", KIMI, "--steps", "eagle3-whitelist")
    assert text.returncode == 0 and NOTE in text.stdout, text
    assert sum(NOTE in line for line in text.stdout.splitlines()) == 1  # one line says it
    status = box.run("status", KIMI, "--steps", "eagle3-whitelist", json_out=True)
    assert status.returncode == 0, status
    state = step(status, "eagle3-whitelist")
    assert state["status"] == "applied" and state["message"].endswith(f"; {NOTE}"), state
    assert "matches vllm 0.18.1's RECORD" in state["message"]
    assert sha256(file) == before and box.run_records("kimi_eagle3") == []  # nothing written, nothing journaled
    applied = box.run("apply", KIMI, "--steps", "eagle3-whitelist", json_out=True)
    assert applied.returncode == 0, applied
    done = step(applied, "eagle3-whitelist")
    assert (done["status"], done["message"]) == ("ok", f"already in place; {NOTE}"), done
    assert sha256(file) == before


def test_a_change_patchkit_made_is_in_place_but_not_the_release_s_until_the_host_upgrades(tmp_path: Path) -> None:
    """0.17.1 needs the edit: applied, the step is in place, but its file is not RECORD's. Then
    the host upgrades to 0.18.1 (pip over it): the release ships the change."""
    box, file = host_at(tmp_path, "0.17.1", LISTED)
    recipe = tmp_path / "whitelist.yaml"  # the shipped step without its verify program (it imports real vLLM)
    text = Path(KIMI).read_text()
    start = text.index("  - name: eagle3-whitelist")
    recipe.write_text(text[:text.index("steps:\n") + 7] + text[start:text.index("    verify:", start)])
    plan = box.run("plan", str(recipe), "--steps", "eagle3-whitelist", json_out=True)
    assert step(plan, "eagle3-whitelist")["status"] == "changed", plan
    applied = box.run("apply", str(recipe), "--steps", "eagle3-whitelist", json_out=True)
    assert step(applied, "eagle3-whitelist")["status"] == "changed", applied
    assert '"kimi_k2",' in file.read_text()
    again = box.run("plan", str(recipe), "--steps", "eagle3-whitelist", json_out=True)
    planned = step(again, "eagle3-whitelist")
    assert (planned["status"], planned["message"]) == ("ok", "already in place"), planned
    status = box.run("status", str(recipe), "--steps", "eagle3-whitelist", json_out=True)
    state = step(status, "eagle3-whitelist")
    assert state["status"] == "applied" and "already has this change" not in state["message"], state

    install_vllm(box, "0.18.1", LISTED[:7] + ["deepseek_v3", "kimi_k2", "nemotron_h"], tmp_path)
    upgraded = box.run("plan", str(recipe), "--steps", "eagle3-whitelist", json_out=True)
    planned = step(upgraded, "eagle3-whitelist")
    assert (planned["status"], planned["message"]) == ("ok", f"already in place; {NOTE}"), planned
    status = box.run("status", str(recipe), "--steps", "eagle3-whitelist", json_out=True)
    assert step(status, "eagle3-whitelist")["message"].endswith(f"; {NOTE}"), status
