# Copyright: patchkit contributors
# Runs on the controller for every patchkit.fleet.patchkit task: reads the recipe where the
# playbook is (like copy's src), sends it and its files as module arguments, then runs the
# module on the target through the task's connection.
"""Action plugin of patchkit.fleet.patchkit: send the controller's recipe to the module."""

import os

from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase

from ansible_collections.patchkit.fleet.plugins.plugin_utils.recipe_bundle import (
    BundleError,
    bundle,
)

INTERNAL = ("_recipe_text", "_recipe_name", "_recipe_origin", "_recipe_files", "_host_name")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        given = [key for key in args if key in INTERNAL]
        if given:
            return dict(result, failed=True, msg="{}: set by the action plugin, not a task option".format(", ".join(given)))
        if not args.get("recipe"):
            return dict(result, failed=True, msg="recipe is required")
        if not self._bool(args.get("remote_src", False)):
            try:
                path = self._find_needle("files", args["recipe"])
                text, files = bundle(path, args.get("files") or [])
            except (AnsibleError, BundleError) as exc:
                return dict(result, failed=True, msg="recipe {}: {}".format(args["recipe"], exc))
            args.update(_recipe_text=text, _recipe_name=os.path.basename(path), _recipe_origin=path,
                        _recipe_files=files)
        args["_host_name"] = task_vars.get("inventory_hostname")
        result.update(self._execute_module(module_name="patchkit.fleet.patchkit", module_args=args,
                                           task_vars=task_vars))
        # the recipe text and its files are ours, not the user's options: keep them out of -v output
        module_args = result.get("invocation", {}).get("module_args")
        if isinstance(module_args, dict):
            for key in INTERNAL:
                module_args.pop(key, None)
        return result

    @staticmethod
    def _bool(value):
        from ansible.module_utils.parsing.convert_bool import boolean

        return boolean(value, strict=False)
