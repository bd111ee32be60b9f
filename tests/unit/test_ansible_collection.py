"""The patchkit.fleet collection's pure parts (ansible_collections/patchkit/fleet): the patchkit
argv the module builds, how patchkit's --json report becomes a task result, what the action
plugin makes of a task's variables, what remote_src fetches. The Ansible tools on the collection (ansible-doc, the example's
syntax check, the build) are tests/agent/test_ansible_tools.py; the module run by a real
ansible-playbook over SSH is tests/ssh/test_ansible_module.py.
"""

from __future__ import annotations

import json
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


# Variables of a task as ansible-playbook gives them to the action plugin (2.19, one INI host with
# host_vars and group_vars, become as a task keyword), trimmed: the run-time ones and the host's.
TASK_VARS = {
    "ansible_check_mode": False, "ansible_config_file": None, "ansible_connection": "ssh",
    "ansible_current_hosts": ["gpu-7"], "ansible_diff_mode": False, "ansible_facts": {}, "ansible_forks": 5,
    "ansible_host": "10.0.0.7", "ansible_port": 2222, "ansible_user": "root", "ansible_inventory_sources": ["/i"],
    "ansible_pipelining": False, "ansible_play_batch": ["gpu-7"], "ansible_play_hosts": ["gpu-7"],
    "ansible_playbook_python": "/usr/bin/python3", "ansible_shell_type": "sh", "ansible_timeout": 10,
    "ansible_verbosity": 0, "ansible_version": {"full": "2.19.14"}, "environment": [], "group_names": ["kimi"],
    "groups": {"all": ["gpu-7"], "kimi": ["gpu-7"]}, "hostvars": {}, "inventory_dir": "/i",
    "inventory_file": "/i/hosts.ini", "inventory_hostname": "gpu-7", "inventory_hostname_short": "gpu-7",
    "omit": "__omit_place_holder__x", "play_hosts": ["gpu-7"], "playbook_dir": "/p", "role_names": [], "vars": {},
    "ansible_python_interpreter": "/opt/vllm/bin/python", "first_value": "deepseek_v3", "port": 8001,
    "patchkit_known_hosts": "/etc/pk_known_hosts",
}
HOST = {"ansible_connection": "ssh", "ansible_host": "10.0.0.7", "ansible_port": 2222, "ansible_user": "root",
        "ansible_python_interpreter": "/opt/vllm/bin/python", "first_value": "deepseek_v3", "port": 8001,
        "patchkit_known_hosts": "/etc/pk_known_hosts"}


def test_the_task_host_is_its_inventory_variables_without_ansibles_run_time_ones() -> None:
    assert cli.host_variables(TASK_VARS) == HOST


def test_python_state_dir_and_become_of_the_task_are_the_hosts() -> None:
    got = cli.host_variables(TASK_VARS, python="/opt/other/bin/python", state_dir="/var/pk",
                             become=(True, "root", "sudo"))
    assert got == dict(HOST, ansible_python_interpreter="/opt/other/bin/python", patchkit_state_dir="/var/pk",
                       ansible_become=True, ansible_become_user="root", ansible_become_method="sudo")
    # become off (the task's keyword over the inventory's ansible_become): no become user left over
    off = cli.host_variables(dict(TASK_VARS, ansible_become=True, ansible_become_user="svc"), become=(False, "svc", "su"))
    assert off == dict(HOST, ansible_become=False)


def test_the_one_host_inventory_maps_as_patchkit_i_maps_the_host() -> None:
    from patchkit.fleet.ansible import host_from_ansible_vars, hosts_from_ansible_json
    from patchkit.host.transport import schemes  # noqa: F401 - declares the schemes inventories take

    hostvars = cli.host_variables(TASK_VARS, state_dir="/var/pk")
    mapped = hosts_from_ansible_json(json.loads(cli.inventory_document("gpu-7", hostvars)))
    assert list(mapped.inventory.hosts) == ["gpu-7"]
    host = mapped.inventory.hosts["gpu-7"]
    assert host == host_from_ansible_vars("gpu-7", hostvars)
    assert (host.address, host.user, host.python, host.state_dir) == ("10.0.0.7", "root", "/opt/vllm/bin/python",
                                                                      "/var/pk")
    assert (host.options.port, host.options.known_hosts) == (2222, "/etc/pk_known_hosts")  # type: ignore[attr-defined]
    assert host.vars == {"first_value": "deepseek_v3", "port": 8001}
    # a name patchkit would not take (or none) gets a plain one
    assert list(json.loads(cli.inventory_document("we ird/name", {}))["_meta"]["hostvars"]) == ["target"]


def test_the_recipes_secret_values_are_found_in_every_source_of_variables() -> None:
    doc = {"secrets": ["token", "unset", 3], "vars": {"token": ""}}
    assert cli.secret_values(doc, {"token": "pk-7f3a", "unset": "", "other": "x"}) == ["pk-7f3a"]
    assert cli.secret_values(None, {"token": "pk-7f3a"}) == []


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


# ---------------------------------------------------------------- what remote_src fetches


def test_a_recipe_on_the_host_is_fetched_with_the_files_it_names_relative_to_its_folder() -> None:
    doc = {"name": "r", "steps": [
        {"name": "a", "patch": {"package": "p", "edit": {"diff": {"file": "patches/fix.patch"}}}},
        {"name": "b", "patch": {"package": "p", "edit": {"codemod": {"file": "mods.py", "transformer": "T"}}}},
        {"name": "c", "deploy": {"src": "drafter", "dest": "/models/d"}},
        {"name": "d", "deploy": {"src": "/abs/on/target", "dest": "/models/e"}},
        {"name": "e", "launch": {"command": ["x"], "spec_decode": {"prompts_file": "prompts.txt"}}},
        {"name": "f", "patch": {"package": "p", "edit": {"diff": {"file": "{{ which }}.patch"}}}},
    ]}
    assert recipe_bundle.referenced_paths(doc) == ["patches/fix.patch", "mods.py", "drafter", "prompts.txt"]
    assert recipe_bundle.referenced_paths("name: [unclosed") == []
    # a codemod runs where patchkit runs: the action refuses one fetched from the host
    assert recipe_bundle.codemod_files(doc) == ["mods.py"]
    assert recipe_bundle.codemod_files({"steps": [{"name": "a", "check": {"python": "pass"}}]}) == []


def test_patchkits_warnings_become_the_tasks_warnings() -> None:
    doc = json.loads(report("ok", [], warnings=["gpu-1: banner skipped"]))
    doc["warnings"] = ["-e nosuchvar is used by no step (did you mean 'port'?)"]
    got = cli.map_report("applied", "apply", False, 0, json.dumps(doc), "", "gpu-1")
    assert got["warnings"] == ["-e nosuchvar is used by no step (did you mean 'port'?)", "gpu-1: banner skipped"]
