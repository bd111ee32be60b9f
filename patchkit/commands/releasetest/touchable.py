"""The files of a release a patch step can touch: all `patchkit test` keeps of a wheel.

That is what the host agent reads when it plans the step: the package's version file (the
agent's `package_version` looks at `_version.py`, `version.py`, `__init__.py`), every
`modules` alternative (as `a/b.py` or `a/b/__init__.py`) with the `__init__.py`s on the
way to it, and every file a `diff` edit names.
"""

from __future__ import annotations

from patchkit.run.steps.patch import PatchStep

VERSION_FILES = ("_version.py", "version.py", "__init__.py")  # as the agent looks for them


def touchable_paths(patch: PatchStep) -> list[str]:
    """Paths relative to a site-packages folder (`vllm/config/speculative.py`), sorted."""
    paths = {f"{patch.package}/{name}" for name in VERSION_FILES}
    for module in patch.modules:
        parts = module.split(".")
        for depth in range(1, len(parts)):
            paths.add("/".join(parts[:depth]) + "/__init__.py")
        base = "/".join(parts)
        paths.update((base + ".py", base + "/__init__.py"))
    if patch.edit.diff is not None:
        for rel, _module, _patch in patch.edit.diff.targets():
            if _is_plain_relative(rel):
                paths.add(rel)
    return sorted(paths)


def _is_plain_relative(rel: str) -> bool:
    """A path that stays inside the folder it is joined to (a diff's names come from the user)."""
    parts = rel.split("/")
    return bool(rel) and not rel.startswith("/") and all(p not in ("", ".", "..") for p in parts)
