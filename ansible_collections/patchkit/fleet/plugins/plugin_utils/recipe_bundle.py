# Copyright: patchkit contributors
# Controller side: a recipe kept on the host (remote_src) is fetched before patchkit reads it.
# patchkit resolves some paths of a recipe relative to its folder (a diff or codemod file, a
# prompts file, a deploy `src`), so those files are fetched with it, at the same relative paths.
"""The files a recipe names relative to its folder, and the error of a recipe that cannot be read."""

import os


class BundleError(Exception):
    """The recipe (or a file it names) cannot be read: the task fails with this message."""


def referenced_paths(doc):
    """Relative paths a recipe names (untemplated ones; a `{{ }}` path needs the `files` option)."""
    found = []
    steps = doc.get("steps") if isinstance(doc, dict) else None
    for step in steps if isinstance(steps, list) else []:
        if not isinstance(step, dict):
            continue
        edit = _get(step, "patch", "edit")
        for kind in ("diff", "codemod"):
            found.append(_get(edit, kind, "file"))
        found.append(_get(step, "launch", "spec_decode", "prompts_file"))
        found.append(_get(step, "deploy", "src"))
    return [p for p in found if isinstance(p, str) and p and "{{" not in p and not os.path.isabs(p)]


def codemod_files(doc):
    """The codemod files a recipe names: Python that patchkit runs where it runs, the controller."""
    steps = doc.get("steps") if isinstance(doc, dict) else None
    found = [_get(step, "patch", "edit", "codemod", "file") for step in (steps if isinstance(steps, list) else [])]
    return [p for p in found if p]


def _get(node, *keys):
    for key in keys:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node
