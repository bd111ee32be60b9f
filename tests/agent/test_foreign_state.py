"""State another local user could write is never trusted: the state dir, its records, its
backups and its launch records, with a real second user (useradd, removed at the end).

We run as root (CI too), so every refusal here is one root could have ignored: root can chmod,
read and write anything, and before these checks it did. Each test builds what the other user
would plant (their files are chowned to them, as if they made them), runs the real CLI on the
local transport, and asserts what was printed, the exit code and what is on disk afterwards:
the victim's bytes, the state folder's listing and mode, a process still running.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Sandbox, recipe, run_patchkit, sandbox_fixture, step, tree_listing  # noqa: F401

TOY = "toyllm_eagle3.yaml"
SPECULATIVE = "toyllm/config/speculative.py"
OTHER = "pk-test-state"


@pytest.fixture(scope="module")
def other_user() -> Iterator[pwd.struct_passwd]:
    """A second local user with no home and no login shell, made with useradd and removed after."""
    assert os.geteuid() == 0, "these tests plant another user's files: they run as root (as CI does)"
    assert shutil.which("useradd") and shutil.which("userdel"), "useradd/userdel missing (Debian's passwd)"
    made = False
    try:
        pwd.getpwnam(OTHER)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", OTHER], check=True,
                       capture_output=True)
        made = True
    try:
        yield pwd.getpwnam(OTHER)
    finally:
        if made:
            subprocess.run(["userdel", OTHER], check=False, capture_output=True)


def chown_tree(path: Path, user: pwd.struct_passwd) -> None:
    """What `user` would own had they made it all."""
    for here in [path, *path.rglob("*")]:
        os.lchown(here, user.pw_uid, user.pw_gid)


def one_line(result: Any, text: str) -> str:
    """The one line of the output that holds text (and no traceback anywhere)."""
    out = result.stdout + result.stderr
    assert "Traceback" not in out, result
    lines = [line for line in out.splitlines() if text in line]
    assert len(lines) == 1, result
    return lines[0]


# ---------------------------------------------------------------- the state dir itself

@pytest.mark.parametrize("given", ["--state-dir", "inventory"])
@pytest.mark.parametrize("command", ["apply", "rollback", "status"])
def test_another_users_state_dir_is_refused_in_one_line_with_nothing_written(
        sandbox: Sandbox, tmp_path: Path, other_user: pwd.struct_passwd, given: str, command: str) -> None:
    """A state dir in a shared folder that the other user made first (as anyone can under /tmp):
    exit 2, one line naming it and its owner, and not a byte of it or of the package changed,
    its mode neither (before, root chmod'ed it 0700 and kept its journal there)."""
    state = tmp_path / "shared" / "state"
    (state / "runs").mkdir(parents=True)
    (state / "runs" / "keep").write_text("theirs\n")
    state.chmod(0o755)
    chown_tree(state, other_user)
    before, package = tree_listing(state), tree_listing(sandbox.pkgs)
    if given == "inventory":
        sandbox.inventory.write_text(sandbox.inventory.read_text().replace(str(sandbox.state), str(state)))
        result = sandbox.run(command, recipe(TOY))
    else:  # no inventory: the one host `local`, whose state dir --state-dir names
        result = run_patchkit(command, recipe(TOY), "-e", f"python={sandbox.python}", "--state-dir", str(state))
    assert result.returncode == 2, result
    line = one_line(result, f"state folder {state} belongs to {OTHER}, not to root")
    assert "nothing done" in line, line
    assert tree_listing(state) == before
    assert tree_listing(sandbox.pkgs) == package


def test_a_state_dir_of_ours_that_others_may_write_is_refused(sandbox: Sandbox, tmp_path: Path) -> None:
    """Ours, but world-writable: anyone could have planted a record in it already."""
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o777)
    package = tree_listing(sandbox.pkgs)
    result = run_patchkit("apply", recipe(TOY), "-e", f"python={sandbox.python}", "--state-dir", str(state))
    assert result.returncode == 2, result
    one_line(result, f"state folder {state} is writable by others (mode 777)")
    assert tree_listing(sandbox.pkgs) == package
    assert list(state.iterdir()) == [] and state.stat().st_mode & 0o777 == 0o777


