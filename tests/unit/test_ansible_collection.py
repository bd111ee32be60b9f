"""The patchkit.fleet collection's pure parts (ansible_collections/patchkit/fleet): the patchkit
argv the module builds, how patchkit's --json report becomes a task result, what the action
plugin sends with a recipe. The Ansible tools on the collection (ansible-doc, the example's
syntax check, the build) are tests/agent/test_ansible_tools.py; the module run by a real
ansible-playbook over SSH is tests/ssh/test_ansible_module.py.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from pathlib import Path

import pytest

from ansible_collections.patchkit.fleet.plugins.module_utils import patchkit_cli as cli
from ansible_collections.patchkit.fleet.plugins.plugin_utils import recipe_bundle

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def report(status: str, steps: list[dict[str, object]], command: str = "apply", **host: object) -> str:
    return json.dumps({"schema_version": 2, "recipe": "r", "run_id": "RUN", "command": command,
                       "hosts": {"gpu-1": {"status": status, "steps": steps, **host}}})


# ---------------------------------------------------------------- which command, which argv


@pytest.mark.parametrize(("state", "check", "command"), [
    ("applied", False, "apply"), ("applied", True, "plan"), ("planned", False, "plan"), ("planned", True, "plan"),
    ("status", False, "status"), ("status", True, "status"), ("rolled_back", False, "rollback"),
    ("rolled_back", True, "status"),  # rollback has no dry run: check mode predicts from status
])
def test_check_mode_never_runs_a_writing_command(state: str, check: bool, command: str) -> None:
    assert cli.command_for(state, check) == command


def test_no_value_reaches_patchkit_as_an_option() -> None:
    argv = cli.build_argv(["pk"], "rollback", "/t/inv.yaml", "-rf.yaml", steps=["a", "-b"],
                          variables={"x": "--force", "n": 3, "flag": True, "f": 0.5}, run_id="-r", force=True,
                          lock_timeout=5)
    assert argv == ["pk", "rollback", "--json", "--inventory=/t/inv.yaml", "--steps=a,-b", "--extra-var=f=0.5",
                    "--extra-var=flag=true", "--extra-var=n=3", "--extra-var=x=--force", "--run=-r", "--force",
                    "--lock-timeout=5", "--", "-rf.yaml"]
    assert "--run=-r" not in cli.build_argv(["pk"], "apply", "i", "r", run_id="-r")  # rollback's option only


@pytest.mark.parametrize(("variables", "message"), [
    ({"1x": "v"}, "vars: '1x' is not a variable name"),
    ({"a=b": "v"}, "vars: 'a=b' is not a variable name"),
    ({"python": "/x"}, "vars: python is the interpreter to patch; give it as the module's `python` option"),
    ({"v": [1]}, "vars.v: a recipe variable is a string, number or boolean, not list"),
    ({"v": None}, "vars.v: a recipe variable is a string, number or boolean, not NoneType"),
])
def test_bad_vars_are_refused_by_name(variables: dict[str, object], message: str) -> None:
    with pytest.raises(cli.TaskError) as caught:
        cli.build_argv(["pk"], "apply", "i", "r", variables=variables)
    assert str(caught.value).startswith(message)


def test_a_step_name_with_a_comma_is_refused() -> None:
    with pytest.raises(cli.TaskError, match="steps: 'a,b' is not a step name"):
        cli.build_argv(["pk"], "apply", "i", "r", steps=["a,b"])


def test_the_inventory_is_one_host_on_the_local_transport_said_explicitly() -> None:
    doc = json.loads(cli.inventory_document("gpu-7", "/opt/env/bin/python", "/var/lib/pk"))
    assert doc == {"hosts": {"gpu-7": {"address": "local", "python": "/opt/env/bin/python",
                                       "state_dir": "/var/lib/pk"}}}
    # a name patchkit would not take (or none) gets a plain one; the address stays local
    assert json.loads(cli.inventory_document("we ird/name"))["hosts"] == {"target": {"address": "local"}}
    assert json.loads(cli.inventory_document(None))["hosts"] == {"target": {"address": "local"}}


# ---------------------------------------------------------------- the report as a task result

PATCH = {"name": "p", "status": "changed", "message": "added", "diff": "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"}


def test_apply_changed_then_ok() -> None:
    got = cli.map_report("applied", "apply", False, 0, report("changed", [PATCH]), "", "gpu-1")
    assert got["changed"] is True and got["failed"] is False and got["run_id"] == "RUN"
    assert got["diff"] == [{"prepared": PATCH["diff"]}]
    ok = cli.map_report("applied", "apply", False, 0, report("ok", [dict(PATCH, status="ok", diff=None)]), "", "gpu-1")
    assert ok["changed"] is False and ok["diff"] == []


def test_check_mode_reports_what_apply_would_change_and_planned_never_changes() -> None:
    plan = report("changed", [PATCH], command="plan")
    assert cli.map_report("applied", "plan", True, 0, plan, "", "gpu-1")["changed"] is True
    planned = cli.map_report("planned", "plan", False, 0, plan, "", "gpu-1")
    assert planned["changed"] is False and planned["would_change"] is True
    nothing = cli.map_report("applied", "plan", True, 0, report("ok", [], command="plan"), "", "gpu-1")
    assert nothing["changed"] is False and nothing["would_change"] is False


def test_status_pending_exit_3_is_no_failure_and_no_change() -> None:
    got = cli.map_report("status", "status", False, 3, report("pending", [dict(PATCH, status="pending")]), "", "gpu-1")
    assert got["failed"] is False and got["changed"] is False and got["status"] == "pending"
    # exit 3 from a command that is not status is a failure
    assert cli.map_report("applied", "apply", False, 3, report("ok", []), "", "gpu-1")["failed"] is True


def test_rollback_in_check_mode_predicts_from_status() -> None:
    applied = report("ok", [{"name": "p", "status": "applied"}], command="status")
    assert cli.map_report("rolled_back", "status", True, 0, applied, "", "gpu-1")["changed"] is True
    drifted = report("drifted", [{"name": "p", "status": "drifted"}], command="status")
    assert cli.map_report("rolled_back", "status", True, 3, drifted, "", "gpu-1")["changed"] is False
    assert cli.map_report("rolled_back", "status", True, 3, drifted, "", "gpu-1", force=True)["changed"] is True


def test_a_failed_step_fails_the_task_with_patchkits_message() -> None:
    failed = dict(PATCH, status="failed", message="import check failed: AssertionError: boom; original restored")
    got = cli.map_report("applied", "apply", False, 1, report("failed", [{"name": "c", "status": "ok"}, failed]), "",
                         "gpu-1")
    assert got["failed"] is True and got["changed"] is False
    assert got["msg"] == "patchkit apply failed on gpu-1: p: import check failed: AssertionError: boom; original restored"
    host_said = cli.map_report("applied", "apply", False, 1, report("failed", [], message="cannot lock"), "", "gpu-1")
    assert host_said["msg"] == "patchkit apply failed on gpu-1: cannot lock"


def test_a_usage_error_and_a_crash_fail_with_what_patchkit_said() -> None:
    error = json.dumps({"error": {"kind": "usage", "message": "/r.yaml:3:5: steps[0]: unknown key 'verfy'"},
                        "exit_code": 2})
    got = cli.map_report("applied", "apply", False, 2, error, "", "gpu-1")
    assert got == {"failed": True, "changed": False, "rc": 2,
                   "msg": "patchkit apply: /r.yaml:3:5: steps[0]: unknown key 'verfy'"}
    crash = cli.map_report("applied", "apply", False, 1, "", "Traceback ...\nKeyError: 'x'\n", "gpu-1")
    assert crash["failed"] is True and crash["msg"] == "patchkit apply exited 1 without a report: Traceback ...\nKeyError: 'x'"


def test_every_file_of_a_multi_file_step_is_a_diff() -> None:
    step = {"name": "m", "status": "changed", "diff": "whole", "files": [{"file": "a", "diff": "A"}, {"file": "b", "diff": "B"}]}
    assert cli.step_diffs([step]) == [{"prepared": "A"}, {"prepared": "B"}]


# ---------------------------------------------------------------- what the action plugin sends


def decoded(files: dict[str, str]) -> dict[str, bytes]:
    return {rel: base64.b64decode(data) for rel, data in files.items()}


def test_a_recipe_goes_with_the_files_it_names_relative_to_its_folder(tmp_path: Path) -> None:
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "fix.patch").write_bytes(b"--- a/x\n+++ b/x\n")
    (tmp_path / "mods.py").write_text("class T: pass\n")
    (tmp_path / "drafter").mkdir()
    (tmp_path / "drafter" / "config.json").write_text("{}")
    (tmp_path / "prompts.txt").write_text("hi\n")
    (tmp_path / "extra.txt").write_text("listed by hand\n")
    (tmp_path / "unrelated.txt").write_text("not named: not sent\n")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "name: r\nsteps:\n"
        "  - {name: a, patch: {package: p, edit: {diff: {file: patches/fix.patch}}}}\n"
        "  - {name: b, patch: {package: p, edit: {codemod: {file: mods.py, transformer: T}}}}\n"
        "  - {name: c, deploy: {src: drafter, dest: /models/d}}\n"
        "  - {name: d, deploy: {src: /abs/on/target, dest: /models/e}}\n"
        "  - {name: e, launch: {command: [x], spec_decode: {prompts_file: prompts.txt}}}\n"
        "  - {name: f, patch: {package: p, edit: {diff: {file: '{{ which }}.patch'}}}}\n")
    text, files = recipe_bundle.bundle(str(recipe), ["extra.txt"])
    assert base64.b64decode(text) == recipe.read_bytes()
    assert decoded(files) == {"patches/fix.patch": b"--- a/x\n+++ b/x\n", "mods.py": b"class T: pass\n",
                              "drafter/config.json": b"{}", "prompts.txt": b"hi\n", "extra.txt": b"listed by hand\n"}


def test_nothing_outside_the_recipes_folder_is_sent(tmp_path: Path) -> None:
    folder = tmp_path / "recipes"
    folder.mkdir()
    (tmp_path / "secret.key").write_text("private")
    os.symlink(tmp_path / "secret.key", folder / "link.patch")
    os.symlink(tmp_path, folder / "up")
    (folder / "d").mkdir()
    os.symlink(tmp_path / "secret.key", folder / "d" / "inner")
    recipe = folder / "r.yaml"
    recipe.write_text("name: r\nsteps:\n"
                      "  - {name: a, patch: {package: p, edit: {diff: {file: ../secret.key}}}}\n"
                      "  - {name: b, patch: {package: p, edit: {diff: {file: link.patch}}}}\n"
                      "  - {name: c, deploy: {src: up/secret.key, dest: /x}}\n"
                      "  - {name: d, deploy: {src: d, dest: /y}}\n")
    _, files = recipe_bundle.bundle(str(recipe), ["../secret.key"])
    assert files == {}  # patchkit, on the target, names each as outside the recipe's folder or missing


def test_a_recipe_too_large_to_send_is_refused_with_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recipe_bundle, "LIMIT_BYTES", 1024)
    (tmp_path / "big").mkdir()
    (tmp_path / "big" / "weights.bin").write_bytes(b"\0" * 2048)
    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: r\nsteps:\n  - {name: c, deploy: {src: big, dest: /m}}\n")
    with pytest.raises(recipe_bundle.BundleError, match=r"more than 0 MiB \(at big/weights.bin\).*use remote_src"):
        recipe_bundle.bundle(str(recipe))


def test_a_recipe_that_is_not_yaml_is_still_sent_for_patchkit_to_report(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: [unclosed\n")
    text, files = recipe_bundle.bundle(str(recipe))
    assert base64.b64decode(text) == b"name: [unclosed\n" and files == {}
    with pytest.raises(recipe_bundle.BundleError, match="cannot read recipe .*nope.yaml: No such file"):
        recipe_bundle.bundle(str(tmp_path / "nope.yaml"))


def test_patchkits_warnings_become_the_tasks_warnings() -> None:
    doc = json.loads(report("ok", [], warnings=["gpu-1: banner skipped"]))
    doc["warnings"] = ["-e nosuchvar is used by no step (did you mean 'port'?)"]
    got = cli.map_report("applied", "apply", False, 0, json.dumps(doc), "", "gpu-1")
    assert got["warnings"] == ["-e nosuchvar is used by no step (did you mean 'port'?)", "gpu-1: banner skipped"]
