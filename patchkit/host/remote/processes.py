"""Host-side server supervision for the launch step: an extension of the host agent (core.py).

Sent with the first launch or HTTP op of a run and run in the core's namespace (`op`,
`Refused`, `expand`, `atomic_write` are the core's). Stdlib only, Python >= 3.8.

A server runs in its own session, detached from the agent and the SSH connection, its output appended to a
log file (0600). Its record (pid, start time, process group and session, command hash, log)
lives in the journal's launch/ folder, read only when it is ours and no other user may write
it (open_state_file). The start time read from /proc tells a live server from a recycled
pid; no signal goes to a process unless /proc shows the one the record names: its start
time, its own process group and session, our user (_refuse_unless_ours).

Only the server gets its real argv and env values: what is written here (the record, the
log's header, error messages) shows the argv the control side redacted and env names.
"""

import json
import os
import re
import signal
import sys
import time


def _launch_dir(state_dir):
    """STATE/launch/, a folder of ours no other user may write (ensure_private_dir), made if missing."""
    state_dir = expand(state_dir)
    ensure_private_dir(state_dir)
    folder = os.path.join(state_dir, "launch")
    ensure_private_dir(folder)
    return folder


def _record_path(state_dir, name):
    return os.path.join(_launch_dir(state_dir), name + ".json")


def _proc_stat(pid):
    """The fields of /proc/PID/stat after the command's name (state first), or None if no such process."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            data = f.read()
    except OSError:
        return None
    return data.rsplit(")", 1)[1].split()


def _proc_start_time(pid):
    """Field 22 of /proc/PID/stat (clock ticks since boot), or None if no such process."""
    fields = _proc_stat(pid)
    return None if fields is None else int(fields[19])


def _proc_uid(pid):
    """The real uid of process pid (/proc/PID/status), or None if no such process."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def _not_ours(record, pid):
    """Why process pid is not one the record's server (or what is left of its group) may be:
    None when it is. A server patchkit starts leads its own session and process group
    (start_new_session) as the user the agent runs as; the record keeps both ids."""
    fields = _proc_stat(pid)
    if fields is None:
        return None  # gone: nothing to signal
    pgid, sid = record.get("pgid", record["pid"]), record.get("sid", record["pid"])
    if pgid != record["pid"] or sid != record["pid"]:
        return "the record says process group %s, session %s, not the group and session pid %s leads as patchkit " \
               "starts servers" % (pgid, sid, record["pid"])
    if int(fields[2]) != pgid or int(fields[3]) != sid:  # pgrp, session: fields 5 and 6 of stat
        return "pid %d is in process group %s, session %s, not %s as recorded" % (pid, fields[2], fields[3], pgid)
    uid = _proc_uid(pid)
    if uid is not None and uid != os.getuid():
        return "pid %d runs as %s, not as %s who started the server" % (pid, user_name(uid), user_name(os.getuid()))
    return None


def _refuse_unless_ours(state_dir, name, record, pids):
    """Before any signal: every process in pids must be the record's server or its group's (_not_ours)."""
    for pid in pids:
        why = _not_ours(record, pid)
        if why:
            raise Refused("launch record %s names pid %s, which is not a server patchkit started (%s): no signal "
                          "sent; nothing done (remove the record if it is stale)"
                          % (_record_path(state_dir, name), record["pid"], why))


def _alive(record):
    if not record:
        return False
    started = _proc_start_time(record["pid"])
    if started is None or started != record.get("proc_start"):
        return False
    try:
        with open("/proc/%d/stat" % record["pid"]) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except OSError:
        return False


def _read_record(state_dir, name):
    """The server's record, None if there is none or it cannot be read; refused when another
    user owns it or may write it (open_state_file): a record planted there names the process
    that stop would signal."""
    try:
        f = open_state_file(_record_path(state_dir, name))
        if f is None:
            return None
        with f:
            record = json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("pid"), int) or record["pid"] <= 0:
        return None
    return record


