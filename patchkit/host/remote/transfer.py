"""Host-side file sync for the deploy step: an extension of the host agent (core.py).

Sent with the first transfer op of a run and run in the core's namespace: `op`, `Refused`,
`expand`, `sha256_file`, `atomic_write`, the folder descriptor's `locked_folders`, `at` and
`sha256_at`, and CHUNK are the core's; PART_SUFFIX is sent by the
control side (client.SENT_CONSTANTS). Data arrives on the agent's own stdin, right after the
request line, so a deploy needs no second connection, no SFTP subsystem, and honours
`become` exactly like every other op. Stdlib only, Python >= 3.8.
"""

import errno
import hashlib
import json
import mmap
import os
import queue
import stat
import threading

FLUSH_EVERY = 64 << 20
HASH_QUEUE = 4  # chunks waiting for the hasher thread
PIPE_SIZE = 1 << 20
SPLICE_HASH_STEP = 8 << 20  # spliced bytes hashed per hasher request
_DONTNEED = getattr(os, "POSIX_FADV_DONTNEED", None) if hasattr(os, "posix_fadvise") else None


def _inside(root, rel):
    """dest/rel, refusing anything that would leave dest (.., absolute paths)."""
    root = expand(root)
    path = os.path.abspath(os.path.join(root, rel))
    if path != root and not path.startswith(root + os.sep):
        raise Refused("%s leaves the destination %s" % (rel, root))
    return path


def _part_path(final):
    folder, name = os.path.split(final)
    return os.path.join(folder, "." + name + PART_SUFFIX)


def _load_cache(cache_file):
    """The hash cache, read only when it is ours and no other user may write it (open_state_file):
    a planted one would name a file's old hash as current, and the deploy would skip it."""
    try:
        f = open_state_file(cache_file)
        if f is None:
            return {}
        with f:
            cache = json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError):
        return {}
    return cache if isinstance(cache, dict) else {}


def _save_cache(cache_file, cache):
    """A cache lost in a crash is recomputed: atomic, but not worth two fsyncs per file sent."""
    os.makedirs(os.path.dirname(cache_file), mode=0o700, exist_ok=True)
    atomic_write(cache_file, json.dumps(cache).encode(), mode=0o600, durable=False)


def _cached_sha(cache, path, st, verify_all):
    entry = cache.get(path)
    if entry and not verify_all and entry[0] == st.st_size and entry[1] == st.st_mtime_ns:
        return entry[2]
    digest = sha256_file(path)
    cache[path] = [st.st_size, st.st_mtime_ns, digest]
    return digest


@op
def op_manifest(dest, cache_file, verify_all=False):
    """What is at dest: per relative path size, sha256 and mode; unfinished parts too (by the
    relative path of the file they will become)."""
    dest = expand(dest)
    cache_file = expand(cache_file)
    # A single-file deploy's part file sits next to dest, not inside it.
    single_part = _part_path(dest)
    parts = {}
    if not os.path.isdir(dest) and os.path.isfile(single_part):
        parts[os.path.basename(dest)] = os.path.getsize(single_part)
    if not os.path.exists(dest):
        return {"exists": False, "is_dir": False, "files": {}, "parts": parts, "dest": dest}
    cache = _load_cache(cache_file)
    known = dict(cache)
    files = {}
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
                if name.startswith(".") and name.endswith(PART_SUFFIX) and len(name) > len(PART_SUFFIX) + 1:
                    # keyed by the file it will become: .NAME.patchkit-part -> NAME
                    final = os.path.join(folder, name[1:-len(PART_SUFFIX)])
                    parts[os.path.relpath(final, dest).replace(os.sep, "/")] = st.st_size
                    continue
                rel = os.path.relpath(path, dest).replace(os.sep, "/")
                files[rel] = {"size": st.st_size, "sha256": _cached_sha(cache, path, st, verify_all),
                              "mode": stat.S_IMODE(st.st_mode)}
    if cache != known:  # a no-op redeploy (every hash known) writes nothing on the host
        _save_cache(cache_file, cache)
    return {"exists": True, "is_dir": os.path.isdir(dest), "files": files, "parts": parts, "dest": dest}


@op
def op_part_info(dest, rel, prefix_len=None):
    """Size of an interrupted transfer's part file, and the sha256 of its first prefix_len bytes."""
    part = _part_path(_inside(dest, rel))
    if not os.path.isfile(part):
        return {"size": 0, "sha256": None}
    size = os.path.getsize(part)
    n = size if prefix_len is None else min(size, prefix_len)
    return {"size": n, "sha256": sha256_file(part, n)}


