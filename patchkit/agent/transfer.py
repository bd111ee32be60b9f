"""Host-side file sync for the deploy step (stdlib only, Python >= 3.8).

Shipped inside the agent bundle (see client.agent_source): functions here become ops
of the host agent. Data arrives on the agent's own stdin, right after the request
line, so a deploy needs no second connection, no SFTP subsystem, and honours
`become` exactly like every other op.
"""

import hashlib
import json
import os
import shutil
import stat
import tempfile

PART_SUFFIX = ".patchkit-part"
CHUNK = 1 << 20


class TransferRefused(Exception):
    """Reported to the control side as a refusal with this message."""


def _sha256_path(path, limit=None):
    h = hashlib.sha256()
    remaining = limit
    with open(path, "rb") as f:
        while remaining is None or remaining > 0:
            chunk = f.read(CHUNK if remaining is None else min(CHUNK, remaining))
            if not chunk:
                break
            h.update(chunk)
            if remaining is not None:
                remaining -= len(chunk)
    return h.hexdigest()


def _inside(root, rel):
    """dest/rel, refusing anything that would leave dest (.., absolute paths)."""
    root = os.path.abspath(os.path.expanduser(root))
    path = os.path.abspath(os.path.join(root, rel))
    if path != root and not path.startswith(root + os.sep):
        raise TransferRefused("%s leaves the destination %s" % (rel, root))
    return path


def _part_path(final):
    folder, name = os.path.split(final)
    return os.path.join(folder, "." + name + PART_SUFFIX)


def _load_cache(cache_file):
    try:
        with open(cache_file) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _save_cache(cache_file, cache):
    folder = os.path.dirname(cache_file)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".hashcache.")
    with os.fdopen(fd, "w") as f:
        json.dump(cache, f)
    os.chmod(tmp, 0o600)
    os.replace(tmp, cache_file)


def _cached_sha(cache, path, st, verify_all):
    entry = cache.get(path)
    if entry and not verify_all and entry[0] == st.st_size and entry[1] == st.st_mtime_ns:
        return entry[2]
    digest = _sha256_path(path)
    cache[path] = [st.st_size, st.st_mtime_ns, digest]
    return digest


def op_manifest(dest, cache_file, verify_all=False):
    """What is at dest: per relative path size, sha256 and mode; unfinished parts too."""
    dest = os.path.abspath(os.path.expanduser(dest))
    cache_file = os.path.abspath(os.path.expanduser(cache_file))
    if not os.path.exists(dest):
        return {"exists": False, "is_dir": False, "files": {}, "parts": {}}
    cache = _load_cache(cache_file)
    files, parts = {}, {}
    if os.path.isfile(dest):
        st = os.stat(dest)
        files[os.path.basename(dest)] = {"size": st.st_size, "sha256": _cached_sha(cache, dest, st, verify_all),
                                         "mode": stat.S_IMODE(st.st_mode)}
    else:
        for folder, dirs, names in os.walk(dest):
            dirs.sort()
            for name in sorted(names):
                path = os.path.join(folder, name)
                st = os.lstat(path)
                if not stat.S_ISREG(st.st_mode):
                    continue
                rel = os.path.relpath(path, dest).replace(os.sep, "/")
                if name.startswith(".") and name.endswith(PART_SUFFIX):
                    parts[rel] = st.st_size
                    continue
                files[rel] = {"size": st.st_size, "sha256": _cached_sha(cache, path, st, verify_all),
                              "mode": stat.S_IMODE(st.st_mode)}
    _save_cache(cache_file, cache)
    return {"exists": True, "is_dir": os.path.isdir(dest), "files": files, "parts": parts}


def op_part_info(dest, rel, prefix_len=None):
    """Size of an interrupted transfer's part file, and the sha256 of its first prefix_len bytes."""
    part = _part_path(_inside(dest, rel))
    if not os.path.isfile(part):
        return {"size": 0, "sha256": None}
    size = os.path.getsize(part)
    n = size if prefix_len is None else min(size, prefix_len)
    return {"size": n, "sha256": _sha256_path(part, n)}


def op_receive_file(stdin, dest, rel, offset, length, expected_sha256, mode, backup_path, cache_file):
    """Read `length` bytes from stdin into dest/rel's part file from `offset`, verify the
    whole file's hash, back up what it replaces, then rename it into place."""
    final = _inside(dest, rel)
    folder = os.path.dirname(final)
    os.makedirs(folder, exist_ok=True)
    part = _part_path(final)
    with open(part, "r+b" if (offset and os.path.exists(part)) else "wb") as f:
        f.truncate(offset)
        f.seek(offset)
        remaining = length
        while remaining > 0:
            chunk = stdin.read(min(CHUNK, remaining))
            if not chunk:
                f.flush()
                raise TransferRefused("%s: stream ended after %d of %d bytes" % (rel, length - remaining, length))
            f.write(chunk)
            remaining -= len(chunk)
        f.flush()
        os.fsync(f.fileno())
    got = _sha256_path(part)
    if got != expected_sha256:
        os.unlink(part)
        raise TransferRefused("%s arrived with sha256 %s, expected %s; discarded" % (rel, got[:12], expected_sha256[:12]))
    before = None
    if os.path.isfile(final):
        before = _sha256_path(final)
        os.makedirs(os.path.dirname(backup_path), mode=0o700, exist_ok=True)
        shutil.copyfile(final, backup_path)
        os.chmod(backup_path, 0o600)
    else:
        backup_path = None
    os.chmod(part, mode)
    os.replace(part, final)
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    cache_file = os.path.abspath(os.path.expanduser(cache_file))
    cache = _load_cache(cache_file)
    st = os.stat(final)
    cache[final] = [st.st_size, st.st_mtime_ns, got]
    _save_cache(cache_file, cache)
    return {"path": final, "sha256": got, "sha256_before": before, "backup": backup_path}


def op_remove_file(path, expected_sha256, force=False):
    """Remove a file a deploy created, only if it is still what the deploy wrote."""
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(path):
        return {"removed": False, "already": True}
    current = _sha256_path(path)
    if current != expected_sha256 and not force:
        raise TransferRefused("%s drifted: it hashes to %s, not %s as patchkit left it; refusing to remove "
                              "(--force removes anyway)" % (path, current[:12], expected_sha256[:12]))
    os.unlink(path)
    return {"removed": True, "already": False}


def op_read_checkpoint(path):
    return read_checkpoint(os.path.abspath(os.path.expanduser(path)))  # noqa: F821 - from the bundled reader