def _write_record(state_dir, name, record):
    """Durable before the op answers: rollback finds the server it started through it."""
    atomic_write(_record_path(state_dir, name), json.dumps(record).encode(), mode=0o600)


# Servers this agent started. Their Popen objects must outlive the request: a Popen that is
# garbage-collected reaps its child if it has already exited, and the exit status is lost.
CHILDREN = {}


def _reap(pid, wait_s=0.0):
    """Exit status of our own child if it has ended (None while it runs or if not ours).

    wait_s: how long to give a child that is exiting. Its main thread turns zombie (and
    _alive says no) before its other threads are gone, and until then waitpid has no
    status to give: a server that died would be reported "not running", without its exit.
    """
    proc = CHILDREN.get(pid)
    if proc is None:
        return None
    deadline = time.monotonic() + wait_s
    while proc.poll() is None:  # poll() keeps the status once it has it: asked again, same answer
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)
    if proc.returncode >= 0:
        return "exit status %d" % proc.returncode
    return "killed by signal %d" % -proc.returncode


@op(mutating=True)
def op_launch_start(state_dir, name, argv, env, cwd, log_path, command_hash, shown_argv, salt, run_id=None):
    _launch_dir(state_dir)  # 0700, before the default log's folder would be made with the umask's mode
    log_path = expand(log_path)
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    full_env = dict(os.environ)
    full_env.update(env or {})
    # 0600 when created; an existing log keeps its mode (never widened)
    log = os.fdopen(os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab")
    log.write(("\n=== patchkit launch %s at %s: %s\n" % (name, time.strftime("%Y-%m-%d %H:%M:%S"),
                                                        shown_argv)).encode())
    log.flush()
    import subprocess

    try:
        proc = subprocess.Popen(argv, cwd=os.path.expanduser(cwd) if cwd else None, env=full_env,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True)
    except OSError as exc:
        # exc names argv[0] unredacted (filename): its strerror does not
        raise Refused("cannot start %s: %s" % (shown_argv[0], exc.strerror or type(exc).__name__))
    finally:
        log.close()
    CHILDREN[proc.pid] = proc
    # Popen returns once the child has exec'ed, so its setsid is done: it leads its group and session
    record = {"name": name, "pid": proc.pid, "proc_start": _proc_start_time(proc.pid), "pgid": os.getpgid(proc.pid),
              "sid": os.getsid(proc.pid), "argv": shown_argv,
              "env_names": sorted(env or {}), "cwd": cwd, "log": log_path, "command_hash": command_hash,
              "salt": salt, "started": time.time(), "run_id": run_id}
    _write_record(state_dir, name, record)
    return record


# PRE-START CHECK. Which file a server imports for a module is decided by its own start: its
# interpreter, its env (PYTHONPATH), its cwd and how it runs (`python -m` and `-c` put the cwd
# first on sys.path, a script its folder). A patch in site-packages is no patch for a server whose
# PYTHONPATH or cwd holds another copy: before a server starts, and for status, the files the
# recipe's patch steps wrote are resolved as that server would (RESOLVE_SOURCE, in a process with
# its interpreter, env and cwd; nothing imported).
LAUNCH_RESOLVE = "import json, os, sys\n" + RESOLVE_SOURCE + r"""
asked = json.loads(sys.argv[1])
if asked["path0"] is not None and not getattr(sys.flags, "safe_path", 0):
    sys.path.insert(0, asked["path0"] or os.getcwd())
found = []
for f in asked["files"]:
    root = find_package_root(f["package"])
    found.append(module_origin(root, f["package"], f["module"]) if root else None)
print(json.dumps(found))
"""
PYTHON_NAME = re.compile(r"^python[0-9.]*$")
PYTHON_OPTIONS_WITH_VALUE = ("-W", "-X", "--check-hash-based-pycs")


def _is_python(path):
    return bool(PYTHON_NAME.match(os.path.basename(path))) or os.path.realpath(path) == os.path.realpath(sys.executable)


def _python_start(argv, cwd):
    """What `python ARGS` puts first on sys.path: "" (its cwd: -m, -c, stdin), a script's folder,
    or None (-I, -P: nothing)."""
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] not in ("-", "-m", "-c"):
        word = argv[i]
        if word in PYTHON_OPTIONS_WITH_VALUE:
            i += 1
        elif not word.startswith("--") and ("I" in word or "P" in word) and word[1:2] not in ("W", "X"):
            return None
        i += 1
    if i >= len(argv) or argv[i] in ("-", "-m", "-c"):
        return ""
    return os.path.dirname(os.path.realpath(os.path.join(cwd, argv[i])))