class _Hasher:
    """Hashes a file's chunks in a thread, so the agent keeps draining its stdin meanwhile.

    hashlib releases the GIL for buffers over 2 KiB, as reads and writes do: on a second core
    the hash of one chunk overlaps the read and write of the next. At most HASH_QUEUE chunks
    wait (bytes objects, never reused); `hexdigest` waits for all of them.
    """

    def __init__(self, digest, start=0, dropper=None):
        self._digest = digest
        self._end = start  # the file offset up to which the digest has the bytes
        self._dropper = dropper
        self._queue = queue.Queue(HASH_QUEUE)
        self._error = None
        self._thread = threading.Thread(target=self._run, name="patchkit-hasher", daemon=True)
        self._thread.start()

    def update(self, chunk):
        self._queue.put(chunk)

    def update_from_file(self, fd, offset, length):
        """Hash bytes that are already in the file (spliced there), read from the page cache."""
        self._queue.put((fd, offset, length))

    def _run(self):
        while True:
            chunk = self._queue.get()
            if chunk is None:
                return
            if self._error is None:
                try:
                    if isinstance(chunk, tuple):
                        _hash_region(self._digest, *chunk)
                        self._end = chunk[1] + chunk[2]
                    else:
                        self._digest.update(chunk)
                        self._end += len(chunk)
                    if self._dropper is not None:
                        self._dropper.hashed(self._end)
                except Exception as exc:  # reported by hexdigest
                    self._error = exc

    def stop(self):
        """Idempotent; after it, the digest has every chunk given to `update`."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    def hexdigest(self):
        self.stop()
        if self._error is not None:
            raise self._error
        return self._digest.hexdigest()


def _hash_region(digest, fd, offset, length):
    """digest.update with length bytes of the file at offset: mapped rather than copied, or
    read where the file system cannot map files."""
    start = offset - offset % mmap.ALLOCATIONGRANULARITY
    try:
        mapped = mmap.mmap(fd, offset - start + length, access=mmap.ACCESS_READ, offset=start)
    except (OSError, ValueError):
        while length > 0:
            block = os.pread(fd, min(CHUNK, length), offset)
            if not block:
                raise Refused("the part file shrank while it was hashed")
            digest.update(block)
            offset += len(block)
            length -= len(block)
        return
    try:
        with memoryview(mapped) as view:
            digest.update(view[offset - start:])
    finally:
        mapped.close()


def _pipe_fd(stdin):
    """stdin's file descriptor if the kernel can splice from it (a pipe, os.splice exists)."""
    if not hasattr(os, "splice"):
        return None
    try:
        fd = stdin.fileno()
        return fd if stat.S_ISFIFO(os.fstat(fd).st_mode) else None
    except (AttributeError, OSError, ValueError):
        return None


def _grow_pipe(fd):
    """Let sshd hand over up to 1 MiB per wake-up instead of 64 KiB (best effort)."""
    try:
        import fcntl
        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_SIZE)
    except (ImportError, OSError):
        pass


class _Payload:
    """The `length` bytes that follow a streaming request on stdin, counted as they are taken.

    `drain` skips what is left of them, so after a failure the agent still finds the next
    request line where it starts (the control side may have sent more requests behind it).
    """

    def __init__(self, stdin, length):
        self._stdin = stdin
        self.left = length
        self.pipe = _pipe_fd(stdin)

    def read(self, n, buffered_only=False):
        """Up to n bytes; with buffered_only, only what stdin holds already (one read if nothing)."""
        read = getattr(self._stdin, "read1", self._stdin.read) if buffered_only else self._stdin.read
        chunk = read(min(n, self.left))
        self.left -= len(chunk)
        return chunk

    def splice_into(self, out, n):
        moved = os.splice(self.pipe, out, min(n, self.left))
        self.left -= moved
        return moved

    def drain(self):
        while self.left > 0 and self.read(CHUNK):
            pass


def _receive(payload, f, offset, flusher, hasher):
    """Move the payload into f (positioned at offset); returns how many bytes came.

    From a pipe (sshd gives the agent one) the bytes go straight into the file with splice(2):
    no copy through Python. The hasher then reads them back from the page cache, so the hash
    is of what landed. Otherwise (no os.splice before Python 3.10, a file system that cannot
    splice) they are read and written.
    """
    done = 0
    if payload.pipe is not None and payload.left > 0:
        # stdin is buffered: what it already holds of the payload goes first, the usual way.
        head = payload.read(CHUNK, buffered_only=True)
        f.write(head)
        f.flush()
        flusher.wrote(len(head))
        hasher.update(head)
        done = _splice(payload, f.fileno(), offset, len(head), flusher, hasher)
    while payload.left > 0:
        chunk = payload.read(CHUNK)
        if not chunk:
            break
        f.write(chunk)
        flusher.wrote(len(chunk))
        hasher.update(chunk)
        done += len(chunk)
    return done


