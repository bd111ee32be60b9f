# Copyright: patchkit contributors
# The pure half of the patchkit module: which patchkit command a task runs, its argv, the
# one-host inventory it runs against, and how patchkit's --json report becomes the task's
# result. No I/O here, so the mapping is tested without a host (tests/unit).
"""Build patchkit command lines and map patchkit's --json report to an Ansible result."""

import json
import re

STATES = ("applied", "planned", "rolled_back", "status")
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


def inventory_document(name, python=None, state_dir=None):
    """A patchkit inventory of one host on the local transport. `address: local` is written
    out: a host without an address is reached over SSH (by its name), never locally."""
    entry = {"address": "local"}
    if python:
        entry["python"] = python
    if state_dir:
        entry["state_dir"] = state_dir
    return json.dumps({"hosts": {host_name(name): entry}}, indent=1) + "\n"  # JSON is YAML


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
    raise TaskError(f"vars.{name}: a recipe variable is a string, number or boolean, not {type(value).__name__}")


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
