"""The tutorial docs/first-recipe.md, run as written against a REAL vLLM 0.16.0 (cached sandbox).

Its recipe is the page's `yaml` block that starts `# whitelist.yaml`; its commands are the
`patchkit ...` lines of its `sh` blocks, run in order by bash with VLLM_PY set as the page says
(patchkit itself is the test venv's, never one found on PATH). What the page promises is
checked: each command exits 0, the plan shows the one added line, apply verifies and changes
the file the interpreter loads, the second apply writes nothing, rollback restores the bytes.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from fixtures.vllm_envs import make_sandbox
from tests.helpers import PATCHKIT, REPO

pytestmark = [pytest.mark.realenv, pytest.mark.timeout(1800)]

PAGE = REPO / "docs" / "first-recipe.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)


def test_the_first_recipe_tutorial_works_as_written(tmp_path: Path) -> None:
    python = make_sandbox(tmp_path / "venv", version="0.16.0")  # the sandbox's python
    target = Path(subprocess.run([str(python), "-c", "import vllm.config.speculative as m; print(m.__file__)"],
                                 capture_output=True, text=True, check=True).stdout.splitlines()[-1])  # after vLLM's logs
    original = target.read_bytes()

    work = tmp_path / "work"
    work.mkdir()
    recipe = next(b for b in blocks("yaml") if b.startswith("# whitelist.yaml\n"))
    (work / "whitelist.yaml").write_text(recipe)
    commands = [line for block in blocks("sh") for line in block.splitlines() if line.startswith("patchkit ")]
    assert [c.split()[1] for c in commands] == ["validate", "plan", "apply", "status", "apply", "rollback", "history"]

    env = {**os.environ, "VLLM_PY": str(python), "HOME": str(tmp_path / "home")}
    outputs = []
    for command in commands:
        done = subprocess.run(["bash", "-c", str(PATCHKIT) + command.removeprefix("patchkit")], cwd=work, env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr, done.stderr
        outputs.append(done.stdout)
        if command.startswith("patchkit apply") and len(outputs) == 3:
            assert b'"kimi_k2",' in target.read_bytes() and target.read_bytes() != original
    validate, plan, applied, status, again, rollback, history = outputs
    assert "valid recipe kimi-whitelist" in validate
    added = [line for line in plan.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert [line.strip() for line in added] == ['+            "kimi_k2",'.replace(" ", "")] or \
        [line.replace(" ", "") for line in added] == ['+"kimi_k2",'], plan
    assert (work / "review.html").is_file()
    print(applied, status, again, rollback, history, sep="\n=====\n")
    assert "\tchanged\t" in applied and "verified (read-back, syntax, import, python)" in applied, applied
    assert "\tapplied\t" in status, status
    assert "\tok\t" in again and "changed" not in again, again
    assert '-            "kimi_k2",' in rollback, rollback  # the diff the rollback made
    assert target.read_bytes() == original  # rolled back, byte for byte
    assert "kimi-whitelist" in history, history