def _splice(payload, out, offset, done, flusher, hasher):
    """The splice(2) part of _receive; returns how much has arrived (done included)."""
    _grow_pipe(payload.pipe)
    hashed = done
    try:
        while payload.left > 0:
            n = payload.splice_into(out, CHUNK)
            if not n:
                break
            done += n
            flusher.wrote(n)
            if done - hashed >= SPLICE_HASH_STEP:
                hasher.update_from_file(out, offset + hashed, done - hashed)
                hashed = done
    except OSError as exc:
        if done > hashed or exc.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise
    if done > hashed:
        hasher.update_from_file(out, offset + hashed, done - hashed)
    return done


class _PageDropper:
    """Hands a file's page-cache pages back to the kernel once they are both on disk and hashed.

    Why: a deploy is a stream of gigabytes written once. Kept in the page cache, every byte
    takes a newly allocated page, which evicts as much of what the host had cached (on a model
    server, the weights its next restart reads) and, on VMs that return free memory to the
    hypervisor (free page reporting, ballooning), faults each page back in on its first write:
    measured here as most of the agent's CPU (bench/DEPLOY.md). Dropped behind the stream, a
    deploy cycles through about 2 x FLUSH_EVERY of pages however large the file is. The cost:
    the deployed file is read from disk by whoever loads it next (vLLM after its restart: one
    sequential read, small beside the restart) and that read is of what is on disk.
    Integrity does not depend on it: only pages already hashed are dropped (the hash is of the
    bytes that landed, read back from the file, and checked before the rename as before), and
    POSIX_FADV_DONTNEED never discards a dirty page. Advice only: where the call is missing
    (not Linux, Python builds without it) or fails, nothing is dropped and nothing else changes.
    """

    def __init__(self, fd, start):
        self._fd = fd
        self._dropped = self._synced = self._hashed = start
        self._lock = threading.Lock()  # called from the flusher and the hasher thread

    def synced(self, end):
        with self._lock:
            self._synced = max(self._synced, end)
            self._drop()

    def hashed(self, end):
        with self._lock:
            self._hashed = max(self._hashed, end)
            self._drop()

    def _drop(self):
        end = min(self._synced, self._hashed)
        if _DONTNEED is None or end <= self._dropped:
            return
        try:
            os.posix_fadvise(self._fd, self._dropped, end - self._dropped, _DONTNEED)
        except OSError:
            return
        self._dropped = end


class _Flusher:
    """Writes a file's data back to disk while the rest of it still arrives.

    Each time another FLUSH_EVERY bytes were written, an fdatasync starts in a thread (unless
    the last one still runs). It releases the GIL, so writeback overlaps the stream and the
    fsync before the rename only has the tail left to flush. What it made durable is told to
    the dropper (the file offset written up to when the fdatasync started).
    """

    def __init__(self, fd, start=0, dropper=None):
        self._fd = fd
        self._every = FLUSH_EVERY
        self._unflushed = 0
        self._written = start  # file offset the data written so far reaches
        self._dropper = dropper
        self._thread = None
        self._error = None

    def wrote(self, n):
        self._unflushed += n
        self._written += n
        if self._unflushed >= self._every and (self._thread is None or not self._thread.is_alive()):
            self._unflushed = 0
            self._thread = threading.Thread(target=self._flush, args=(self._written,), name="patchkit-flusher",
                                            daemon=True)
            self._thread.start()

    def _flush(self, end):
        try:
            getattr(os, "fdatasync", os.fsync)(self._fd)
        except OSError as exc:
            self._error = exc
            return
        if self._dropper is not None:
            self._dropper.synced(end)

    def wait(self):
        """Before the fd is closed (a late fdatasync would hit whatever file reuses it)."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            raise self._error


@op(mutating=True, streaming=True)
def op_receive_file(stdin, dest, rel, offset, length, expected_sha256, mode, backup_path, cache_file):
    """Read `length` bytes from stdin into dest/rel's part file from `offset`, verify the
    whole file's hash, back up what it replaces, then rename it into place. Whatever fails,
    exactly `length` bytes of stdin are consumed (or all there is)."""
    payload = _Payload(stdin, length)
    try:
        return _receive_file(payload, dest, rel, offset, expected_sha256, mode, backup_path, cache_file)
    except BaseException:
        payload.drain()
        raise


def _open_folder(root, parts, created_dirs):
    """A descriptor of root/parts..., each folder inside root opened without following a
    symlink and made (0777 less umask) where missing, noted in created_dirs (deepest first):
    the core's open_below, the one walk a diff's new folders take too. root and its missing
    parents are the user's path, made as named."""
    missing = root
    while not os.path.isdir(missing) and os.path.dirname(missing) != missing:
        created_dirs.append(missing)  # dest and its missing parents: the user's path, made as named
        missing = os.path.dirname(missing)
    os.makedirs(root, exist_ok=True)
    return open_below(root, os.path.join(root, *parts), created_dirs)