# ---------------------------------------------------------------- planted records and backups

def plant_restore_of(sb: Sandbox, victim: Path, planted: bytes, record_root: str | None) -> dict[str, Any]:
    """After a real apply: its record rewritten to name `victim` (and `record_root` as the folder
    it was confined to), with a "backup" of `planted` bytes whose hash the record holds, and
    the victim's current hash as what patchkit wrote (so no drift shows). Returns the record."""
    (path,) = sorted((sb.state / "runs" / "toyllm_eagle3").glob("*.json"))
    record = json.loads(path.read_text())
    done = next(s for s in record["steps"] if s["name"] == "eagle3-whitelist")
    backup = Path(done["backup"])
    backup.write_bytes(planted)
    done.update(file=str(victim), root=record_root, sha256_before=hashlib.sha256(planted).hexdigest(),
                sha256_after=hashlib.sha256(victim.read_bytes()).hexdigest())
    record["steps"] = [done]
    path.write_text(json.dumps(record))
    return record


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A root-owned file outside any package."""
    path = tmp_path / "etc" / "app" / "config.py"
    path.parent.mkdir(parents=True)
    path.write_text("SAFE = True\n")
    return path


PLANTED = b"SAFE = False  # planted\n"


def test_a_planted_state_dir_never_makes_rollback_write_its_backup(sandbox: Sandbox, victim: Path,
                                                                   other_user: pwd.struct_passwd) -> None:
    """The finding as measured: the other user's state dir holds a run record naming root's
    file and a "backup" of their bytes; root's rollback wrote them. Now: refused, exit 2."""
    assert sandbox.run("apply", recipe(TOY)).returncode == 0
    plant_restore_of(sandbox, victim, PLANTED, str(victim.parent))
    chown_tree(sandbox.state, other_user)
    sandbox.state.chmod(0o755)
    result = sandbox.run("rollback", recipe(TOY), "--force")
    assert result.returncode == 2, result
    one_line(result, f"belongs to {OTHER}")
    assert victim.read_bytes() == b"SAFE = True\n"


@pytest.mark.parametrize("record_root", ["victim's folder", "none"])
def test_a_record_naming_a_file_outside_the_package_located_now_is_refused(sandbox: Sandbox, victim: Path,
                                                                           record_root: str) -> None:
    """Our own state dir, a record of ours, a backup whose hash the record holds: rollback still
    writes only inside the package folder the step locates on the host now, whatever folder
    the record says the change was confined to (forced or not)."""
    assert sandbox.run("apply", recipe(TOY)).returncode == 0
    plant_restore_of(sandbox, victim, PLANTED, str(victim.parent) if record_root != "none" else None)
    package = tree_listing(sandbox.pkgs)
    result = sandbox.run("rollback", recipe(TOY), "--force", json_out=True)
    assert victim.read_bytes() == b"SAFE = True\n"
    assert tree_listing(sandbox.pkgs) == package
    assert result.returncode == 1, result
    message = step(result, "eagle3-whitelist")["message"]
    assert f"names {victim}, outside {sandbox.pkgs / 'toyllm'}, the package folder the step locates" in message


