"""`diff` edit steps through the real `patchkit` executable on a local sandbox host.

One file: apply, re-apply ok, status applied, rollback byte-identical, JSON as the contract
says (file, diff, sha256_before/after). Several files: one unit — the second file's change
breaks the import check and both files are restored; a good multi-file diff applies,
shows in status, and rolls back as a unit (refused as a unit when one file drifted).
`upstream:`/`why:` are shown by plan, journaled, and status says when the fix is upstream.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path

from tests.helpers import Sandbox, run_patchkit, sandbox_fixture, sha256, step  # noqa: F401 - the `sandbox` fixture

SPEC = "toyllm/config/speculative.py"
MODEL = "toyllm/config/model.py"


def make_diff(sb: Sandbox, changes: dict[str, tuple[str, str]]) -> str:
    """A unified diff (a/ b/ paths under the package folder) replacing old by new in each file."""
    out = []
    for rel, (old, new) in changes.items():
        text = sb.file(rel).read_text()
        assert old in text, (rel, old)
        out.append("".join(difflib.unified_diff(text.splitlines(True), text.replace(old, new, 1).splitlines(True),
                                                f"a/{rel}", f"b/{rel}")))
    return "".join(out)


def write_recipe(folder: Path, diff: str, extra: str = "", verify: str = "[toyllm.config]") -> Path:
    (folder / "fix.patch").write_text(diff)
    recipe = folder / "fix.yaml"
    recipe.write_text(
        "name: toyfix\n"
        "steps:\n"
        "  - name: upstream-fix\n"
        f"{extra}"
        "    patch:\n"
        "      package: toyllm\n"
        "      versions: \">=0.15\"\n"
        "      edit: {diff: {file: fix.patch}}\n"
        f"    verify: {{import: {verify}}}\n"
    )
    return recipe


KIMI = ('                "afmoe",\n', '                "afmoe",\n                "kimi_k2",\n')
META = ("    upstream: https://github.com/vllm-project/vllm/pull/12345\n"
        "    why: Kimi-K2 drafts with EAGLE-3\n")


def test_one_file_diff_apply_reapply_status_rollback(sandbox: Sandbox, tmp_path: Path) -> None:
    spec = sandbox.file(SPEC)
    original = spec.read_bytes()
    recipe = str(write_recipe(tmp_path, make_diff(sandbox, {SPEC: KIMI}), extra=META))

    plan = sandbox.run("plan", recipe)
    assert plan.returncode == 0, plan
    assert '+                "kimi_k2",' in plan.stdout
    assert "why: Kimi-K2 drafts with EAGLE-3" in plan.stdout
    assert "upstream: https://github.com/vllm-project/vllm/pull/12345" in plan.stdout

    applied = sandbox.run("apply", recipe, json_out=True)
    assert applied.returncode == 0, applied
    done = step(applied, "upstream-fix")
    assert done["status"] == "changed", done
    assert done["file"] == str(spec) and done["files"] is None
    assert done["sha256_before"] == __import__("hashlib").sha256(original).hexdigest()
    assert done["sha256_after"] == sha256(spec)
    assert done["diff"].startswith(f"--- a{spec}\n+++ b{spec}\n")
    assert "applied hunk 1 at line" in done["message"] and "verified" in done["message"]
    assert spec.read_bytes() == original.replace(b'"afmoe",\n', b'"afmoe",\n                "kimi_k2",\n')
    record = sandbox.run_records("toyfix")[-1]
    assert record["steps"][0]["upstream"] == "https://github.com/vllm-project/vllm/pull/12345"
    assert record["steps"][0]["why"] == "Kimi-K2 drafts with EAGLE-3"

    again = sandbox.run("apply", recipe, json_out=True)
    assert again.returncode == 0 and step(again, "upstream-fix")["status"] == "ok", again

    status = sandbox.run("status", recipe, json_out=True)
    assert status.returncode == 0, status
    assert step(status, "upstream-fix")["status"] == "applied"

    back = sandbox.run("rollback", recipe)
    assert back.returncode == 0, back
    assert spec.read_bytes() == original
    assert step(sandbox.run("status", recipe, json_out=True), "upstream-fix")["status"] == "pending"


def test_multi_file_diff_whose_second_file_breaks_the_import_restores_both(sandbox: Sandbox, tmp_path: Path) -> None:
    files = {MODEL: sandbox.file(MODEL), SPEC: sandbox.file(SPEC)}
    before = {rel: path.read_bytes() for rel, path in files.items()}
    diff = make_diff(sandbox, {
        MODEL: ("_FLOAT16_DTYPES = ('float16', 'bfloat16')", "_FLOAT16_DTYPES = ('float16', 'bfloat16', 'fp8')"),
        SPEC: ("from typing import Optional\n", "from typing import Optional\n\nimport toyllm_no_such_module\n"),
    })
    recipe = str(write_recipe(tmp_path, diff))

    planned = sandbox.run("plan", recipe, json_out=True)
    assert planned.returncode == 0, planned
    plan_step = step(planned, "upstream-fix")
    assert plan_step["status"] == "changed" and plan_step["file"] is None
    assert [f["file"] for f in plan_step["files"]] == [str(files[MODEL]), str(files[SPEC])]

    applied = sandbox.run("apply", recipe, json_out=True)
    assert applied.returncode == 1, applied
    failed = step(applied, "upstream-fix")
    assert failed["status"] == "failed"
    assert "import check failed" in failed["message"] and "toyllm_no_such_module" in failed["message"]
    assert "all 2 files restored" in failed["message"]
    assert failed["restored"] is True
    assert {c["name"]: c["ok"] for c in failed["checks"]} == {"read-back": True, "syntax": True, "import": False}
    for rel, path in files.items():
        assert path.read_bytes() == before[rel], rel  # both back, byte for byte
    assert step(sandbox.run("status", recipe, json_out=True), "upstream-fix")["status"] == "pending"


def test_multi_file_diff_applies_and_rolls_back_as_a_unit(sandbox: Sandbox, tmp_path: Path) -> None:
    files = {MODEL: sandbox.file(MODEL), SPEC: sandbox.file(SPEC)}
    before = {rel: path.read_bytes() for rel, path in files.items()}
    diff = make_diff(sandbox, {
        MODEL: ("_FLOAT16_DTYPES = ('float16', 'bfloat16')", "_FLOAT16_DTYPES = ('float16', 'bfloat16', 'fp8')"),
        SPEC: KIMI,
    })
    recipe = str(write_recipe(tmp_path, diff, extra=META))

    applied = sandbox.run("apply", recipe, json_out=True)
    assert applied.returncode == 0, applied
    done = step(applied, "upstream-fix")
    assert done["status"] == "changed" and "verified as one unit" in done["message"], done
    assert len(done["files"]) == 2 and all(f["backup"] and f["diff"] for f in done["files"])
    assert {f["file"]: f["sha256_after"] for f in done["files"]} == {str(p): sha256(p) for p in files.values()}
    assert b"'fp8'" in files[MODEL].read_bytes() and b'"kimi_k2"' in files[SPEC].read_bytes()
    record = sandbox.run_records("toyfix")[-1]
    assert [f["file"] for f in record["steps"][0]["files"]] == [str(p) for p in files.values()]

    again = sandbox.run("apply", recipe, json_out=True)
    assert step(again, "upstream-fix")["status"] == "ok", again
    assert step(sandbox.run("status", recipe, json_out=True), "upstream-fix")["status"] == "applied"

    # one file drifts: status says so, rollback refuses the whole unit, --force restores both
    drifted = files[MODEL].read_bytes() + b"# edited by hand\n"
    files[MODEL].write_bytes(drifted)
    status = sandbox.run("status", recipe, json_out=True)
    assert status.returncode == 3 and step(status, "upstream-fix")["status"] == "drifted", status
    refused = sandbox.run("rollback", recipe, json_out=True)
    assert refused.returncode == 1, refused
    assert "drifted" in step(refused, "upstream-fix")["message"]
    assert files[MODEL].read_bytes() == drifted and b'"kimi_k2"' in files[SPEC].read_bytes()  # none touched
    forced = sandbox.run("rollback", recipe, "--force", json_out=True)
    assert forced.returncode == 0, forced
    for rel, path in files.items():
        assert path.read_bytes() == before[rel], rel


def test_status_says_the_fix_is_upstream_past_the_range(sandbox: Sandbox, tmp_path: Path) -> None:
    recipe = tmp_path / "old.yaml"
    (tmp_path / "fix.patch").write_text(make_diff(sandbox, {SPEC: KIMI}))
    recipe.write_text(
        "name: toyold\nsteps:\n  - name: upstream-fix\n" + META +
        "    patch: {package: toyllm, versions: '>=0.10,<0.16', edit: {diff: {file: fix.patch}}}\n")
    status = sandbox.run("status", str(recipe), json_out=True)
    assert status.returncode == 0, status
    got = step(status, "upstream-fix")
    assert got["status"] == "not-applicable"
    assert ("the fix is upstream (https://github.com/vllm-project/vllm/pull/12345): toyllm 0.16.0 is past "
            ">=0.10,<0.16, this step can go") in got["message"]
    below = recipe.read_text().replace("'>=0.10,<0.16'", "'>=0.17'")
    recipe.write_text(below)
    got = step(sandbox.run("status", str(recipe), json_out=True), "upstream-fix")
    assert got["status"] == "not-applicable" and "upstream" not in got["message"]


def test_upstream_must_be_a_url(sandbox: Sandbox, tmp_path: Path) -> None:
    recipe = write_recipe(tmp_path, make_diff(sandbox, {SPEC: KIMI}), extra="    upstream: see the PR\n")
    out = run_patchkit("validate", str(recipe))
    assert out.returncode == 2
    assert out.stderr.strip().startswith(f"patchkit: {recipe}:4:5: steps[0].upstream: ")
    assert "not an http(s) URL" in out.stderr
    schema = json.loads(run_patchkit("schema").stdout)
    text = json.dumps(schema)
    assert '"upstream"' in text and '"why"' in text and "DiffEdit" in text and '"strip"' in text


def cut_off_before_checks(sb: Sandbox, recipe_name: str) -> None:
    """Make the last run look cut off between its writes and its checks (what a killed agent leaves)."""
    path = [p for p in sorted((sb.state / "runs" / recipe_name).glob("*.json"))
            if json.loads(p.read_text())["steps"][0]["status"] == "changed"][-1]
    record = json.loads(path.read_text())
    record["steps"][0]["verified"] = False
    path.write_text(json.dumps(record))


def test_multi_file_change_cut_off_before_its_checks_is_settled_by_the_next_apply(sandbox: Sandbox,
                                                                                  tmp_path: Path) -> None:
    files = {MODEL: sandbox.file(MODEL), SPEC: sandbox.file(SPEC)}
    before = {rel: path.read_bytes() for rel, path in files.items()}
    diff = make_diff(sandbox, {
        MODEL: ("_FLOAT16_DTYPES = ('float16', 'bfloat16')", "_FLOAT16_DTYPES = ('float16', 'bfloat16', 'fp8')"),
        SPEC: KIMI,
    })
    recipe = str(write_recipe(tmp_path, diff))
    assert sandbox.run("apply", recipe).returncode == 0
    cut_off_before_checks(sandbox, "toyfix")
    status = step(sandbox.run("status", recipe, json_out=True), "upstream-fix")
    assert status["status"] == "pending" and "pending verification" in status["message"], status

    settled = step(sandbox.run("apply", recipe, json_out=True), "upstream-fix")
    assert settled["status"] == "ok" and "verified now" in settled["message"], settled
    assert step(sandbox.run("status", recipe, json_out=True), "upstream-fix")["status"] == "applied"

    # cut off again, and this time the imports fail (another module broke meanwhile): both go back
    cut_off_before_checks(sandbox, "toyfix")
    init = sandbox.file("toyllm/config/__init__.py")
    init.write_text(init.read_text() + "import toyllm_no_such_module\n")
    failed = sandbox.run("apply", recipe, json_out=True)
    got = step(failed, "upstream-fix")
    assert failed.returncode == 1, got
    assert "all 2 files restored" in got["message"] and "toyllm_no_such_module" in got["message"], got
    for rel, path in files.items():
        assert path.read_bytes() == before[rel], rel


def add_modify_delete(sb: Sandbox, extra_body: str) -> tuple[str, dict[str, bytes | None]]:
    """A diff that adds toyllm/config/extra.py, imports it from toyllm/config/__init__.py and
    deletes toyllm/config/legacy.py (made here first); with the files' bytes before it."""
    legacy = sb.file("toyllm/config/legacy.py")
    legacy.write_text("OLD = 1\n")
    init = sb.file("toyllm/config/__init__.py")
    text = init.read_text()
    new_init = text + "from toyllm.config.extra import EXTRA\n"
    diff = "".join(difflib.unified_diff([], extra_body.splitlines(True), "/dev/null", "b/toyllm/config/extra.py"))
    diff += "".join(difflib.unified_diff(text.splitlines(True), new_init.splitlines(True),
                                         "a/toyllm/config/__init__.py", "b/toyllm/config/__init__.py"))
    diff += "".join(difflib.unified_diff(["OLD = 1\n"], [], "a/toyllm/config/legacy.py", "/dev/null"))
    before = {"toyllm/config/extra.py": None, "toyllm/config/__init__.py": init.read_bytes(),
              "toyllm/config/legacy.py": legacy.read_bytes()}
    return diff, before


