#!/usr/bin/python
# Copyright: patchkit contributors
# The module runs ON the target host (Ansible's connection brings it there) and runs patchkit
# there on the local transport, against a one-host inventory it writes itself. The action
# plugin of the same name (plugins/action/patchkit.py) reads the recipe on the controller
# and hands its text, and the files it names, to this module.
"""Apply, plan, check or roll back a patchkit recipe on the host Ansible targets."""

DOCUMENTATION = r"""
module: patchkit
short_description: Apply a patchkit recipe on the targeted host (verified, idempotent, reversible)
version_added: "0.1.0"
description:
  - Runs patchkit on the host the task targets, through Ansible's own
    connection. patchkit runs there on its local transport against that one host, so the
    host is reached only by the transport Ansible already uses.
  - The recipe is read on the controller (like the C(src) of M(ansible.builtin.copy)), and
    its text and the files it names relative to its folder (a diff or codemod file, a
    prompts file, a deploy C(src)) are handed to the module. With O(remote_src=true) the
    recipe is a path on the target instead.
  - The task is C(changed) only when patchkit changed a file (a re-run is C(ok)), fails with
    patchkit's own message when a step or its verification fails (patchkit then has put the
    original back), supports check mode (patchkit plan; nothing is written) and diff mode
    (the unified diffs patchkit reports).
requirements:
  - patchkit (the Python distribution C(patchkit-llm)) installed for the target's Python
    (C(ansible_python_interpreter)), or its command given with O(executable).
options:
  recipe:
    description:
      - The recipe YAML. A path on the controller (relative paths are looked up like
        M(ansible.builtin.copy)'s C(src)), or on the target with O(remote_src=true).
    type: path
    required: true
  remote_src:
    description:
      - The recipe (and the files it names) is already on the target at O(recipe).
    type: bool
    default: false
  files:
    description:
      - More files or folders to ship with the recipe, relative to its folder, for references
        the controller cannot see (a path built from a C({{ }}) template). Referenced
        C(diff.file), C(codemod.file), C(prompts_file) and relative deploy C(src) are shipped
        without being listed.
    type: list
    elements: str
    default: []
  state:
    description:
      - V(applied) applies the recipe (in check mode it only plans).
      - V(planned) plans it; never changes anything (RV(would_change) says whether apply would).
      - V(rolled_back) undoes the last run (or O(run_id)) from the host's journal; in check mode
        it reads status and predicts.
      - V(status) reports each step as applied, pending, drifted, stale or not-applicable;
        never changes anything, and pending or drifted is not a failure (test RV(status)).
    type: str
    choices: [applied, planned, rolled_back, status]
    default: applied
  steps:
    description: Only these steps of the recipe (patchkit C(--steps)).
    type: list
    elements: str
  vars:
    description:
      - Recipe variables (patchkit C(-e)), strings, numbers or booleans; a variable the recipe
        declares with a number or boolean default must be one. Values of variables the recipe
        lists under C(secrets) are kept out of the task's output.
    type: dict
    default: {}
  python:
    description:
      - The interpreter whose packages are patched (patchkit's host C(python)). By default the
        recipe's C(python) is used, else C(python3) on the target's PATH. This is not the interpreter
        that runs patchkit (that is C(ansible_python_interpreter)).
    type: path
  state_dir:
    description: The host's journal folder (backups, run records). Default C(~/.local/state/patchkit) of the remote user.
    type: path
  run_id:
    description: With O(state=rolled_back), the run to undo (default the last one).
    type: str
  force:
    description: With O(state=rolled_back), restore even a file that changed since patchkit wrote it.
    type: bool
    default: false
  lock_timeout:
    description: Seconds to wait for another patchkit run's lock on the host.
    type: float
  executable:
    description:
      - The patchkit command on the target (a path, or a name looked up on its PATH). Default
        C(python -m patchkit) with the target's Python, which must have patchkit installed.
    type: str
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
notes:
  - Each host's journal lives on that host, so rollback works per host, as with the patchkit CLI.
  - patchkit needs Python 3.11 or newer on the target.
author:
  - patchkit contributors
"""

EXAMPLES = r"""
- name: Let vLLM serve Kimi-K2.5 with an EAGLE-3 drafter
  patchkit.fleet.patchkit:
    recipe: recipes/kimi_eagle3.yaml
    steps: [eagle3-whitelist, eagle3-preflight]
    python: /opt/ml-env/bin/python
  become: true

- name: What would change (run with --check --diff to see the diffs)
  patchkit.fleet.patchkit:
    recipe: recipes/kimi_eagle3.yaml
    state: planned
    python: /opt/ml-env/bin/python
  register: plan

- name: Undo the last run
  patchkit.fleet.patchkit:
    recipe: recipes/kimi_eagle3.yaml
    state: rolled_back
    python: /opt/ml-env/bin/python
"""

RETURN = r"""
status:
  description: patchkit's status of the host (changed, ok, skipped, failed; for status applied, ok, pending, drifted, stale).
  returned: when patchkit reported
  type: str
  sample: changed
steps:
  description: patchkit's report of each step (name, kind, status, message, file, diff, checks, ...), as C(patchkit --json) prints it.
  returned: when patchkit reported
  type: list
  elements: dict
would_change:
  description: With O(state=planned) or in check mode, whether applying (or rolling back) would change a file.
  returned: for plan, and rolled_back in check mode
  type: bool
run_id:
  description: patchkit's id of this run (the one O(run_id) names for a rollback).
  returned: when patchkit reported
  type: str
recipe:
  description: The recipe's name.
  returned: when patchkit reported
  type: str
command:
  description: The patchkit command that ran (apply, plan, status or rollback).
  returned: when patchkit reported
  type: str
rc:
  description: patchkit's exit code.
  returned: always
  type: int
"""

