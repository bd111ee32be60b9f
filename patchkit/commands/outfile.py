"""Files a command writes for the user (review pages, captured recipes and their patches).

Checked before any host is contacted (`check_output`: a usage error, exit 2), then written
whole or not at all (`write_output`): a new file in the target's folder, reached through a
descriptor of that folder, then renamed over the target. A symlink at the target is refused,
never followed and never replaced: in a shared folder it is how another user would steer
root's write onto a file of their choosing, and a link someone made on purpose is theirs to
remove. The rename itself never follows one either, so a link planted after the check is
still not written through (it is refused again just before; what appears in between is
replaced, not followed).
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path

from patchkit.base.errors import PatchkitError, UsageError


class OutputError(PatchkitError):
    """An output file could not be written; the message names it and why. Nothing was left."""


def _refusal(path: str, flag: str, replace: bool) -> str | None:
    """Why `path` may not be written, as far as can be told without writing; else None."""
    shown = f"{flag} {path}" if flag else path
    if not path:
        return f"{flag or 'output'} '': an empty path names no file"
    if path.endswith(os.sep) or Path(path).name in ("", ".", ".."):
        return f"{shown}: names a folder; give the file to write"
    target = Path(path)
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        return f"{shown}: cannot look at it: {exc.strerror}"
    if info is not None:
        if stat.S_ISLNK(info.st_mode):
            return (f"{shown} is a symlink (to {os.readlink(target)}): patchkit does not write through a symlink, "
                    "nor replace one; remove it or pick another path")
        if stat.S_ISDIR(info.st_mode):
            return f"{shown}: is a folder; give the file to write in it"
        if not stat.S_ISREG(info.st_mode):
            return f"{shown}: not a regular file (a device, pipe or socket); give a file's path"
        if not replace:
            return f"{shown} already exists: remove it or pick another path"
    if not target.parent.is_dir():
        return f"{shown}: no folder {target.parent} to write it in"
    return None


def check_output(path: str, flag: str, replace: bool = True) -> None:
    """Before a run: UsageError unless `flag path` can be written (its folder exists and takes a
    new file, it is no folder, symlink or special file; with `replace` False it does not exist)."""
    refused = _refusal(path, flag, replace)
    if refused:
        raise UsageError(refused)
    folder = Path(path).parent
    try:  # what the write will do, tried: a read-only file system, a folder root may not write in
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            probe = _new_file(fd, Path(path).name, 0o600)[1]
            os.unlink(probe, dir_fd=fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot write in {folder}: {exc.strerror}") from None


def _new_file(folder_fd: int, name: str, mode: int) -> tuple[int, str]:
    """A new, empty file beside `name` in the folder: its descriptor and name (never one that
    exists, never through a link)."""
    for _ in range(100):
        temp = f".{name[:200]}.{secrets.token_hex(6)}.tmp"
        try:
            return os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                           dir_fd=folder_fd), temp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", name)


def write_output(path: str | Path, text: str | bytes, flag: str = "", replace: bool = True) -> None:
    """Write `text` (str: as UTF-8; bytes: as they are) to `path` atomically: readers see the old file or the whole new one.

    `replace` False: never over an existing file (a captured recipe someone may have edited).
    A regular file replaced keeps its mode when it is ours; a new one gets the umask's.
    OutputError, one line, if refused or if it fails (then nothing is left behind)."""
    path = str(path)
    refused = _refusal(path, flag, replace)
    if refused:
        raise OutputError(refused)
    target = Path(path)
    try:
        folder = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise OutputError(f"{flag + ' ' if flag else ''}{path}: cannot open its folder: {exc.strerror}") from None
    temp: str | None = None
    try:
        kept: int | None = None  # None: 0666 less the umask, as any new file
        try:
            info = os.stat(target.name, dir_fd=folder, follow_symlinks=False)
            if stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid():
                kept = stat.S_IMODE(info.st_mode)
        except FileNotFoundError:
            pass
        fd, temp = _new_file(folder, target.name, 0o666)
        with os.fdopen(fd, "wb") as f:
            if kept is not None:
                os.fchmod(f.fileno(), kept)
            f.write(text.encode("utf-8") if isinstance(text, str) else text)
            f.flush()
            os.fsync(f.fileno())
        _place(folder, temp, target.name, replace)
        temp = None
        try:
            os.fsync(folder)
        except OSError:  # a folder some file systems cannot sync: the file is written all the same
            pass
    except OSError as exc:
        why = "a file of that name appeared meanwhile" if isinstance(exc, FileExistsError) else exc.strerror or str(exc)
        raise OutputError(f"{flag + ' ' if flag else ''}{path}: cannot write it: {why}; nothing written") from None
    finally:
        if temp is not None:
            try:
                os.unlink(temp, dir_fd=folder)
            except OSError:
                pass
        os.close(folder)


def _place(folder: int, temp: str, name: str, replace: bool) -> None:
    """The written temp file becomes `name`: renamed over it, or (`replace` False) linked where
    nothing is yet (link fails when anything is there, a symlink included) and then unnamed."""
    if replace:
        if _kind(folder, name) not in (None, stat.S_IFREG):
            raise OSError(errno.ELOOP, "a symlink or folder appeared there meanwhile")
        os.replace(temp, name, src_dir_fd=folder, dst_dir_fd=folder)
        return
    try:
        os.link(temp, name, src_dir_fd=folder, dst_dir_fd=folder, follow_symlinks=False)
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK):
            raise
        # a file system without hard links: checked, then renamed (a file made in between is replaced)
        if _kind(folder, name) is not None:
            raise FileExistsError(errno.EEXIST, "exists", name) from None
        os.replace(temp, name, src_dir_fd=folder, dst_dir_fd=folder)
        return
    os.unlink(temp, dir_fd=folder)


def _kind(folder: int, name: str) -> int | None:
    """The file type of `name` in the folder (the link itself for a symlink), None if absent."""
    try:
        return stat.S_IFMT(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return None