def _regular_or_absent(folder_fd, name, path):
    """lstat of name in the folder, or None; a symlink or other non-file there is refused."""
    try:
        st = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        kind = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a regular file"
        raise Refused("%s is %s; refusing to replace it (a deploy writes regular files only)" % (path, kind))
    return st


def _receive_file(payload, dest, rel, offset, expected_sha256, mode, backup_path, cache_file):
    length = payload.left
    final = _inside(dest, rel)
    root = expand(dest)
    parts = os.path.relpath(final, root).split(os.sep)
    name = parts.pop()
    created_dirs = []  # deepest first: what undoing this file removes again, if empty
    folder = os.path.dirname(final)
    folder_fd = _open_folder(root, parts, created_dirs)
    try:
        part_name = "." + name + PART_SUFFIX
        _regular_or_absent(folder_fd, name, final)
        resuming = bool(offset) and _regular_or_absent(folder_fd, part_name, os.path.join(folder, part_name)) is not None
        try:
            got = _fill_part(payload, folder_fd, part_name, resuming, offset, length, rel)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):  # a full disk: the part file would keep it full
                _unlink_quietly(part_name, folder_fd)
            raise
        if got != expected_sha256:
            _unlink_quietly(part_name, folder_fd)
            raise Refused("%s arrived with sha256 %s, expected %s; discarded" % (rel, got[:12], expected_sha256[:12]))
        before, mode_before, backup_path = _put_in_place(folder_fd, part_name, name, final, mode, backup_path, rel)
        os.fsync(folder_fd)
        st = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
    finally:
        os.close(folder_fd)
    cache_file = expand(cache_file)
    cache = _load_cache(cache_file)
    cache[final] = [st.st_size, st.st_mtime_ns, got]
    _save_cache(cache_file, cache)
    return {"path": final, "sha256": got, "sha256_before": before, "backup": backup_path,
            "mode_before": mode_before, "created_dirs": created_dirs}


def _fill_part(payload, folder_fd, part_name, resuming, offset, length, rel):
    """The part file, created exclusively (or the verified prefix of an interrupted one kept),
    filled from the payload and fsynced; returns the sha256 of all of it."""
    # Hash as the bytes arrive (plus the resumed prefix, read once): one pass over the data.
    digest = hashlib.sha256()
    if resuming:
        fd = os.open(part_name, os.O_RDWR | os.O_NOFOLLOW, dir_fd=folder_fd)
    else:
        _unlink_quietly(part_name, folder_fd)  # a stale part file; never written through
        fd = os.open(part_name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=folder_fd)
    with os.fdopen(fd, "r+b") as f:  # readable too: the hasher maps spliced bytes
        if resuming:
            remaining_prefix = offset
            while remaining_prefix > 0:
                block = f.read(min(CHUNK, remaining_prefix))
                if not block:
                    break
                digest.update(block)
                remaining_prefix -= len(block)
        dropper = _PageDropper(f.fileno(), offset)
        flusher = _Flusher(f.fileno(), offset, dropper)
        hasher = _Hasher(digest, offset, dropper)
        try:
            f.truncate(offset)
            f.seek(offset)
            arrived = _receive(payload, f, offset, flusher, hasher)
            f.flush()
            if arrived < length:
                raise Refused("%s: stream ended after %d of %d bytes" % (rel, arrived, length))
        finally:
            hasher.stop()
            flusher.wait()
        os.fsync(f.fileno())
    return hasher.hexdigest()


def _unlink_quietly(name, folder_fd):
    try:
        os.unlink(name, dir_fd=folder_fd)
    except OSError:
        pass


