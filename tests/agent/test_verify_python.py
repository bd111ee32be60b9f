"""`verify: python` on patch steps: a program the target interpreter runs after the write.

Against a real local host (the toyllm fixture package, whose SpeculativeConfig refuses a
model type outside its whitelist as vLLM's does) through the real `patchkit` executable:
a right edit passes the program; a wrong edit (the names put into another list) passes
read-back, syntax and import but fails the program and the file is restored byte for byte;
a program that runs too long fails on its timeout; a multi-file diff is restored as one
unit; the program sees the recipe's variables (and `-e` overrides) in PATCHKIT_VARS; a
secret variable's value reaches the program but not the journal or the report; a change
cut off before its checks is settled by the next apply, program included; `plan` says the
program will run.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.agent.test_diff_apply_local import make_diff
from tests.helpers import Sandbox, sandbox_fixture, step  # noqa: F401 - the `sandbox` fixture

SPEC = "toyllm/config/speculative.py"
MODEL = "toyllm/config/model.py"

# vLLM's own validation, toy-sized: the added model types must be accepted now.
ACCEPTS = """\
import json, os, sys
from toyllm.config import ModelConfig, SpeculativeConfig
variables = json.loads(os.environ["PATCHKIT_VARS"])
for model_type in variables["model_types"]:
    try:
        SpeculativeConfig("eagle3", ModelConfig(model_type))._verify_args()
    except ValueError as exc:
        sys.exit(f"EAGLE-3 still refuses {model_type}: {exc}")
