# Copyright: patchkit contributors
# Runs on the controller for every patchkit.fleet.patchkit task, and runs patchkit there: the
# controller's own Python (`python -m patchkit`, never a `patchkit` found on PATH) applies the
# recipe to the task's one host, reached the way the inventory says (ansible_host, port, user,
# key, become, ansible_connection), as `patchkit -i` of the same inventory reaches it. The
# host needs nothing of patchkit: patchkit's agent is stdlib-only, and the journal stays there.
"""Action plugin of patchkit.fleet.patchkit: run patchkit on the controller against the task's host."""

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile

from ansible.errors import AnsibleError
from ansible.module_utils.common.parameters import remove_values
from ansible.plugins.action import ActionBase

from ansible_collections.patchkit.fleet.plugins.module_utils.patchkit_cli import (
    ARGUMENT_SPEC,
    TaskError,
    build_argv,
    command_for,
    host_variables,
    inventory_document,
    map_report,
    secret_values,
)
from ansible_collections.patchkit.fleet.plugins.plugin_utils.recipe_bundle import (
    BundleError,
    codemod_files,
    referenced_paths,
)

PATCHKIT_TIMEOUT_S = 6 * 3600  # a launch step may wait long for a server's health; never forever


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        name = task_vars.get("inventory_hostname")
        try:
            from patchkit.base.errors import UsageError
            from patchkit.fleet.ansible import hosts_from_ansible_json
            from patchkit.host.transport import schemes  # noqa: F401 - declares the schemes inventories take
        except ImportError:
            return dict(result, failed=True, msg=(
                f"patchkit is not installed for the controller's python {sys.executable}: install it there, "
                "beside Ansible (pip install patchkit-llm, or pip install . in a clone of patchkit); "
                "the hosts need nothing of it"))
        if self._task.delegate_to:
            return dict(result, failed=True, msg=(
                "delegate_to is not supported: patchkit reaches the task's own host itself, from the controller"))
        if args["executable"]:
            result.setdefault("warnings", []).append(
                "executable is ignored: patchkit runs on the controller, nothing of it on the host")
        folder = tempfile.mkdtemp(prefix="patchkit-ansible-")
        try:
            secrets = []
            try:
                recipe, doc = self._recipe(args, folder, task_vars)
                rendered = self._templated(host_variables(task_vars), doc, result)
                hostvars = host_variables(rendered, args["python"], args["state_dir"],
                                          (self._play_context.become, self._play_context.become_user,
                                           self._play_context.become_method))
                secrets = secret_values(doc, dict(hostvars, **(args["vars"] or {})))
                # the mapping `patchkit -i` makes of this host: refuse here what it would refuse, and
                # say which of Ansible's connection settings patchkit does not use
                document = inventory_document(name, hostvars)
                notes = hosts_from_ansible_json(json.loads(document), source="inventory").notes
                result.setdefault("warnings", []).extend(notes)
                command = command_for(args["state"], self._task.check_mode)
                inventory = os.path.join(folder, "inventory.json")
                with open(os.open(inventory, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
                    out.write(document)
                argv = build_argv([sys.executable, "-m", "patchkit"], command, inventory, recipe, args["steps"],
                                  args["vars"], args["run_id"], args["force"], args["lock_timeout"])
            except (TaskError, BundleError, UsageError) as exc:
                return self._masked(dict(result, failed=True, msg=str(exc)), args, secrets)
            try:
                proc = subprocess.run(argv, cwd=folder, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                      timeout=PATCHKIT_TIMEOUT_S, check=False)
            except subprocess.TimeoutExpired:
                return self._masked(dict(result, failed=True, msg=(
                    f"patchkit {command} did not finish in {PATCHKIT_TIMEOUT_S} s")), args, secrets)
            mapped = map_report(args["state"], command, self._task.check_mode, proc.returncode, proc.stdout,
                                proc.stderr, name, args["force"])
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        if args["remote_src"] and "msg" in mapped:
            # patchkit names the copy it read; the user knows the recipe by its path on the host
            for copy in {folder, os.path.realpath(folder)}:
                mapped["msg"] = mapped["msg"].replace(os.path.join(copy, "recipe", ""),
                                                      os.path.join(os.path.dirname(args["recipe"]), ""))
        warnings = result.pop("warnings", []) + mapped.pop("warnings", [])
        if warnings:
            result["warnings"] = warnings
        if not self._task.diff or not mapped.get("diff"):
            mapped.pop("diff", None)
        result.update(mapped)
        return self._masked(result, args, secrets)

    def _recipe(self, args, folder, task_vars):
        """(path of the recipe on the controller, its parsed YAML or None). With remote_src the
        recipe and the files it names relative to its folder are fetched from the host first."""
        import yaml  # Ansible's own dependency

        if args["remote_src"]:
            path = self._fetch(args["recipe"], args["files"] or [], folder, task_vars)
        else:
            try:
                path = self._find_needle("files", args["recipe"])
            except AnsibleError as exc:
                raise BundleError(f"recipe {args['recipe']}: {exc}") from None
        try:
            with open(path, "rb") as f:
                doc = yaml.safe_load(f)
        except (OSError, yaml.YAMLError):
            doc = None  # patchkit reports a recipe it cannot read, with line and column
        return path, doc

    def _fetch(self, recipe, extra, folder, task_vars):
        """Copy the host's recipe and the files it names into `folder`; the copy's path."""
        import yaml

        name = os.path.basename(recipe)
        text = self._slurp(recipe, task_vars)
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError:
            doc = None
        codemods = codemod_files(doc)
        if codemods:
            raise BundleError(f"remote_src: the recipe's codemod {codemods[0]} is Python that would run on the "
                              "controller, taken from the host: keep a recipe with codemods on the controller")
        files = {name: text}
        for rel in list(referenced_paths(doc)) + list(extra):
            parts = rel.replace("\\", "/").split("/")
            if os.path.isabs(rel) or ".." in parts:
                continue  # patchkit refuses a path outside the recipe's folder, naming it
            files[os.path.normpath(rel)] = self._slurp(os.path.join(os.path.dirname(recipe), rel), task_vars)
        for rel, data in files.items():
            path = os.path.join(folder, "recipe", rel)
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out:
                out.write(data)
        return os.path.join(folder, "recipe", name)

    def _slurp(self, path, task_vars):
        got = self._execute_module(module_name="ansible.builtin.slurp", module_args={"src": path},
                                   task_vars=task_vars)
        if got.get("failed") or "content" not in got:
            raise BundleError(f"remote_src: cannot read {path} on the host: {got.get('msg') or 'failed'}")
        return base64.b64decode(got["content"])

    def _templated(self, variables, doc, result):
        """The variables with their `{{ }}` rendered, as every Ansible module sees them. One that
        does not render (an undefined name another play defines) is passed as written, as
        `ansible-inventory --list` passes it; a warning names it when patchkit reads it (a
        connection or patchkit_* setting, or a variable the recipe declares)."""
        declared = doc.get("vars") if isinstance(doc, dict) and isinstance(doc.get("vars"), dict) else {}
        out = {}
        for key, value in variables.items():
            try:
                out[key] = self._templar.template(value)
            except AnsibleError as exc:
                out[key] = value
                if key in declared or key.startswith(("ansible_", "patchkit_")):
                    result.setdefault("warnings", []).append(
                        f"variable {key} does not render ({str(exc).splitlines()[0]}): passed as written")
        return out

    def _masked(self, result, args, secrets):
        """The result with the recipe's secret values replaced, the task's options as `invocation`."""
        if secrets:
            result = remove_values(result, secrets)
        result["invocation"] = {"module_args": remove_values(args, secrets) if secrets else args}
        return result
