#!/usr/bin/python
# Copyright: patchkit contributors
# The module's documented interface (ansible-doc). The work is the action plugin's of the same
# name (plugins/action/patchkit.py), which runs patchkit on the controller: nothing of this file
# runs on a host unless a task bypasses that plugin, and then it only says so.
"""Apply, plan, check or roll back a patchkit recipe on the host Ansible targets."""

DOCUMENTATION = r"""
module: patchkit
short_description: Apply a patchkit recipe on the targeted host (verified, idempotent, reversible)
version_added: "0.1.0"
description:
  - Applies a patchkit recipe to the host the task targets. patchkit runs on the controller
    (an action plugin, with the controller's Python) and reaches that one host as
    C(patchkit -i) of the same inventory would - C(ansible_host), C(ansible_port),
    C(ansible_user), C(ansible_ssh_private_key_file), become (the task's keyword or
    C(ansible_become); to root with sudo), C(ansible_connection) local, ssh, docker, podman or
    kubectl (any other fails the task, naming it). The host needs only a Python 3.8 or newer;
    patchkit's agent there is stdlib-only, and the journal (backups, run records) stays there.
  - The same inventory means the same thing here and to C(patchkit -i) - host and group
    variables are the recipe's variables, C(patchkit_*) variables set patchkit's host settings
    (C(patchkit_known_hosts), C(patchkit_state_dir), ...), and C(ansible_python_interpreter)
    is the interpreter whose packages are patched. Play and extra variables count as Ansible
    counts them; the task's options O(vars), O(python) and O(state_dir) win over all of them.
  - Host keys are always checked, as OpenSSH would (C(UserKnownHostsFile) of C(~/.ssh/config),
    else C(~/.ssh/known_hosts) of the controller's user, or C(patchkit_known_hosts)); Ansible's
    C(host_key_checking) and C(ansible_ssh_common_args) are not used.
  - The recipe is read on the controller (like the C(src) of M(ansible.builtin.copy)), with the
    files it names relative to its folder. With O(remote_src=true) it is fetched from the host.
  - The task is C(changed) only when patchkit changed a file (a re-run is C(ok)), fails with
    patchkit's own message when a step or its verification fails (patchkit then has put the
    original back), supports check mode (patchkit plan; nothing is written) and diff mode
    (the unified diffs patchkit reports).
requirements:
  - patchkit (the Python distribution C(patchkit-llm)) on the controller, in the Python that
    runs Ansible. Nothing on the host but Python 3.8 or newer.
options:
  recipe:
    description:
      - The recipe YAML. A path on the controller (relative paths are looked up like
        M(ansible.builtin.copy)'s C(src)), or on the target with O(remote_src=true).
    type: path
    required: true
  remote_src:
    description:
      - The recipe is a path on the host; it and the files it names relative to its folder
        (files, not folders) are fetched to the controller first. A recipe with a C(codemod)
        is refused (its Python would run on the controller).
    type: bool
    default: false
  files:
    description:
      - With O(remote_src=true), more files to fetch with the recipe, relative to its folder, for
        references the controller cannot see (a path built from a C({{ }}) template). Referenced
        C(diff.file), C(codemod.file) and C(prompts_file) are fetched without being listed.
        A recipe on the controller needs none (patchkit reads its folder there).
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
      - The interpreter on the host whose packages are patched (patchkit's host C(python)); it
        wins over C(ansible_python_interpreter), which means the same. By default the recipe's
        C(python) is used, else C(python3) on the host's PATH.
    type: str
  state_dir:
    description:
      - The host's journal folder (backups, run records); wins over C(patchkit_state_dir).
        Default C(~/.local/state/patchkit) of the remote user.
    type: str
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
      - Ignored, with a warning. patchkit runs on the controller now; nothing of it runs on the host.
    type: str
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
notes:
  - Each host's journal lives on that host, so rollback works per host, as with the patchkit CLI.
  - patchkit needs Python 3.11 or newer on the controller; the host, Python 3.8 or newer.
  - O(vars), O(python) and O(state_dir) mean what C(-e), C(python) and C(state_dir) mean to C(patchkit -i).
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

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.patchkit.fleet.plugins.module_utils.patchkit_cli import ARGUMENT_SPEC


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.fail_json(msg="patchkit.fleet.patchkit runs on the controller through its action plugin; "
                         "call it by that name (patchkit.fleet.patchkit), not as a module on the host")


if __name__ == "__main__":
    main()