@pytest.mark.parametrize("planted", ["backup", "record", "runs folder", "backups folder", "lock"])
def test_a_state_file_of_another_user_in_our_state_dir_is_never_read(sandbox: Sandbox, planted: str,
                                                                      other_user: pwd.struct_passwd) -> None:
    """Our state dir, but one thing in it the other user's (made while it was open to them, or
    moved in): the rollback reads nothing of it and writes nothing; the patched file stays."""
    toy = recipe(TOY)
    assert sandbox.run("apply", toy).returncode == 0
    (record_path,) = sorted((sandbox.state / "runs" / "toyllm_eagle3").glob("*.json"))
    record = json.loads(record_path.read_text())
    done = next(s for s in record["steps"] if s["name"] == "eagle3-whitelist")
    backup = Path(done["backup"])
    # the planted bytes, as the record holds their hash: only the owner check stands in the way
    backup.write_bytes(PLANTED)
    done["sha256_before"] = hashlib.sha256(PLANTED).hexdigest()
    record_path.write_text(json.dumps(record))
    target = {"backup": backup, "record": record_path, "runs folder": sandbox.state / "runs",
              "backups folder": sandbox.state / "backups", "lock": sandbox.state / "lock"}[planted]
    chown_tree(target, other_user)
    patched = sandbox.file(SPECULATIVE).read_bytes()
    result = sandbox.run("rollback", toy)
    assert result.returncode in (1, 2), result
    out = result.stdout + result.stderr
    assert "Traceback" not in out and f"belongs to {OTHER}, not to root" in out, result
    assert sandbox.file(SPECULATIVE).read_bytes() == patched


