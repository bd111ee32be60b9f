"""What `patchkit test` keeps of a release for a step it plans there: the files the step reads.

A kind that can be planned on a release's files alone says so with `release_reads` (kind.py):
its package, its range, and the paths it reads, relative to a site-packages folder. A `*` in a
path matches within one folder (`sglang/srt/models/*.py`). The package's version file comes
along (the agent's `package_version` reads `_version.py`, `version.py`, `__init__.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

VERSION_FILES = ("_version.py", "version.py", "__init__.py")  # as the agent looks for them


@dataclass(frozen=True)
class ReleaseReads:
    package: str
    versions: str | None  # the step's range (a specifier), None: any release
    paths: tuple[str, ...]  # sorted; may hold `*` patterns
    refused: str = "cannot be patched"  # what a failed outcome means, in the release test's verdict
    ok: str | None = "already in place"  # what an ok outcome means; None: the outcome's own message


def with_version_files(package: str, paths: set[str]) -> tuple[str, ...]:
    return tuple(sorted(paths | {f"{package}/{name}" for name in VERSION_FILES}))


def is_plain_relative(rel: str) -> bool:
    """A path that stays inside the folder it is joined to (a recipe's paths come from the user)."""
    parts = rel.split("/")
    return bool(rel) and not rel.startswith("/") and all(p not in ("", ".", "..") for p in parts)


def is_pattern(rel: str) -> bool:
    return any(c in rel for c in "*?[")


def matches(member: str, pattern: str) -> bool:
    """Does a release's member match a path pattern (a `*` never crosses a folder)?"""
    from fnmatch import fnmatchcase

    return member.count("/") == pattern.count("/") and fnmatchcase(member, pattern)


def expand(wanted: list[str], members: list[str] | set[str]) -> list[str]:
    """The wanted paths with each pattern replaced by the members it matches."""
    out: list[str] = []
    for rel in wanted:
        out += sorted(m for m in members if matches(m, rel)) if is_pattern(rel) else [rel]
    return out


def expand_in(root: Path, wanted: list[str]) -> list[str]:
    """The wanted paths with each pattern replaced by the files under root it matches."""
    out: list[str] = []
    for rel in wanted:
        out += sorted(str(p.relative_to(root)) for p in root.glob(rel) if p.is_file()) if is_pattern(rel) else [rel]
    return out