def _make_backup_folders(backup_path, rel):
    """The folders of a deploy's backup, STATE/backups/RUN/STEP/ and rel's own, made one by one
    as private folders of ours: a symlink planted on the way is refused, never followed (it would
    steer the backup, and a later restore's bytes, elsewhere)."""
    parts = os.path.normpath(rel).split(os.sep)
    base = os.path.normpath(backup_path)
    for _ in parts:
        base, _tail = os.path.split(base)
    if os.path.join(base, *parts) != os.path.normpath(backup_path) or os.pardir in parts:
        raise Refused("backup %s does not end with the file's path %s; nothing written" % (backup_path, rel))
    backups = os.path.dirname(os.path.dirname(base))  # STATE/backups, above RUN/STEP
    here = backups
    ensure_private_dir(here)
    for part in [os.path.basename(os.path.dirname(base)), os.path.basename(base)] + parts[:-1]:
        here = os.path.join(here, part)
        ensure_private_dir(here)


def _put_in_place(folder_fd, part_name, name, final, mode, backup_path, rel):
    """Back up what final holds (fsynced), then rename the verified part file over it.
    If that fails, the part file (and a backup made for it) goes: the host is as it was."""
    before = mode_before = None
    made_backup = False
    try:
        if _regular_or_absent(folder_fd, name, final) is not None:
            src_fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=folder_fd)
            with os.fdopen(src_fd, "rb") as src:
                mode_before = stat.S_IMODE(os.fstat(src.fileno()).st_mode)
                _make_backup_folders(backup_path, rel)
                made_backup = True
                digest = hashlib.sha256()
                out_fd = os.open(backup_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
                with os.fdopen(out_fd, "wb") as out:
                    for chunk in iter(lambda: src.read(CHUNK), b""):
                        digest.update(chunk)
                        out.write(chunk)
                    out.flush()
                    os.fchmod(out.fileno(), 0o600)
                    os.fsync(out.fileno())  # the backup is durable before the file it saves is replaced
                before = digest.hexdigest()
        else:
            backup_path = None
        os.chmod(part_name, mode, dir_fd=folder_fd, follow_symlinks=False) if _chmod_no_follow() else \
            os.chmod(part_name, mode, dir_fd=folder_fd)
        os.replace(part_name, name, src_dir_fd=folder_fd, dst_dir_fd=folder_fd)
    except (OSError, Refused):  # a refused backup folder too: the host is left as it was
        _unlink_quietly(part_name, folder_fd)
        if made_backup and backup_path:
            try:
                os.unlink(backup_path)
            except OSError:
                pass
        raise
    return before, mode_before, backup_path


def _chmod_no_follow():
    """Linux has no lchmod: chmod with follow_symlinks=False is refused there (the part file
    was created by us, O_EXCL and O_NOFOLLOW, so following is safe)."""
    return os.chmod in os.supports_follow_symlinks


@op(mutating=True)
def op_remove_file(path, expected_sha256, root, force=False, remove_dirs=()):
    """Remove a file a deploy (or a patch's diff) created, only if it is still what it wrote;
    then the folders made for it (`remove_dirs`, deepest first), those left empty.
    `root`: the folder the change was confined to (the core's refuse_leaving_root). The file is
    hashed and removed through its folder's descriptor, held to root as opened (as a patch's
    restore is: no window between the check and the removal), its bytecode with it. The empty
    folders inside root go through their parents' descriptors from root down, no symlink followed
    (the core's remove_empty_folders); those above it (a deploy's dest and its parents, the user's
    path, made as named) by name. Only folders holding path are removed; rmdir removes nothing
    that holds a file."""
    path = expand(path)
    refuse_leaving_root(root, path, "remove")
    removed = False
    if os.path.isdir(os.path.dirname(path)):  # else its folder is gone, and the file with it
        with locked_folders([path], 600) as folders:
            dir_fd = folders.fd(path)
            refuse_leaving_root(root, path, "remove", dir_fd)
            current = sha256_at(path, dir_fd, "remove")
            if current is not None:
                if current != expected_sha256 and not force:
                    raise Refused("%s drifted: it hashes to %s, not %s as patchkit left it; refusing to remove "
                                  "(--force removes anyway)" % (path, current[:12], expected_sha256[:12]))
                os.unlink(at(path, dir_fd), dir_fd=dir_fd)
                if path.endswith(".py"):
                    drop_bytecode(path, dir_fd)
                removed = True
    inside = expand(root) if root is not None else None
    for folder in remove_dirs or ():
        folder = os.path.normpath(expand(folder))
        if root is None or not is_under(path, folder) or folder == path:
            continue  # only folders on the file's own way (held to root above): a record may name any
        if inside is not None and is_under(folder, inside) and folder != inside:
            remove_empty_folders(inside, [folder])
            continue
        try:
            os.rmdir(folder)
        except OSError:
            pass  # not empty (someone else's files, or a file we could not remove) or gone already
    return {"removed": removed, "already": not removed}
