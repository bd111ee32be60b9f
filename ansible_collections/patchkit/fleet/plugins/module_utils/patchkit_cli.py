# Copyright: patchkit contributors
# The pure half of the patchkit action: which patchkit command a task runs, its argv, the
# one-host inventory it runs against (the task's host, from the variables Ansible has for it),
# and how patchkit's --json report becomes the task's result. No I/O here, so the mapping is
# tested without a host (tests/unit).
"""Build patchkit command lines and map patchkit's --json report to an Ansible result."""

import json
import re

STATES = ("applied", "planned", "rolled_back", "status")
# The task's options (the module's DOCUMENTATION describes them), checked by the action plugin.
ARGUMENT_SPEC = {
    "recipe": {"type": "path", "required": True},
    "remote_src": {"type": "bool", "default": False},
    "files": {"type": "list", "elements": "str", "default": []},
    "state": {"type": "str", "default": "applied", "choices": list(STATES)},
    "steps": {"type": "list", "elements": "str"},
    "vars": {"type": "dict", "default": {}},
    "python": {"type": "str"},  # paths on the host: a `~` there is the host user's
    "state_dir": {"type": "str"},
    "run_id": {"type": "str"},
    "force": {"type": "bool", "default": False},
    "lock_timeout": {"type": "float"},
    "executable": {"type": "str"},
}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class TaskError(Exception):
    """A problem with the task's options: the task fails with this message, nothing is run."""


def command_for(state, check_mode):
    """The patchkit command for a state. Check mode never writes: `applied` plans, and
    `rolled_back` reads status (rollback has no dry run) to predict what it would restore."""
    if state not in STATES:
        raise TaskError("state must be one of {}, not {!r}".format(", ".join(STATES), state))
    if state == "applied":
        return "plan" if check_mode else "apply"
    if state == "rolled_back":
        return "status" if check_mode else "rollback"
    return "plan" if state == "planned" else "status"


def host_name(name):
    """The name the one-host inventory gives the target: Ansible's, when patchkit accepts it."""
    return name if isinstance(name, str) and _HOST.match(name) else "target"


# Variables Ansible adds to every task's (the play, the run, the connection plugin's own
# settings): not the host's inventory, so `ansible-inventory --list` has none of them.
RUNTIME_VARS = frozenset((
    "ansible_check_mode", "ansible_config_file", "ansible_current_hosts", "ansible_dependent_role_names",
    "ansible_diff_mode", "ansible_facts", "ansible_failed_hosts", "ansible_forks", "ansible_inventory_sources",
    "ansible_limit", "ansible_loop", "ansible_loop_var", "ansible_index_var", "ansible_module_compression",
    "ansible_parent_role_names", "ansible_parent_role_paths", "ansible_pipelining", "ansible_play_batch",
    "ansible_play_hosts", "ansible_play_hosts_all", "ansible_play_name", "ansible_play_role_names",
    "ansible_playbook_python", "ansible_role_name", "ansible_role_names", "ansible_run_tags", "ansible_search_path",
    "ansible_shell_executable", "ansible_shell_type", "ansible_skip_tags", "ansible_timeout", "ansible_verbosity",
    "ansible_version", "ansible_collection_name", "ansible_async_path", "ansible_local",
    "environment", "group_names", "groups", "hostvars", "inventory_dir", "inventory_file", "inventory_hostname",
    "inventory_hostname_short", "omit", "play_hosts", "playbook_dir", "role_name", "role_names", "role_path",
    "role_uuid", "ungrouped", "vars",
))


def host_variables(task_vars, python=None, state_dir=None, become=None):
    """The task host's variables as `ansible-inventory --list` gives them for `patchkit -i`:
    the task's variables without the ones Ansible adds at run time. The module's `python` and
    `state_dir` options are the host's `ansible_python_interpreter` and `patchkit_state_dir`;
    `become` is (become, user, method) as Ansible resolved it for the task (its keyword or
    ansible_become), None to keep the variables' own."""
    found = {k: v for k, v in task_vars.items() if k not in RUNTIME_VARS and not k.startswith("_")}
    if python:
        found["ansible_python_interpreter"] = python
    if state_dir:
        found["patchkit_state_dir"] = state_dir
    if become is not None:
        on, user, method = become
        found["ansible_become"] = bool(on)
        for key, value in (("ansible_become_user", user), ("ansible_become_method", method)):
            found.pop(key, None)
            if on and value:
                found[key] = value
    return found


def inventory_document(name, hostvars):
    """The one-host inventory patchkit runs against, in the form `ansible-inventory --list`
    prints: patchkit maps it as it maps any Ansible inventory given to `-i`."""
    return json.dumps({"_meta": {"hostvars": {host_name(name): hostvars}}, "all": {"hosts": [host_name(name)]}},
                      indent=1, sort_keys=True, default=str) + "\n"