# ---------------------------------------------------------------- planted launch records

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def launch_recipe(path: Path, port: int) -> Path:
    """A launch step serving on port; its command is not what a planted record says (so apply
    stops the "server" the record names before starting its own)."""
    path.write_text(json.dumps({"name": "web", "steps": [{"name": "web", "launch": {
        "command": [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"], "cwd": str(path.parent),
        "health": {"url": f"http://127.0.0.1:{port}/", "timeout_s": 20, "interval_s": 0.2},
        "ready": {"completion": None}}}]}))
    return path


def proc_start(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


def running(proc: subprocess.Popen[bytes]) -> bool:
    return proc.poll() is None


@pytest.fixture
def sleeper(request: pytest.FixtureRequest, other_user: pwd.struct_passwd) -> Iterator[subprocess.Popen[bytes]]:
    """A real sleeping process group leader: the other user's (in a session of its own, as a
    server patchkit starts is), or ours in the test's session (a group of its own only)."""
    theirs = request.param == "theirs"
    if theirs:
        proc = subprocess.Popen(["sleep", "300"], user=other_user.pw_uid, group=other_user.pw_gid,
                                start_new_session=True)
    else:
        proc = subprocess.Popen(["sleep", "300"], process_group=0)
    assert os.getpgid(proc.pid) == proc.pid
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def plant_launch_record(state: Path, proc: subprocess.Popen[bytes], owner: pwd.struct_passwd | None) -> Path:
    """launch/web.json naming proc, with its true start time (what /proc shows anyone)."""
    folder = state / "launch"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    state.chmod(0o700)
    record = folder / "web.json"
    record.write_text(json.dumps({
        "name": "web", "pid": proc.pid, "proc_start": proc_start(proc.pid), "argv": ["sleep", "300"],
        "env_names": [], "cwd": None, "log": str(folder / "web.log"), "command_hash": "0" * 64, "salt": "00" * 16,
        "started": time.time(), "run_id": None}))
    record.chmod(0o600)
    if owner is not None:
        os.lchown(record, owner.pw_uid, owner.pw_gid)
    return record


@pytest.mark.parametrize(("sleeper", "record_owner"), [("theirs", "theirs"), ("theirs", "ours"), ("ours", "ours")],
                         indirect=["sleeper"], ids=["their-record", "our-record-their-process",
                                                    "our-record-our-group-not-a-session-leader"])
def test_a_planted_launch_record_never_signals_a_process(tmp_path: Path, sleeper: subprocess.Popen[bytes],
                                                        record_owner: str, other_user: pwd.struct_passwd) -> None:
    """apply stops the server a launch record names before it starts its own: a record naming
    a process patchkit did not start (with the start time /proc shows, so it passes for alive)
    is refused in one line, and the process lives on. Their record: the owner check; ours naming
    their process, or one of ours that does not lead its own group and session (what every
    server patchkit starts does): the identity check before any signal (each would have been
    SIGTERM'ed through its process group before)."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    plant_launch_record(state, sleeper, other_user if record_owner == "theirs" else None)
    port = free_port()
    web = launch_recipe(tmp_path / "web.yaml", port)
    try:
        result = run_patchkit("apply", str(web), "--state-dir", str(state), timeout=120)
        time.sleep(0.3)
        assert running(sleeper), result
        assert result.returncode == 1, result
        if record_owner == "theirs":
            one_line(result, f"state file {state / 'launch' / 'web.json'} belongs to {OTHER}")
        else:
            line = one_line(result, f"names pid {sleeper.pid}, which is not a server patchkit started")
            assert "no signal sent" in line, line
    finally:
        (state / "launch" / "web.json").unlink(missing_ok=True)
        run_patchkit("rollback", str(web), "--state-dir", str(state), "--force", timeout=120)
    assert running(sleeper)


def test_a_server_patchkit_started_is_still_stopped(tmp_path: Path) -> None:
    """The identity check lets patchkit's own server through: apply starts it, rollback stops it."""
    state = tmp_path / "state"
    web = launch_recipe(tmp_path / "web.yaml", free_port())
    started = run_patchkit("apply", str(web), "--state-dir", str(state), "--json", timeout=120)
    assert started.returncode == 0, started
    server = step(started, "web")["details"]["servers"][0]
    assert server["pgid"] == server["pid"] and server["sid"] == server["pid"]
    stopped = run_patchkit("rollback", str(web), "--state-dir", str(state), "--json", timeout=120)
    assert stopped.returncode == 0 and "stopped web" in step(stopped, "web")["message"], stopped
    time.sleep(0.2)
    assert not alive(server["pid"])


# ---------------------------------------------------------------- a deploy's removal

@pytest.mark.parametrize("planted", ["file outside dest", "folder outside dest"])
def test_a_deploy_rollback_removes_only_inside_the_dest_the_recipe_names(tmp_path: Path, planted: str) -> None:
    """A deploy's rollback removes the files it created, and the folders it made for them when
    empty: a record naming a file elsewhere (with that file's hash, so no drift shows) or an
    empty folder elsewhere removes neither; only the dest the recipe names now is touched."""
    src, dest, state = tmp_path / "src", tmp_path / "dest", tmp_path / "state"
    src.mkdir()
    (src / "a.bin").write_bytes(b"new a\n")
    deploy = tmp_path / "deploy.yaml"
    deploy.write_text(f"name: artifact\nsteps:\n  - name: sync\n    deploy: {{src: {src}, dest: {dest}}}\n")
    assert run_patchkit("apply", str(deploy), "--state-dir", str(state)).returncode == 0
    victim, empty = tmp_path / "etc" / "keep.conf", tmp_path / "var" / "empty"
    victim.parent.mkdir()
    victim.write_text("keep me\n")
    empty.mkdir(parents=True)
    (record_path,) = sorted((state / "runs" / "artifact").glob("*.json"))
    record = json.loads(record_path.read_text())
    (item,) = record["steps"][0]["details"]["files"]
    if planted == "file outside dest":
        item.update(rel=victim.name, path=str(victim), sha256_after=hashlib.sha256(victim.read_bytes()).hexdigest())
    else:
        item["created_dirs"] = [str(empty)]
    record_path.write_text(json.dumps(record))
    result = run_patchkit("rollback", str(deploy), "--state-dir", str(state), "--json")
    assert victim.read_text() == "keep me\n" and empty.is_dir(), result
    if planted == "file outside dest":
        assert result.returncode == 1, result
        assert f"{victim} is outside the change's folder {dest}" in step(result, "sync")["message"]
        assert (dest / "a.bin").read_bytes() == b"new a\n"
    else:
        assert result.returncode == 0, result
        assert not (dest / "a.bin").exists()
