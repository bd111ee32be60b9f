"""`diff` steps against a REAL, importable vLLM 0.16.0 (the cached environment of test_real_vllm).

The diffs are made here from the sandbox's own files (as `git diff` of a hand fix would be);
patchkit applies them through the real executable, and the import check runs real vLLM:
one file applied, re-applied, status, rollback byte-identical; two files where the second
breaks `import vllm.config.speculative`: both restored.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from fixtures.vllm_envs import make_sandbox
from tests.helpers import PATCHKIT

pytestmark = [pytest.mark.realenv, pytest.mark.timeout(1800)]

KIMI = ('            "afmoe",\n', '            "afmoe",\n            "kimi_k2",\n')


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_sandbox(tmp_path_factory.mktemp("vllm016-diff") / "venv", version="0.16.0")


def site(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    return Path(out)


def run(python: Path, state: Path, *args: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    proc = subprocess.run([PATCHKIT, *args, "--json", "-e", f"python={python}", "--state-dir", str(state)],
                          capture_output=True, text=True, timeout=900)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def only_step(report: dict) -> dict:  # type: ignore[type-arg]
    steps = report["hosts"]["local"]["steps"]
    assert len(steps) == 1
    return steps[0]  # type: ignore[no-any-return]


def recipe_with(folder: Path, root: Path, changes: dict[str, tuple[str, str]]) -> Path:
    diff = ""
    for rel, (old, new) in changes.items():
        text = (root / rel).read_text()
        assert text.count(old) == 1, rel
        diff += "".join(difflib.unified_diff(text.splitlines(True), text.replace(old, new).splitlines(True),
                                             f"a/{rel}", f"b/{rel}"))
    (folder / "fix.patch").write_text(diff)
    recipe = folder / "fix.yaml"
    recipe.write_text("name: realdiff\nsteps:\n  - name: fix\n    why: a hand fix, as a diff\n"
                      "    patch: {package: vllm, versions: '==0.16.0', edit: {diff: {file: fix.patch}}}\n"
                      "    verify: {import: [vllm.config.speculative]}\n")
    return recipe


def test_one_file_diff_on_real_vllm(sandbox: Path, tmp_path: Path) -> None:
    root = site(sandbox)
    spec = root / "vllm" / "config" / "speculative.py"
    original = spec.read_bytes()
    recipe = str(recipe_with(tmp_path, root, {"vllm/config/speculative.py": KIMI}))
    state = tmp_path / "state"

    code, report = run(sandbox, state, "apply", recipe)
    done = only_step(report)
    assert code == 0 and done["status"] == "changed", done
    assert {c["name"]: c["ok"] for c in done["checks"]} == {"read-back": True, "syntax": True, "import": True}
    assert done["file"] == str(spec) and done["sha256_after"] == hashlib.sha256(spec.read_bytes()).hexdigest()
    assert spec.read_bytes() == original.replace(KIMI[0].encode(), KIMI[1].encode())

    code, report = run(sandbox, state, "apply", recipe)
    assert code == 0 and only_step(report)["status"] == "ok", report
    code, report = run(sandbox, state, "status", recipe)
    assert code == 0 and only_step(report)["status"] == "applied", report
    code, report = run(sandbox, state, "rollback", recipe)
    assert code == 0, report
    assert spec.read_bytes() == original


def test_two_file_diff_whose_second_file_breaks_the_real_import(sandbox: Path, tmp_path: Path) -> None:
    root = site(sandbox)
    files = [root / "vllm" / "config" / "speculative.py", root / "vllm" / "config" / "__init__.py"]
    before = [f.read_bytes() for f in files]
    first_line = files[1].read_text().splitlines(True)[0]
    recipe = str(recipe_with(tmp_path, root, {
        "vllm/config/speculative.py": KIMI,
        "vllm/config/__init__.py": (first_line, first_line + "import vllm_no_such_module\n"),
    }))
    code, report = run(sandbox, tmp_path / "state", "apply", recipe)
    done = only_step(report)
    assert code == 1 and done["status"] == "failed", done
    assert "vllm_no_such_module" in done["message"] and "all 2 files restored" in done["message"]
    assert [f["file"] for f in done["files"]] == [str(f) for f in files]
    assert [f.read_bytes() for f in files] == before
