"""A start-up bundle's run (`patchkit bundle` writes the bundle): stdlib only, Python >= 3.8.

`python fix.pyz [--state-dir DIR] [--on-unknown refuse|run] -- COMMAND [ARG...]`: the recipe's
patch steps applied to the packages this interpreter imports, then COMMAND exec'd in this
process (its signals and exit code are the server's). Runs in the agent core's namespace
(the bundle's __main__ executes core.py, then this file): the write, backup, read-back,
syntax, import-identity and verify checks, the lock and the journal are the agent's own ops.

The bundle holds, per patch step and per release it was built for, the exact bytes each file
has before and after the step (planned on that release by `patchkit test`'s machinery). A
release is known by its version (read as the agent reads it) and then by the sha256 of every
file the step touches: anything else is unknown, and nothing is written.
"""

BUNDLE_USAGE = ("usage: python BUNDLE.pyz [--state-dir DIR] [--on-unknown refuse|run] [--lock-timeout SECONDS] "
                "-- COMMAND [ARG...]")
BUNDLE_HELP = """
Apply the bundled recipe to the packages this interpreter imports, then start COMMAND in this
process (exec: its signals and exit code are COMMAND's). A start with every fix in place writes
nothing and only reads a few files.

  --state-dir DIR        the journal (run records, backups, lock); a volume keeps it across
                         restarts (default ~/.local/state/patchkit)
  --on-unknown refuse    an installed release or file no build of the bundle knows: exit 1,
                         nothing changed, COMMAND not started (default)
  --on-unknown run       the same, but start COMMAND unpatched, with a warning
  --lock-timeout SECONDS wait this long for another start holding the journal's lock (default 60)

Exit codes before COMMAND starts: 1 refused or a step failed (the files as they were), 2 a bad
command line or an untrusted state dir, 127 COMMAND not found.
"""
ON_UNKNOWN = ("refuse", "run")
DEFAULT_BUNDLE_STATE_DIR = "~/.local/state/patchkit"  # the journal's default on any host (run/journal.py)


class BundleUsage(Exception):
    """A bad command line: said with the usage, exit 2."""


class Unknown(Exception):
    """The installed package is not what the bundle was built for: nothing is written."""


def bundle_say(text):
    sys.stderr.write("patchkit-bundle: %s\n" % text)
    sys.stderr.flush()


def bundle_args(argv):
    """(state_dir, on_unknown, lock_timeout, command) from the bundle's command line."""
    opts = {"state_dir": DEFAULT_BUNDLE_STATE_DIR, "on_unknown": "refuse", "lock_timeout": 60.0}
    names = {"--state-dir": "state_dir", "--on-unknown": "on_unknown", "--lock-timeout": "lock_timeout"}
    args = list(argv)
    while args and args[0] != "--":
        flag = args.pop(0)
        if flag in ("-h", "--help"):
            raise BundleUsage(None)
        name, joined, value = flag.partition("=")
        if name not in names:
            raise BundleUsage("unknown option %s" % flag)
        if not joined:
            if not args or args[0] == "--":
                raise BundleUsage("%s needs a value" % name)
            value = args.pop(0)
        opts[names[name]] = value
    if opts["on_unknown"] not in ON_UNKNOWN:
        raise BundleUsage("--on-unknown %s: refuse or run" % opts["on_unknown"])
    try:
        opts["lock_timeout"] = float(opts["lock_timeout"])
    except ValueError:
        raise BundleUsage("--lock-timeout %s: a number of seconds" % opts["lock_timeout"])
    if not args or len(args) < 2:
        raise BundleUsage("no command to start after -- (the server's command line, e.g. -- vllm serve MODEL)")
    return opts["state_dir"], opts["on_unknown"], opts["lock_timeout"], args[1:]