import base64
import importlib.util
import os
import shutil
import sys
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.patchkit.fleet.plugins.module_utils.patchkit_cli import (
    TaskError,
    build_argv,
    command_for,
    inventory_document,
    map_report,
)


def patchkit_command(module):
    """How patchkit is started on the target: O(executable), else this Python's patchkit."""
    executable = module.params["executable"]
    if executable:
        if os.sep in executable:
            if not (os.path.isfile(executable) and os.access(executable, os.X_OK)):
                module.fail_json(msg=f"executable {executable} is not an executable file on the target")
            return [executable]
        return [module.get_bin_path(executable, required=True)]
    if importlib.util.find_spec("patchkit") is None:
        module.fail_json(msg=(
            f"patchkit is not installed for the target's python {sys.executable}: install it there "
            "(pip install patchkit-llm, or pip install . in a clone of patchkit), "
            "set ansible_python_interpreter to a python that has it, or give its command as executable"))
    return [sys.executable, "-m", "patchkit"]


def _safe_relpath(relpath):
    parts = relpath.replace("\\", "/").split("/")
    return (relpath and not relpath.startswith("/") and ".." not in parts and "" not in parts
            and "." not in parts)


def unpack_recipe(module, folder):
    """Write the recipe and its files the action plugin sent into `folder`; the recipe's path."""
    name = module.params["_recipe_name"] or "recipe.yaml"
    if not _safe_relpath(name) or "/" in name:
        module.fail_json(msg=f"recipe name {name!r} is not a file name")
    files = dict(module.params["_recipe_files"] or {})
    files[name] = module.params["_recipe_text"]
    for relpath, encoded in files.items():
        if not _safe_relpath(relpath):
            module.fail_json(msg=f"recipe file {relpath!r} leaves the recipe's folder")
        path = os.path.join(folder, relpath)
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(base64.b64decode(encoded))
    return os.path.join(folder, name)


def secret_values(recipe_path, variables):
    """Values of vars the recipe lists under `secrets`, to keep out of the task's output."""
    try:
        import yaml  # patchkit's own dependency: present wherever patchkit is

        with open(recipe_path, "rb") as f:
            doc = yaml.safe_load(f)
    except Exception:  # noqa: BLE001 - patchkit reports the recipe's problems itself
        return []
    names = doc.get("secrets") if isinstance(doc, dict) else None
    return [str(variables[n]) for n in names or [] if isinstance(n, str) and n in variables]


def main():
    module = AnsibleModule(
        argument_spec={
            "recipe": {"type": "path", "required": True},
            "remote_src": {"type": "bool", "default": False},
            "files": {"type": "list", "elements": "str", "default": []},
            "state": {"type": "str", "default": "applied", "choices": ["applied", "planned", "rolled_back", "status"]},
            "steps": {"type": "list", "elements": "str"},
            "vars": {"type": "dict", "default": {}},
            "python": {"type": "path"},
            "state_dir": {"type": "path"},
            "run_id": {"type": "str"},
            "force": {"type": "bool", "default": False},
            "lock_timeout": {"type": "float"},
            "executable": {"type": "str"},
            # set by the action plugin: the recipe read on the controller
            "_recipe_text": {"type": "str"},
            "_recipe_name": {"type": "str"},
            "_recipe_origin": {"type": "str"},
            "_recipe_files": {"type": "dict"},
            "_host_name": {"type": "str"},
        },
        supports_check_mode=True,
    )
    p = module.params
    variables = p["vars"] or {}
    base = patchkit_command(module)
    folder = tempfile.mkdtemp(prefix="patchkit-", dir=module.tmpdir)
    try:
        if p["remote_src"]:
            recipe, origin = p["recipe"], None
        elif p["_recipe_text"] is None:
            module.fail_json(msg="the recipe was not sent: run this module through its action plugin "
                                 "(patchkit.fleet.patchkit), or set remote_src for a recipe on the target")
        else:
            recipe, origin = unpack_recipe(module, folder), p["_recipe_origin"]
        module.no_log_values.update(v for v in secret_values(recipe, variables) if v)
        inventory = os.path.join(folder, "inventory.yaml")
        with open(inventory, "w") as f:
            f.write(inventory_document(p["_host_name"], p["python"], p["state_dir"]))
        try:
            command = command_for(p["state"], module.check_mode)
            argv = build_argv(base, command, inventory, recipe, p["steps"], variables, p["run_id"], p["force"],
                              p["lock_timeout"])
        except TaskError as exc:
            module.fail_json(msg=str(exc))
        rc, out, err = module.run_command(argv, cwd=folder)
        result = map_report(p["state"], command, module.check_mode, rc, out, err, p["_host_name"], p["force"])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if origin and "msg" in result:
        # patchkit names the copy it read; the user knows the recipe by its controller path
        for copy in {folder, os.path.realpath(folder)}:
            result["msg"] = result["msg"].replace(os.path.join(copy, ""), os.path.join(os.path.dirname(origin), ""))
    for warning in result.pop("warnings", []):
        module.warn(warning)
    if not module._diff or not result.get("diff"):
        result.pop("diff", None)
    if result.get("failed"):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