print("EAGLE-3 accepts " + ", ".join(variables["model_types"]))
"""


def indented(code: str, spaces: int = 8) -> str:
    return "".join(" " * spaces + line if line.strip() else line for line in code.splitlines(True))


def whitelist_recipe(folder: Path, names: str = "[eagle3_target_supported]", program: str = ACCEPTS,
                     timeout_s: float = 120, head: str = "", within: str = "SpeculativeConfig._verify_args") -> str:
    """The kimi whitelist patch on toyllm, verified by `program`; `names` picks the list it edits."""
    path = folder / "verify.yaml"
    path.write_text(
        "name: toyverify\n"
        f"{head}"
        "vars:\n"
        "  model_types: [kimi_k2, deepseek_v3]\n"
        "steps:\n"
        "  - name: eagle3-whitelist\n"
        "    patch:\n"
        "      package: toyllm\n"
        "      modules: [toyllm.config.speculative, toyllm.config.model]\n"
        "      edit:\n"
        "        list_insert:\n"
        f"          names: {names}\n"
        + (f"          within: {within}\n" if within else "")
        + "          values: [kimi_k2, deepseek_v3]\n"
        "    verify:\n"
        "      import: [toyllm.config]\n"
        f"      timeout_s: {timeout_s}\n"
        "      python: |\n"
        f"{indented(program)}"
    )
    return str(path)


def test_a_right_edit_passes_the_program(sandbox: Sandbox, tmp_path: Path) -> None:
    recipe = whitelist_recipe(tmp_path)
    planned = step(sandbox.run("plan", recipe, json_out=True), "eagle3-whitelist")
    assert planned["status"] == "changed" and "runs the step's verify program" in planned["message"], planned

    applied = sandbox.run("apply", recipe, json_out=True)
    done = step(applied, "eagle3-whitelist")
    assert applied.returncode == 0, applied
    assert done["status"] == "changed" and done["verified"] is True, done
    assert [(c["name"], c["ok"]) for c in done["checks"]] == [
        ("read-back", True), ("syntax", True), ("import", True), ("python", True)]
    assert "EAGLE-3 accepts kimi_k2, deepseek_v3" in done["checks"][-1]["detail"]
    assert "verified (read-back, syntax, import, python)" in done["message"], done

    again = step(sandbox.run("apply", recipe, json_out=True), "eagle3-whitelist")
    assert again["status"] == "ok", again


def test_a_wrong_edit_that_imports_fails_the_program_and_is_restored(sandbox: Sandbox, tmp_path: Path) -> None:
    """The names go into another list (toyllm's dtype list): the file reads back, compiles and
    imports, but EAGLE-3 still refuses kimi_k2, so the original comes back byte for byte."""
    target = sandbox.file(MODEL)
    original = {p: p.read_bytes() for p in (target, sandbox.file(SPEC))}
    recipe = whitelist_recipe(tmp_path, names="[_FLOAT16_DTYPES]", within="")

    failed = sandbox.run("apply", recipe, json_out=True)
    got = step(failed, "eagle3-whitelist")
    assert failed.returncode == 1, failed
    assert got["status"] == "failed" and got["restored"] is True, got
    assert got["file"] == str(target)
    assert [(c["name"], c["ok"]) for c in got["checks"]] == [
        ("read-back", True), ("syntax", True), ("import", True), ("python", False)]
    # the program's last error line, quoted
    assert got["message"].startswith("verify program failed: EAGLE-3 still refuses kimi_k2: Eagle3 is only "
                                     "supported for"), got["message"]
    assert "original restored" in got["message"]
    for path, data in original.items():
        assert path.read_bytes() == data, path
    assert sandbox.run("status", recipe, json_out=True).returncode == 3  # still pending, nothing applied


def test_a_program_past_its_timeout_fails_the_step(sandbox: Sandbox, tmp_path: Path) -> None:
    original = sandbox.file(SPEC).read_bytes()
    recipe = whitelist_recipe(tmp_path, program="import time\ntime.sleep(60)\n", timeout_s=1)
    got = step(sandbox.run("apply", recipe, json_out=True, timeout=50), "eagle3-whitelist")
    assert got["status"] == "failed" and got["restored"] is True, got
    assert got["message"].startswith("verify program timed out after 1.0s"), got["message"]
    assert sandbox.file(SPEC).read_bytes() == original


def test_the_program_sees_the_recipes_variables_and_overrides(sandbox: Sandbox, tmp_path: Path) -> None:
    program = ("import json, os, sys\n"
               "v = json.loads(os.environ['PATCHKIT_VARS'])\n"
               "print('VARS', json.dumps({k: v[k] for k in ('model_types', 'port', 'where')}))\n"
               "assert v['port'] == 8123, v\n")
    recipe = whitelist_recipe(tmp_path, program=program, head="")
    text = Path(recipe).read_text().replace("vars:\n", "vars:\n  port: 8000\n  where: here\n", 1)
    Path(recipe).write_text(text)
    done = step(sandbox.run("apply", recipe, "-e", "port=8123", "-e", "where=there", json_out=True),
                "eagle3-whitelist")
    assert done["status"] == "changed", done
    said = json.loads(done["checks"][-1]["detail"].split("VARS ", 1)[1].rsplit(" (", 1)[0])
    assert said == {"model_types": ["kimi_k2", "deepseek_v3"], "port": 8123, "where": "there"}


def test_a_secret_variable_reaches_the_program_but_not_the_journal(sandbox: Sandbox, tmp_path: Path) -> None:
    secret = "s3cr3t-value-9f2c"
    program = ("import json, os, sys\n"
               "v = json.loads(os.environ['PATCHKIT_VARS'])\n"
               "print('the hub token is', v['hub_token'])\n"
               "if v['hub_token'] != 'right-one':\n"
               "    sys.exit('wrong token ' + v['hub_token'])\n")
    recipe = whitelist_recipe(tmp_path, program=program)
    text = Path(recipe).read_text().replace("vars:\n", "vars:\n  hub_token: nothing\n", 1)
    Path(recipe).write_text(text)

    failed = sandbox.run("apply", recipe, "-e", f"hub_token={secret}", json_out=True)
    got = step(failed, "eagle3-whitelist")
    assert got["status"] == "failed", got
    assert got["message"].startswith("verify program failed: wrong token <secret:hub_token>"), got["message"]
    passed = sandbox.run("apply", recipe, "-e", "hub_token=right-one", json_out=True)
    done = step(passed, "eagle3-whitelist")
    assert done["status"] == "changed" and "the hub token is <secret:hub_token>" in done["checks"][-1]["detail"]

    journal = "".join(p.read_text() for p in sandbox.state.rglob("*.json"))
    assert "<secret:hub_token>" in journal  # the failure was journaled, redacted
    for value in (secret, "right-one"):
        assert value not in journal and value not in failed.stdout + failed.stderr + passed.stdout + passed.stderr


def diff_recipe(folder: Path, diff: str, program: str) -> str:
    (folder / "fix.patch").write_text(diff)
    path = folder / "fix.yaml"
    path.write_text(
        "name: toydiff\n"
        "vars: {model_types: [kimi_k2]}\n"
        "steps:\n"
        "  - name: two-files\n"
        "    patch:\n"
        "      package: toyllm\n"
        "      edit: {diff: {file: fix.patch}}\n"
        "    verify:\n"
        "      import: [toyllm.config]\n"
        "      python: |\n"
        f"{indented(program)}"
    )
    return str(path)


def test_a_multi_file_unit_that_fails_the_program_is_restored_as_a_unit(sandbox: Sandbox, tmp_path: Path) -> None:
    """Both files change, both import; kimi_k2 lands in a comment, so EAGLE-3 still refuses it."""
    files = [sandbox.file(MODEL), sandbox.file(SPEC)]
    before = [p.read_bytes() for p in files]
    diff = make_diff(sandbox, {
        MODEL: ("_FLOAT16_DTYPES = ('float16', 'bfloat16')", "_FLOAT16_DTYPES = ('float16', 'bfloat16', 'fp8')"),
        SPEC: ('                "afmoe",\n', '                "afmoe",  # "kimi_k2",\n'),
    })
    failed = sandbox.run("apply", diff_recipe(tmp_path, diff, ACCEPTS), json_out=True)
    got = step(failed, "two-files")
    assert failed.returncode == 1, failed
    assert [(c["name"], c["ok"]) for c in got["checks"]] == [
        ("read-back", True), ("syntax", True), ("syntax", True), ("import", True), ("python", False)], got
    assert "EAGLE-3 still refuses kimi_k2" in got["message"] and "all 2 files restored" in got["message"], got
    assert [p.read_bytes() for p in files] == before

    right = make_diff(sandbox, {SPEC: ('                "afmoe",\n', '                "afmoe",\n                "kimi_k2",\n'),
                                MODEL: ("'bfloat16')", "'bfloat16', 'fp8')")})
    (tmp_path / "right").mkdir()
    done = step(sandbox.run("apply", diff_recipe(tmp_path / "right", right, ACCEPTS), json_out=True), "two-files")
    assert done["status"] == "changed" and "verified as one unit" in done["message"], done
    assert done["checks"][-1]["name"] == "python" and done["checks"][-1]["ok"] is True


def test_a_change_cut_off_before_its_checks_is_settled_with_the_program(sandbox: Sandbox, tmp_path: Path) -> None:
    """The next apply re-runs the checks of a write whose checks were never recorded: the program
    too (here it fails now, as a gate file is gone), and the original comes back."""
    gate = tmp_path / "gate"
    gate.write_text("open")
    program = ("import json, os\n"
               "v = json.loads(os.environ['PATCHKIT_VARS'])\n"
               "assert os.path.exists(v['gate']), 'the gate is closed'\n")
    recipe = whitelist_recipe(tmp_path, program=program)
    Path(recipe).write_text(Path(recipe).read_text().replace("vars:\n", f"vars:\n  gate: {gate}\n", 1))
    original = sandbox.file(SPEC).read_bytes()
    assert sandbox.run("apply", recipe).returncode == 0
    assert sandbox.file(SPEC).read_bytes() != original
    record_path = max((sandbox.state / "runs" / "toyverify").glob("*.json"))
    record = json.loads(record_path.read_text())
    record["steps"][0]["verified"] = False  # what a run killed between its write and its checks leaves
    record_path.write_text(json.dumps(record))

    gate.unlink()
    settled = sandbox.run("apply", recipe, json_out=True)
    got = step(settled, "eagle3-whitelist")
    assert settled.returncode == 1, settled
    assert "cut off before its checks" in got["message"] and "the gate is closed" in got["message"], got
    assert "original restored" in got["message"]
    assert sandbox.file(SPEC).read_bytes() == original