def bundle_main(data, argv, began=None):
    """The whole run; returns an exit code, or does not return (COMMAND exec'd). began: the
    time.monotonic() at which the bundle's __main__ started (what the timings count from)."""
    try:
        state_dir, on_unknown, lock_timeout, command = bundle_args(argv)
    except BundleUsage as exc:
        if not exc.args[0]:
            sys.stdout.write(BUNDLE_USAGE + "\n" + BUNDLE_HELP)
            return 0
        bundle_say("%s (%s)" % (exc.args[0], BUNDLE_USAGE))
        return 2
    began = time.monotonic() if began is None else began
    bundle = json.loads(data.decode("utf-8"))
    try:
        decided = decide_steps(bundle)
        command_loads_the_same(command, decided)
        unsettled = cut_off_steps(bundle, state_dir, decided)
        if not unsettled and all(d["action"] in ("ok", "skipped", "check") for d in decided):
            # in place: nothing to write, no check to run again (they ran before the write), no lock
            bundle_say("%s: in place (%s) in %.3f s; starting %s" % (
                bundle["recipe"], ", ".join("%s %s" % (d["step"]["name"], d["action"]) for d in decided
                                            if d["action"] != "check"), time.monotonic() - began, command[0]))
            return start(command)
        code = apply_bundle(bundle, state_dir, lock_timeout, command)
    except Unknown as exc:
        return unknown(str(exc), on_unknown, command)
    except (Refused, OSError) as exc:
        # a refusal (a symlink, another user's state dir, the lock held) or a file that cannot be read
        bundle_say("%s; %s not started" % (exc if isinstance(exc, Refused) else os_error_text(exc), command[0]))
        return 2 if isinstance(exc, UntrustedState) else 1
    if code:
        return code
    bundle_say("%s: applied in %.3f s (journal: %s); starting %s" % (bundle["recipe"], time.monotonic() - began,
                                                                      expand(state_dir), command[0]))
    return start(command)


PYTHON_NAME = re.compile(r"^python[0-9.]*$")
WHERE_IT_LOADS = ("import importlib.util, json, sys\n"
                  "out = {}\n"
                  "for name in sys.argv[1:]:\n"
                  "    spec = importlib.util.find_spec(name)\n"
                  "    places = list(spec.submodule_search_locations or []) if spec else []\n"
                  "    out[name] = places[0] if places else (spec.origin if spec else None)\n"
                  "print(json.dumps(out))\n")


def command_python(command):
    """(interpreter, folder its sys.path[0] is) of the Python COMMAND runs, or None when COMMAND is no
    Python we can tell (a shell, a binary): `python3 -m vllm ...` (the working folder first on its path,
    as for -c), `python3 script.py`, or a script whose #! names a Python (`vllm serve`: pip's console
    script; its own folder first on its path)."""
    import shutil

    first = shutil.which(command[0])
    if first is None:
        return None
    if PYTHON_NAME.match(os.path.basename(first)):
        rest = [a for a in command[1:] if not a.startswith("-") or a in ("-m", "-c")]
        if rest and rest[0] not in ("-m", "-c") and os.path.isfile(rest[0]):
            return first, os.path.dirname(os.path.abspath(rest[0]))
        return first, os.getcwd()
    try:
        with open(first, "rb") as f:
            line = f.readline(512)
    except OSError:
        return None
    if not line.startswith(b"#!"):
        return None
    words = line[2:].decode("utf-8", "replace").split()
    if words and os.path.basename(words[0]) == "env":
        words = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        interpreter = shutil.which(words[0]) if words else None
    else:
        interpreter = words[0] if words else None
    if not interpreter or not PYTHON_NAME.match(os.path.basename(interpreter)):
        return None
    return interpreter, os.path.dirname(first)


