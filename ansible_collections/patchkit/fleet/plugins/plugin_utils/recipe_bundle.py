# Copyright: patchkit contributors
# Controller side: what the action plugin sends with a recipe. patchkit resolves some paths of
# a recipe relative to its folder (a diff or codemod file, a prompts file, a deploy `src`);
# on the target the recipe sits in a temp folder, so those files go with it, at the same
# relative paths. Nothing outside the recipe's folder is sent (patchkit refuses such paths
# too), and a symlink is followed only when it stays inside that folder.
"""Collect a recipe and the files it names relative to its folder, for the patchkit module."""

import base64
import os

import yaml

LIMIT_BYTES = 32 * 1024 * 1024  # module arguments travel as one JSON document


class BundleError(Exception):
    """The recipe cannot be sent: the task fails with this message."""


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


def _get(node, *keys):
    for key in keys:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node


def bundle(recipe_path, extra=()):
    """(recipe bytes as base64, {relative path: base64 bytes}) for the recipe at recipe_path."""
    try:
        with open(recipe_path, "rb") as f:
            text = f.read()
    except OSError as exc:
        raise BundleError(f"cannot read recipe {recipe_path}: {exc.strerror or exc}")
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        doc = None  # patchkit reports the YAML problem with its line and column
    base = os.path.realpath(os.path.dirname(os.path.abspath(recipe_path)))
    files, total = {}, len(text)
    for ref in list(referenced_paths(doc)) + list(extra):
        for rel, path in _files_under(base, ref):
            if rel in files:
                continue
            with open(path, "rb") as f:
                data = f.read()
            total += len(data)
            if total > LIMIT_BYTES:
                raise BundleError(
                    f"the recipe's files are more than {LIMIT_BYTES // (1024 * 1024)} MiB (at {rel}): too large to "
                    "send with the task; put them on the target and use remote_src")
            files[rel] = base64.b64encode(data).decode("ascii")
    return base64.b64encode(text).decode("ascii"), files


def _files_under(base, ref):
    """(path relative to base, real path) of each regular file of `ref`, a file or a folder,
    whose real path is inside base; missing ones are patchkit's to report on the target."""
    top = os.path.normpath(os.path.join(base, ref))
    if not _inside(os.path.realpath(top), base):
        return []  # patchkit says "outside the recipe's folder" on the target
    if os.path.isfile(top):
        return [(os.path.relpath(top, base), os.path.realpath(top))]
    out = []
    for folder, dirs, names in os.walk(top):  # followlinks=False: a symlinked folder is not entered
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(folder, name)
            real = os.path.realpath(path)
            if _inside(real, base) and os.path.isfile(real):
                out.append((os.path.relpath(path, base), real))
    return out


def _inside(path, base):
    return path == base or path.startswith(base + os.sep)