def launch_interpreter(argv, path, cwd):
    """(interpreter, path0) of a server started as argv: a python, or a script whose #! names one
    (its folder first on sys.path); anything else is judged with the target interpreter and no
    entry of its own (path0 None). path: the PATH the server gets."""
    import shutil

    exe = argv[0] if os.sep in argv[0] else shutil.which(argv[0], path=path)
    if exe is None:
        return sys.executable, None
    exe = os.path.join(cwd, exe)
    if _is_python(exe):
        return exe, _python_start(argv[1:], cwd)
    try:
        with open(exe, "rb") as f:
            first = f.readline(512)
    except OSError:
        return sys.executable, None
    words = first[2:].decode("utf-8", "replace").split() if first.startswith(b"#!") else []
    if words and os.path.basename(words[0]) == "env" and len(words) > 1:
        words = [shutil.which(words[1], path=path) or words[1]] + words[2:]
    if words and _is_python(words[0]):
        return words[0], os.path.dirname(os.path.realpath(exe))
    return sys.executable, None


@op
def op_launch_resolves(argv, env, cwd, files, timeout_s=120.0):
    """For each file patchkit wrote ({package, file, root?}), the file a server started with this
    argv, env and cwd would import for its module; `other`: those that are not the file written."""
    cwd = os.path.expanduser(cwd) if cwd else os.getcwd()
    full_env = dict(os.environ)
    full_env.update(env or {})
    python, path0 = launch_interpreter(argv, full_env.get("PATH", os.defpath), cwd)
    asked = []
    for f in files:
        root = f.get("root") or find_package_root(f["package"])
        module = module_name(root, f["package"], f["file"]) if root else None
        if module is not None:
            asked.append({"package": f["package"], "module": module, "file": f["file"]})
    out = {"python": python, "other": [], "error": None}
    if not asked:
        return out
    result = run_python(LAUNCH_RESOLVE, timeout_s, [json.dumps({"path0": path0, "files": asked})], python=python,
                        env=full_env, cwd=cwd)
    try:
        found = json.loads(result["stdout"].splitlines()[-1]) if result["returncode"] == 0 else None
    except (ValueError, IndexError):
        found = None
    if found is None:
        lines = result["stderr"].splitlines()
        out["error"] = "%s could not tell: %s" % (python, lines[-1] if lines else "exit %s" % result["returncode"])
        return out
    for f, origin in zip(asked, found):
        if origin is not None and os.path.realpath(origin) != os.path.realpath(f["file"]):
            out["other"].append({"module": f["module"], "imports": origin, "wrote": f["file"]})
    return out


@op
def op_launch_inspect(state_dir, name, url=None, request_timeout=5.0):
    """Is the named server running, did it exit (and how), and does its health URL answer?"""
    record = _read_record(state_dir, name)
    out = {"record": record, "running": False, "exit": None, "health": None}
    if record is None:
        return out
    out["running"] = _alive(record)
    if not out["running"]:
        out["exit"] = _reap(record["pid"], wait_s=5.0) or "not running"
    if url and out["running"]:
        out["health"] = _http("GET", url, None, request_timeout)
    return out