def secret_values(doc, variables):
    """Values of the variables a recipe (parsed YAML) lists under `secrets`: kept out of the task's output."""
    names = doc.get("secrets") if isinstance(doc, dict) else None
    return [str(variables[n]) for n in names or [] if isinstance(n, str) and variables.get(n) not in (None, "")]


def var_text(name, value):
    """One recipe variable as patchkit's `-e` text; patchkit types it by the recipe's default."""
    if not _NAME.match(name):
        raise TaskError(f"vars: {name!r} is not a variable name (letters, digits and _, not first a digit)")
    if name == "python":
        raise TaskError("vars: python is the interpreter to patch; give it as the module's `python` option")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return value
    kind = next((t.__name__ for t in (list, dict, tuple, set, bytes) if isinstance(value, t)), type(value).__name__)
    raise TaskError(f"vars.{name}: a recipe variable is a string, number or boolean, not {kind}")


def build_argv(base, command, inventory, recipe, steps=None, variables=None, run_id=None,
               force=False, lock_timeout=None):
    """patchkit's argv. Every value is joined to its option (`--steps=a,b`) or comes after
    `--`, so no value (a recipe named `-x`, a var starting with `-`) is read as an option."""
    argv = list(base) + [command, "--json", "--inventory=" + inventory]
    if steps:
        for step in steps:
            if not step or "," in step:
                raise TaskError(f"steps: {step!r} is not a step name")
        argv.append("--steps=" + ",".join(steps))
    for name in sorted(variables or {}):
        argv.append(f"--extra-var={name}={var_text(name, variables[name])}")
    if command == "rollback":
        if run_id:
            argv.append("--run=" + run_id)
        if force:
            argv.append("--force")
    if lock_timeout is not None:
        argv.append(f"--lock-timeout={lock_timeout}")
    return argv + ["--", recipe]


def step_diffs(steps):
    """Ansible `diff` entries (prepared text) for every file a step changed or would change (a
    rollback's read as the change it made: patchkit reports them so)."""
    diffs = []
    for step in steps:
        texts = [f.get("diff") for f in step.get("files") or []] or [step.get("diff")]
        for text in texts:
            if text:
                diffs.append({"prepared": text})
    return diffs


def failure_message(command, name, host):
    """patchkit's own words for a failed host: its message, else each failed step's."""
    parts = [host.get("message") or ""]
    for step in host.get("steps") or []:
        if step.get("status") == "failed":
            parts.append("{}: {}".format(step.get("name"), step.get("message") or "failed"))
    said = "; ".join(p for p in parts if p) or "failed (no message)"
    return f"patchkit {command} failed on {name}: {said}"


def would_roll_back(steps, force=False):
    """From a status report: rollback would restore something (a drifted file only with force)."""
    wanted = ("applied", "drifted") if force else ("applied",)
    return any(step.get("status") in wanted for step in steps)


def map_report(state, command, check_mode, rc, stdout, stderr, name, force=False):
    """The task's result from one patchkit run: a dict with `changed` and, on failure, `failed`
    and `msg` (patchkit's message). Exit 3 of `status` (pending or drifted) is not a failure."""
    try:
        report = json.loads(stdout) if stdout.strip() else None
    except ValueError:
        report = None
    if not isinstance(report, dict):
        tail = (stderr or stdout or "").strip()[-2000:]
        return {"failed": True, "changed": False, "rc": rc,
                "msg": "patchkit {} exited {} without a report: {}".format(command, rc, tail or "(no output)")}
    if "error" in report:
        error = report.get("error") or {}
        return {"failed": True, "changed": False, "rc": rc,
                "msg": "patchkit {}: {}".format(command, error.get("message") or "error")}
    hosts = report.get("hosts") or {}
    key = host_name(name)
    host = hosts.get(key) or (next(iter(hosts.values())) if len(hosts) == 1 else None)
    if host is None:
        return {"failed": True, "changed": False, "rc": rc,
                "msg": f"patchkit {command} reported no host (exit {rc})"}
    steps = host.get("steps") or []
    status = host.get("status")
    # `failed` is always set: Ansible fails a result without it whose rc is not 0 (status exits 3)
    result = {"failed": False, "changed": False, "rc": rc, "command": command, "recipe": report.get("recipe"),
              "run_id": report.get("run_id"), "status": status, "steps": steps,
              "warnings": [w for w in list(report.get("warnings") or []) + list(host.get("warnings") or [])
                           if isinstance(w, str)]}
    if status == "failed" or (rc not in (0, 3) or (rc == 3 and command != "status")):
        result.update(failed=True, msg=failure_message(command, key, host))
        return result
    if command == "apply" or command == "rollback":
        result["changed"] = status == "changed"
    elif command == "plan":
        result["would_change"] = status == "changed"
        result["changed"] = check_mode and state == "applied" and status == "changed"
    elif state == "rolled_back":  # check mode: status predicts the rollback
        result["would_change"] = would_roll_back(steps, force)
        result["changed"] = result["would_change"]
    result["diff"] = step_diffs(steps) if command != "status" else []
    return result
