"""The control machine's cache folder (source hashes, edit results, release files and plans).

Losing it only costs time; trusting it must cost nothing more. Every folder of it is this
user's own: created 0700, and refused (UsageError: one line naming the folder and its owner)
when it belongs to another user or another user could write in it, or in a folder above it.
Entries are written 0600, atomically, and read only when this user owns them; what an entry
says is checked again by its reader (run/steps/edit_cache.py, commands/releasetest/outcome_cache.py).
"""

from __future__ import annotations

import json
import os
import secrets
import stat
from pathlib import Path
from typing import Any

from patchkit.base.errors import UsageError

# The folders patchkit keeps under the cache root: checked before a command does anything.
FOLDERS = ("edits", "release-plans", "release-files", "wheels")
MAX_ENTRY_BYTES = 64 << 20  # an edited file of a release is far smaller; more is not an entry of ours


def cache_dir() -> Path:
    return Path(os.environ.get("PATCHKIT_CACHE_DIR") or Path.home() / ".cache" / "patchkit")


def _owner(uid: int) -> str:
    import pwd

    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _refuse(path: Path, why: str) -> UsageError:
    return UsageError(f"cache folder {path} {why}: patchkit keeps no cache there; nothing done "
                      "(remove it, or point PATCHKIT_CACHE_DIR at a folder of your own)")


def _check_above(root: Path) -> None:
    """The folders above the cache root: whoever may rename or replace an entry of one of them
    decides what the cache is. Each is this user's or root's, and one others can write in is sticky
    (/tmp: they cannot move what is ours)."""
    me = os.geteuid()
    for folder in Path(os.path.abspath(root)).parents:
        try:
            st = os.stat(folder)
        except OSError:
            continue  # not there yet: created below, by this user
        if st.st_uid not in (me, 0):
            raise _refuse(folder, f"is owned by {_owner(st.st_uid)}, not by this user ({_owner(me)})")
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            raise _refuse(folder, f"(owner {_owner(st.st_uid)}) is writable by other users and not sticky")


def check_folder(path: Path) -> None:
    """UsageError unless `path`, when it exists, is a folder of this user's that no one else can
    write in. A symlink is followed only when it is this user's (or root's) own."""
    me = os.geteuid()
    try:
        link = os.lstat(path)
        st = os.stat(path) if stat.S_ISLNK(link.st_mode) else link
    except FileNotFoundError:
        return
    except OSError as exc:
        raise _refuse(path, f"cannot be read ({exc.strerror})") from None
    if stat.S_ISLNK(link.st_mode) and link.st_uid not in (me, 0):
        raise _refuse(path, f"is a symlink owned by {_owner(link.st_uid)}, not by this user ({_owner(me)})")
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(path, "is not a folder")
    if st.st_uid != me:
        raise _refuse(path, f"is owned by {_owner(st.st_uid)}, not by this user ({_owner(me)})")
    if st.st_mode & 0o022:
        raise _refuse(path, f"(owner {_owner(st.st_uid)}) is writable by other users (mode {st.st_mode & 0o777:o})")


def check() -> None:
    """The cache as it is, before a command uses it (nothing is created): UsageError if any of its
    folders is not this user's alone."""
    root = cache_dir()
    _check_above(root)
    check_folder(root)
    for name in FOLDERS:
        check_folder(root / name)


def folder(*parts: str) -> Path:
    """cache_dir()/parts..., each folder on the way created 0700 or checked (check_folder)."""
    path = cache_dir()
    _check_above(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for part in ("", *parts):
        path = path / part if part else path
        if part in (".", "..") or "/" in part:
            raise UsageError(f"cache folder {path}: {part!r} is not a folder name")
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            raise _refuse(path, f"cannot be created ({exc.strerror})") from None
        check_folder(path)
    return path


def write_bytes(path: Path, data: bytes) -> None:
    """A cache file, 0600, written whole or not at all (temp file + rename); never through a symlink.
    The caller got path.parent from folder()."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def read_bytes(path: Path) -> bytes | None:
    """A cache file this user wrote (owned by them, a regular file, no one else can write it);
    None when there is none or it is not such a file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            return None
        if st.st_size > MAX_ENTRY_BYTES:
            return None
        try:
            return handle.read(MAX_ENTRY_BYTES + 1)
        except OSError:
            return None


def write_json_quietly(path: Path, data: Any) -> None:
    """Best effort: a cache we cannot write only costs time. Its folder is checked (folder())."""
    try:
        folder(*path.relative_to(cache_dir()).parent.parts)
        write_bytes(path, json.dumps(data).encode())
    except (OSError, ValueError, UsageError):
        pass


def read_json(path: Path) -> Any:
    """What write_json_quietly wrote, or None (absent, not this user's, not JSON, its folder not trusted)."""
    try:
        folder_of = path.relative_to(cache_dir()).parent.parts
        check_folder(cache_dir().joinpath(*folder_of))
    except (ValueError, UsageError):
        return None
    data = read_bytes(path)
    if data is None:
        return None
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


KEY_FILE = "entries.key"
_keys: dict[str, bytes | None] = {}  # cache root -> its key, read once per process


def _key() -> bytes | None:
    """This user's secret key for the cache's entries (created once, 0600), None when there can be
    none. A reader trusts an entry only with this key's seal: an entry someone wrote without the
    key (by hand, by a script, by another user) is never used, whatever hashes it carries."""
    try:
        path = folder() / KEY_FILE
    except (OSError, UsageError):
        return None
    for _ in range(2):
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            tmp = path.with_name(f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
            try:
                write_bytes(tmp, secrets.token_bytes(32))
                os.link(tmp, path)  # published whole, and only once: a second writer reads the first's
            except FileExistsError:
                continue
            except OSError:
                return None
            finally:
                tmp.unlink(missing_ok=True)
            continue
        except OSError:
            return None
        key = read_bytes(path)
        # Readable by others, or not this user's: sealing with it would prove nothing.
        return key if key is not None and len(key) == 32 and not st.st_mode & 0o077 else None
    return None


def seal(*parts: str) -> str | None:
    """The keyed hash (HMAC-SHA256) of `parts`, which a later reader recomputes to trust an
    entry; None when this user has no key (then nothing is cached)."""
    import hashlib
    import hmac

    root = str(cache_dir())
    key = _keys[root] if root in _keys else _keys.setdefault(root, _key())
    if key is None:
        return None
    return hmac.new(key, json.dumps(parts).encode(), hashlib.sha256).hexdigest()


def sealed(mac: object, *parts: str) -> bool:
    """Whether `mac` is the seal of `parts` with this user's key."""
    import hmac

    expected = seal(*parts)
    return expected is not None and isinstance(mac, str) and hmac.compare_digest(mac, expected)
