"""Manifests of a deploy source on the control machine: relative path, size, sha256, mode.

Hashing a multi-GB checkpoint on every run would dominate a no-op deploy, so hashes
are cached by (size, mtime_ns) in the control machine's cache folder, the way the
host keeps its own cache in the journal.
"""

from __future__ import annotations

import hashlib
import json
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchkit.base.cache import cache_dir, read_json, seal, sealed, write_json_quietly
from patchkit.base.errors import UsageError


@dataclass(frozen=True)
class FileEntry:
    rel: str
    size: int
    sha256: str
    mode: int


def sha256_of(path: Path, limit: int | None = None) -> str:
    """sha256 of the file (of its first `limit` bytes, if given): what the host's
    sha256_file computes for the same bytes (the resume check compares the two)."""
    h = hashlib.sha256()
    remaining = limit
    with open(path, "rb") as f:
        while remaining is None or remaining > 0:
            chunk = f.read(1 << 20 if remaining is None else min(1 << 20, remaining))
            if not chunk:
                break
            h.update(chunk)
            if remaining is not None:
                remaining -= len(chunk)
    return h.hexdigest()


def cache_file() -> Path:
    return cache_dir() / "source-hashes.json"


def source_manifest(src: Path, verify_all: bool = False) -> list[FileEntry]:
    """Every regular file under `src` (or `src` itself), symlinks refused (they could point anywhere)."""
    if not src.exists():
        raise UsageError(f"deploy source {src} does not exist")
    cache_path = cache_file()
    cache = _kept_hashes(cache_path)
    entries: list[FileEntry] = []
    files = [src] if src.is_file() else sorted(p for p in src.rglob("*") if not p.is_dir() or p.is_symlink())
    for path in files:
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            raise UsageError(f"deploy source {path} is a symlink; patchkit copies regular files only")
        if not stat.S_ISREG(st.st_mode):
            continue
        rel = path.name if path == src else path.relative_to(src).as_posix()
        key = str(path.resolve())
        cached = cache.get(key)
        if (isinstance(cached, list) and len(cached) == 3 and isinstance(cached[2], str) and not verify_all
                and cached[0] == st.st_size and cached[1] == st.st_mtime_ns):
            digest = cached[2]
        else:
            digest = sha256_of(path)
            cache[key] = [st.st_size, st.st_mtime_ns, digest]
        entries.append(FileEntry(rel, st.st_size, digest, stat.S_IMODE(st.st_mode)))
    mac = seal("source-hashes", json.dumps(cache, sort_keys=True))
    if mac is not None:
        write_json_quietly(cache_path, {"hashes": cache, "seal": mac})
    return entries


def _kept_hashes(path: Path) -> dict[str, list[Any]]:
    """The hashes kept by an earlier run, when this user's key sealed them (else none: each file
    is hashed again; a hand-edited digest would make a deploy verify other bytes than it copied)."""
    data = read_json(path)
    hashes = data.get("hashes") if isinstance(data, dict) else None
    if not isinstance(hashes, dict) or not sealed(data.get("seal"), "source-hashes", json.dumps(hashes, sort_keys=True)):
        return {}
    return hashes