def command_loads_the_same(command, decided):
    """Unknown when the Python COMMAND runs would import a bundled package from another folder than
    the one this interpreter patches (another venv's `vllm`, a `vllm/` checkout in the working folder
    that `python -m` puts first): patching here would leave the server on the old code."""
    roots = dict((d["step"]["package"], d["root"]) for d in decided if d.get("root"))
    found = command_python(command) if roots else None
    if found is None:
        return
    import subprocess

    interpreter, first = found
    try:
        done = subprocess.run([interpreter, "-c", WHERE_IT_LOADS] + sorted(roots), cwd=first,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        loads = json.loads(done.stdout.decode("utf-8"))
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        raise Unknown("cannot tell where %s (%s) imports %s from: %s"
                      % (command[0], interpreter, ", ".join(sorted(roots)), exc))
    for package, root in sorted(roots.items()):
        there = loads.get(package)
        if there is None or os.path.realpath(there) != os.path.realpath(root):
            raise Unknown("%s runs %s, which imports %s from %s, not %s that this bundle patches for %s; "
                          "run the bundle with that interpreter (%s BUNDLE.pyz -- ...)"
                          % (command[0], interpreter, package, there or "nowhere", root, sys.executable,
                             interpreter))


def unknown(why, on_unknown, command):
    if on_unknown == "run":
        bundle_say("WARNING: %s" % why)
        bundle_say("WARNING: starting %s UNPATCHED (--on-unknown run); nothing was changed" % command[0])
        return start(command)
    bundle_say("refused: %s; nothing changed, %s not started (--on-unknown run would start it unpatched)"
               % (why, command[0]))
    return 1


def start(command):
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        bundle_say("cannot start %s: %s" % (command[0], exc.strerror or exc))
        return 127


def located_package(package, cache):
    """(root, version) of package as this interpreter would import it (the agent's resolution)."""
    if package not in cache:
        root = find_package_root(package)
        if root is None:
            raise Unknown("package %s is not importable by %s" % (package, sys.executable))
        if not os.path.isdir(root):
            raise Unknown("%s is a single module (%s), not a package folder this bundle was built for"
                          % (package, root))
        cache[package] = (root, package_version(package, root)[0])
    return cache[package]


def decide_steps(bundle):
    """What each step needs here, read only: apply (with the files' paths and bytes), ok,
    skipped, or check; Unknown when an installed file is not one the bundle knows."""
    found = {}  # package -> (root, version)
    written = {}  # path -> the sha256 an earlier step of this start leaves there
    out = []
    for step in bundle["steps"]:
        if step["kind"] == "check":
            out.append(decide_check(step, found))
        else:
            out.append(decide_patch(step, found, written))
    return out


def decide_check(step, found):
    if not step.get("package"):
        return {"step": step, "action": "check"}
    root, version = located_package(step["package"], found)
    runs_on = step.get("runs_on")
    if runs_on is not None and version not in runs_on:
        return {"step": step, "action": "skipped",
                "message": "%s %s is outside %s" % (step["package"], version, step.get("versions"))}
    return {"step": step, "action": "check", "version": version}


def decide_patch(step, found, written):
    """The step's build for the installed release (its version, then its files' hashes): in place
    (ok), to apply, or skipped there; Unknown when no build of the bundle has these files."""
    package = step["package"]
    root, version = located_package(package, found)
    variants = step["releases"].get(version or "")
    if not variants:
        known = ", ".join(sorted(step["releases"])) or "none"
        raise Unknown("%s %s is not a release this bundle was built for (step %s knows %s %s)"
                      % (package, version or "of unknown version", step["name"], package, known))
    base = os.path.dirname(root.rstrip(os.sep))
    odd = None
    for release in variants:
        if release["status"] == "skipped":
            return {"step": step, "action": "skipped", "message": release["result"]["message"], "version": version}
        files = [dict(f, path=os.path.join(base, *f["rel"].split("/"))) for f in release["files"]]
        for f in files:
            f["current"] = installed_file(root, package, version, f["path"], written)
        if all(f["current"] == f["after"] or f["current"] in f["later"] for f in files):
            return {"step": step, "action": "ok", "version": version, "root": root, "files": files}
        if release["status"] == "changed" and all(f["current"] == f["before"] for f in files):
            written.update((f["path"], f["after"]) for f in files)  # what the next steps will find
            return {"step": step, "action": "apply", "version": version, "root": root, "files": files,
                    "release": release, "base": base}
        odd = odd or next((f for f in files if f["current"] not in (f["before"], f["after"])), None)
    if odd is None:  # some files as before the step, others as after it: a unit half written by hand
        raise Unknown("%s %s: the files of step %s are partly changed, in no state a build of this bundle knows"
                      % (package, version, step["name"]))
    raise Unknown("%s %s: %s %s, which no build of this bundle knows (changed after it was installed?)"
                  % (package, version, odd["path"], "is missing" if odd["current"] is None
                     else "hashes to %s" % odd["current"][:12]))


def installed_file(root, package, version, path, written):
    """sha256 of the file at path (None: none there), held to what this interpreter imports:
    inside the package folder (no symlink out), and the very file it loads for that module;
    or, for a file an earlier step of this start will write, what that step leaves (written)."""
    refuse_path_escape(root, path)
    module = module_name(root, package, path)
    loads = module_file(root, package, module) if module else None
    if loads is not None and os.path.normpath(loads) != os.path.normpath(path):
        raise Unknown("the target is ambiguous: %s loads %s from %s, not from %s as in %s %s"
                      % (sys.executable, module, loads, path, package, version))
    if path in written:
        return written[path]
    return sha256_at(path, None, "patch")


def cut_off(records, name):
    """(record, step) of the live change to step `name` (the newest apply run that changed it,
    not rolled back: run/journal.py live_change) when its run was cut off before its checks
    were recorded (verified False); None otherwise."""
    for record in sorted(records, key=lambda r: r.get("run_id", ""), reverse=True):
        if record.get("kind") != "apply" or name in record.get("rolled_back_steps", []):
            continue
        for done in record.get("steps", []):
            if done.get("name") == name and done.get("status") == "changed":
                return (record, done) if done.get("verified") is False else None
    return None


def cut_off_steps(bundle, state_dir, decided):
    """Step name -> (record, step) for each step in place whose writing run never recorded its
    checks: in place is a promise only once they passed. No journal there: none (read only)."""
    if not any(d["action"] == "ok" for d in decided) or not os.path.isdir(expand(state_dir)):
        return {}
    records = op_journal_list(state_dir, bundle["recipe"])
    out = {}
    for d in decided:
        found = cut_off(records, d["step"]["name"]) if d["action"] == "ok" else None
        if found is not None:
            out[d["step"]["name"]] = found
    return out


def unit_of(done):
    """The files of a journaled patch step: [(file, backup, sha256 before, sha256 after)]."""
    if done.get("files") is not None:
        return [(c["file"], c.get("backup"), c.get("sha256_before"), c.get("sha256_after")) for c in done["files"]]
    return [(done["file"], done.get("backup"), done.get("sha256_before"), done.get("sha256_after"))]


def settle_step(bundle, step, d, state_dir, run_id, found):
    """A change in place whose run was cut off before its checks were recorded: the checks run
    now; they pass: that run's record says verified; they fail: every original is put back
    (as that run would have) and that run's change is marked undone by this one."""
    record, done = found
    cut = "run %s was cut off before its checks were recorded" % record["run_id"]
    root = done.get("root") or d["root"]
    outcome = op_verify([{"path": path, "expected_sha256": after} for path, _, _, after in unit_of(done)],
                        step["verify_imports"], step["import_timeout_s"], root, verify_program(bundle, step),
                        step["package"])
    result = {"name": step["name"], "kind": "patch", "status": "ok", "package_version": d["version"],
              "checks": outcome["checks"]}
    passed = ", ".join(c["name"] for c in outcome["checks"])
    if outcome["ok"]:
        done["verified"] = True
        done["checks"] = outcome["checks"]
        done["message"] = "%s; verified by a later start (%s)" % (cut, passed)
        op_journal_write(state_dir, bundle["recipe"], record["run_id"], record)
        result["message"] = "already in place; %s: verified now (%s)" % (cut, passed)
        return result
    for path, backup, before, after in reversed(unit_of(done)):
        if before is None:
            continue  # a file that run added: no backup; left for rollback
        op_restore(path, backup, after, before, False, root, state_dir)
    record["rolled_back_steps"] = sorted(set(record.get("rolled_back_steps", [])) | {step["name"]})
    record["rolled_back_by"] = run_id
    op_journal_write(state_dir, bundle["recipe"], record["run_id"], record)
    result.update(status="failed", restored=True,
                  message="%s, and its change fails: %s; original restored" % (cut, outcome["failure"]))
    return result


def verify_program(bundle, step):
    if step.get("verify_python") is None:
        return None
    return {"code": step["verify_python"], "variables": bundle["variables"], "timeout_s": step["import_timeout_s"]}


def bundle_run_id():
    """As the control side names runs (run/journal.py new_run_id): they sort by start time."""
    now = time.time()
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + ".%06dZ-%s" % (int(now % 1 * 1000000),
                                                                            os.urandom(3).hex())


def bundle_backup_name(step, file):
    """run/journal.py backup_name, the same names (a test holds the two together)."""
    encoded = file.lstrip("/").replace("%", "%25").replace("/", "%2F")
    name = "%s--%s" % (step, encoded)
    if len(name.encode()) <= 240:
        return name
    digest = hashlib.sha256(file.encode()).hexdigest()[:16]
    tail = encoded.encode()[-max(40, 200 - len(step.encode())):].decode("utf-8", "ignore")
    return "%s--%s--%s" % (step, digest, tail)


def absolute(result, files, base):
    """The step's result as built (paths relative to site-packages) with this host's paths."""
    result = json.loads(json.dumps(result))
    names = dict((f["rel"], f["path"]) for f in files)

    def fix(text):
        if not text:
            return text
        for rel, path in names.items():
            text = text.replace("--- a/" + rel, "--- a" + path).replace("+++ b/" + rel, "+++ b" + path)
        return text

    result["diff"] = fix(result.get("diff"))
    if result.get("file") in names:
        result["file"] = names[result["file"]]
    for change in result.get("files") or []:
        change["file"] = names.get(change["file"], change["file"])
        change["diff"] = fix(change.get("diff"))
    return result


def apply_bundle(bundle, state_dir, lock_timeout, command):
    """Under the host lock: decide again (another start may have patched meanwhile), then each
    step in the recipe's order, journaled as an apply run; returns 0, or 1 when a step failed."""
    locked = op_lock(state_dir, lock_timeout, "patchkit bundle (pid %d)" % os.getpid())
    state_dir = locked["state_dir"]
    try:
        decided = decide_steps(bundle)
        unsettled = cut_off_steps(bundle, state_dir, decided)
        run_id = bundle_run_id()
        user = user_name(os.geteuid())
        record = {"run_id": run_id, "kind": "apply", "recipe": bundle["recipe"],
                  "recipe_sha256": bundle["recipe_sha256"], "host": os.uname().nodename, "user": user,
                  "patchkit_version": bundle["patchkit_version"], "started": time.time(), "status": "running",
                  "steps": [], "extra": {"bundle": bundle["bundle_id"], "command": command[0]}}
        failed = None
        for d in decided:
            step = d["step"]
            if d["action"] == "check":
                result = bundle_check(bundle, step, d)
            elif d["action"] == "apply":
                result = apply_step(bundle, step, d, state_dir, run_id, record)
            elif d["action"] == "ok" and step["name"] in unsettled:
                result = settle_step(bundle, step, d, state_dir, run_id, unsettled[step["name"]])
            elif d["action"] == "ok":
                result = {"name": step["name"], "kind": "patch", "status": "ok", "message": "already in place",
                          "package_version": d["version"]}
            else:
                result = {"name": step["name"], "kind": step["kind"], "status": "skipped", "message": d["message"],
                          "package_version": d.get("version")}
            record["steps"].append(result)
            bundle_say("%s: %s%s" % (step["name"], result["status"],
                                     ": " + result["message"] if result.get("message") else ""))
            if result["status"] == "failed":
                failed = result
                break
        statuses = set(s["status"] for s in record["steps"])
        record["status"] = "failed" if failed else "changed" if "changed" in statuses else "ok"
        record["finished"] = time.time()
        op_journal_write(state_dir, bundle["recipe"], run_id, record)
    finally:
        fd = LOCK.pop("fd", None)
        if fd is not None:
            os.close(fd)  # the lock goes with it: the server started next holds none
    if failed:
        bundle_say("step %s failed; %s not started (journal: %s)" % (failed["name"], command[0], state_dir))
        return 1
    return 0


def bundle_check(bundle, step, d):
    outcome = op_check(step["python"], step["timeout_s"], bundle["variables"])
    ok = outcome["returncode"] == 0
    result = {"name": step["name"], "kind": "check", "status": "ok" if ok else "failed",
              "package_version": d.get("version"),
              "checks": [{"name": "python", "ok": ok, "detail": outcome["stderr"] or outcome["stdout"]}]}
    if ok:
        said = outcome["stdout"].splitlines()
        result["message"] = "passed" + (": " + said[-1] if said else "")
    else:
        lines = outcome["stderr"].splitlines()
        reason = ("timed out after %ss" % step["timeout_s"] if outcome["timed_out"]
                  else lines[-1] if lines else "exit status %s" % outcome["returncode"])
        result["message"] = "%s: %s" % (step["message"], reason) if step.get("message") else reason
    return result


def apply_step(bundle, step, d, state_dir, run_id, record):
    """One patch step's unit through the agent's apply_files (backup, atomic write, read-back,
    syntax, import identity, verify program; every file put back on a failure), journaled
    first as an intent (verified False) as the control side journals it."""
    files = d["files"]
    result = absolute(d["release"]["result"], files, d["base"])
    changing = [f for f in files if f["before"] != f["after"]]
    backups = {}
    for f in changing:
        if f["before"] is not None:
            backups[f["path"]] = os.path.join(state_dir, "backups", run_id, bundle_backup_name(step["name"], f["path"]))
    if result.get("files") is not None:
        for change in result["files"]:
            change["backup"] = backups.get(change["file"])
    else:
        result["backup"] = backups.get(result.get("file"))
    result["root"] = d["root"]
    intent = dict(result, verified=False, message="cut off while writing or verifying")
    op_journal_write(state_dir, bundle["recipe"], run_id, dict(record, steps=record["steps"] + [intent]))
    verify_python = verify_program(bundle, step)
    try:
        outcome = op_apply_files(
            [{"path": f["path"], "expected_sha256": f["before"], "backup_path": backups.get(f["path"], ""),
              "content_b64": f["content_b64"]} for f in changing],
            step["verify_imports"], step["import_timeout_s"], verify_python, d["root"], step["package"])
    except Refused as exc:
        return dict(result, status="failed", message=str(exc))
    result["checks"] = outcome["checks"]
    passed = ", ".join(c["name"] for c in outcome["checks"])
    many = result.get("files") is not None
    if outcome["ok"]:
        result["verified"] = True
        result["message"] = "%s; %s (%s)" % (result["message"], "verified as one unit" if many else "verified", passed)
        return result
    result["status"] = "failed"
    result["restored"] = outcome["restored"]
    back = outcome["restored_files"]
    result["details"] = {"written": outcome["written"], "restored": back}
    if many:
        for change in result["files"]:
            if change["file"] not in outcome["written"] or change["file"] in back:
                change["sha256_after"] = change["sha256_before"]
    elif not outcome["written"] or result.get("file") in back:
        result["sha256_after"] = result["sha256_before"]
    note = ("original restored" if not many else "all files restored") if outcome["restored"] else \
        "ORIGINAL NOT RESTORED, backups in %s" % os.path.join(state_dir, "backups", run_id)
    result["message"] = "%s; %s" % (outcome["failure"], note)
    return result