def on_disk(sb: Sandbox, rels: dict[str, bytes | None]) -> dict[str, bytes | None]:
    return {rel: sb.file(rel).read_bytes() if sb.file(rel).exists() else None for rel in rels}


def test_a_diff_that_adds_and_deletes_files_applies_and_rolls_back(sandbox: Sandbox, tmp_path: Path) -> None:
    diff, before = add_modify_delete(sandbox, "EXTRA = 2\n")
    recipe = str(write_recipe(tmp_path, diff))

    applied = sandbox.run("apply", recipe, json_out=True)
    assert applied.returncode == 0, applied
    done = step(applied, "upstream-fix")
    assert done["status"] == "changed", done
    assert [(f["sha256_before"] is None, f["sha256_after"] is None) for f in done["files"]] == [
        (True, False), (False, False), (False, True)]
    now = on_disk(sandbox, before)
    assert now["toyllm/config/extra.py"] == b"EXTRA = 2\n" and now["toyllm/config/legacy.py"] is None
    assert step(sandbox.run("apply", recipe, json_out=True), "upstream-fix")["status"] == "ok"
    assert step(sandbox.run("status", recipe, json_out=True), "upstream-fix")["status"] == "applied"

    back = sandbox.run("rollback", recipe, json_out=True)
    assert back.returncode == 0, back
    assert on_disk(sandbox, before) == before  # extra.py gone, legacy.py back, __init__ as it was


def test_an_added_file_that_breaks_the_import_is_removed_and_the_rest_restored(sandbox: Sandbox,
                                                                             tmp_path: Path) -> None:
    diff, before = add_modify_delete(sandbox, "import toyllm_no_such_module\nEXTRA = 2\n")
    recipe = str(write_recipe(tmp_path, diff))
    failed = sandbox.run("apply", recipe, json_out=True)
    got = step(failed, "upstream-fix")
    assert failed.returncode == 1, got
    assert "toyllm_no_such_module" in got["message"] and "all 3 files restored" in got["message"], got
    assert on_disk(sandbox, before) == before