def _group_members(pgid):
    """Live processes of a process group. Linux does not hand out a PID that is still some
    group's id, so after the leader's death these can only be the server's own children."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry))
    return members


def _stop_orphans(pgid, timeout_s):
    """The leader is gone but its workers may not be: TERM, then KILL, the rest of the group."""
    if not _group_members(pgid):
        return None
    for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return "SIGTERM to what was left of its group"
        deadline = time.monotonic() + wait_s
        while _group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not _group_members(pgid):
            return "SIGTERM to what was left of its group" if sig == signal.SIGTERM else \
                "SIGKILL to what was left of its group after %ss" % timeout_s
    return "what was left of its group survived SIGKILL"


@op(mutating=True)
def op_launch_stop(state_dir, name, timeout_s=30.0):
    """SIGTERM the server's process group, SIGKILL after timeout_s. Forgets the record."""
    record = _read_record(state_dir, name)
    if record is None or not _alive(record):
        if record is None:
            return {"stopped": False, "how": "not running"}
        _reap(record["pid"])
        # its PID free or still its own (a zombie): the group, if any is left, is the server's
        ours = _proc_start_time(record["pid"]) in (None, record.get("proc_start"))
        if ours:
            _refuse_unless_ours(state_dir, name, record, _group_members(record["pid"]))
        orphans = _stop_orphans(record["pid"], timeout_s) if ours else None
        os.unlink(_record_path(state_dir, name))
        if orphans:
            return {"stopped": True, "how": orphans, "record": record}
        return {"stopped": False, "how": "not running"}
    pid = record["pid"]
    _refuse_unless_ours(state_dir, name, record, [pid] + _group_members(pid))
    how = "SIGTERM"
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + timeout_s
    while _alive(record) and time.monotonic() < deadline:
        _reap(pid)
        time.sleep(0.2)
    if _alive(record):
        how = "SIGKILL after %ss" % timeout_s
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for _ in range(50):
            _reap(pid)
            if not _alive(record):
                break
            time.sleep(0.1)
    os.unlink(_record_path(state_dir, name))
    return {"stopped": True, "how": how, "record": record}


def _http(method, url, body, timeout):
    import urllib.error
    import urllib.request

    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"} if data else {})
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read().decode("utf-8", "replace")
            return {"status": response.status, "body": text, "seconds": time.monotonic() - started}
    except urllib.error.HTTPError as exc:
        return {"status": exc.code, "body": exc.read().decode("utf-8", "replace")[-2000:],
                "seconds": time.monotonic() - started}
    except Exception as exc:  # refused, timed out, reset: all "no answer" for a probe
        return {"status": None, "error": "%s: %s" % (type(exc).__name__, exc), "seconds": time.monotonic() - started}


@op
def op_http(method, url, body=None, timeout=30.0):
    """One HTTP request made from the host (so loopback-only servers work over SSH)."""
    return _http(method, url, body, timeout)


@op
def op_http_batch(requests, timeout=300.0):
    """Requests one after another, timed on the host: no control-side round trips in the numbers."""
    started = time.monotonic()
    results = [_http(r.get("method", "POST"), r["url"], r.get("body"), timeout) for r in requests]
    return {"results": results, "seconds": time.monotonic() - started}


@op
def op_log_tail(path, lines=40):
    path = expand(path)
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            text = f.read().decode("utf-8", "replace")
    except OSError as exc:
        return {"tail": "(cannot read %s: %s)" % (path, exc.strerror)}
    lines_all = text.splitlines()
    if size > 64 * 1024:
        lines_all = lines_all[1:]  # cut mid-line: half a secret could not be recognised and redacted
    # A server's root cause is often far above its last line ("see root cause above").
    errors = []
    for line in lines_all:
        stripped = line.strip()
        if ("Error:" in stripped or "Exception:" in stripped) and stripped not in errors:
            errors.append(stripped)
    return {"tail": "\n".join(lines_all[-lines:]), "errors": errors[-5:]}
