"""Faults and abuse on the host: kills mid-run, full disks, planted symlinks, two state dirs.

Every test here reproduces a defect an outside fault run found, against the real CLI and
the real host agent (local transport). The windows are widened in the *target's*
environment, never in patchkit: `slowpkg` is a package whose patched module sleeps (and,
when told, fails) at import, so a kill can land while the import check runs. Small file
systems are real tmpfs mounts (the suite runs as root on our machines; see `tmpfs`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import PATCHKIT, Result, host_agent, make_venv

ORIGINAL = 'SUPPORTED = ["llama", "qwen"]\n'
SLOW_CONFIG = ORIGINAL + '''
import os as _os
import time as _time

if "kimi_k2" in SUPPORTED and _os.environ.get("SLOWPKG_MARKER"):  # only the patched module is slow
    open(_os.environ["SLOWPKG_MARKER"], "a").close()
    _time.sleep(float(_os.environ.get("SLOWPKG_SLEEP", "0")))
    if _os.environ.get("SLOWPKG_FAIL"):
        raise RuntimeError("slowpkg refuses kimi_k2 on this build")
'''
RECIPE = {"name": "slow", "steps": [
    {"name": "add", "patch": {"package": "slowpkg", "modules": ["slowpkg.config"],
                              "edit": {"list_insert": {"names": ["SUPPORTED"], "values": ["kimi_k2"]}}},
     "verify": {"import": ["slowpkg.config"]}}]}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Host:
    """A local host: its own venv seeing `site/slowpkg`, a state dir, the recipe."""

    def __init__(self, root: Path, state: Path | None = None, wide: bool = False) -> None:
        self.root = root
        self.site = root / "site"
        (self.site / "slowpkg").mkdir(parents=True)
        (self.site / "slowpkg" / "__init__.py").write_text("")
        # wide: one 6 KB line, so the run record (its diff holds the line twice) outgrows the backup
        extra = "".join(f', "model_{i:04d}"' for i in range(500)) if wide else ""
        self.config.write_text(SLOW_CONFIG.replace('"qwen"]', '"qwen"' + extra + "]", 1))
        self.original = sha256(self.config)
        self.python = make_venv(root, [self.site])
        self.state = state or root / "state"
        self.recipe = root / "slow.yaml"
        self.recipe.write_text(json.dumps(RECIPE))
        self.marker = root / "verifying"

    @property
    def config(self) -> Path:
        return self.site / "slowpkg" / "config.py"

    def patched(self) -> bool:
        return self.config.read_text().splitlines()[0].endswith('"kimi_k2"]')

    def argv(self, command: str, *extra: str) -> list[str]:
        return [PATCHKIT, command, str(self.recipe), "--json", "-e", f"python={self.python}",
                "--state-dir", str(self.state), *extra]

    def env(self, sleep: float = 0, fail: bool = False) -> dict[str, str]:
        env = {**os.environ, "SLOWPKG_MARKER": str(self.marker), "SLOWPKG_SLEEP": str(sleep)}
        if fail:
            env["SLOWPKG_FAIL"] = "1"
        return env

    def run(self, command: str, *extra: str, sleep: float = 0, fail: bool = False) -> Result:
        proc = subprocess.run(self.argv(command, *extra), capture_output=True, text=True, timeout=120,
                              env=self.env(sleep, fail))
        return Result([command, *extra], proc.returncode, proc.stdout, proc.stderr)

    def start(self, command: str, sleep: float, fail: bool = False) -> subprocess.Popen[str]:
        self.marker.unlink(missing_ok=True)
        return subprocess.Popen(self.argv(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=self.env(sleep, fail))

    def wait_for_check(self, proc: subprocess.Popen[str]) -> None:
        deadline = time.monotonic() + 60
        while not self.marker.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the import check never started"
            time.sleep(0.02)

    def records(self) -> list[dict]:
        folder = self.state / "runs" / "slow"
        return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []

    def files_everywhere(self) -> list[Path]:
        return sorted(p for p in self.root.rglob("*") if p.is_file())


def step(result: Result) -> dict:
    return result.json()["hosts"]["local"]["steps"][0]


def descendants(pid: int) -> list[int]:
    """Every live process below pid (children first), read from /proc."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry)] = int(fields[1])
    out, frontier = [], [pid]
    while frontier:
        kids = [p for p, parent in parents.items() if parent in frontier]
        out += kids
        frontier = kids
    return out


def kill_agent(cli: subprocess.Popen[str]) -> None:
    """kill -9 the host agent (the CLI's child) and the import check it runs."""
    below = descendants(cli.pid)
    assert below, "no agent process under the CLI"
    for pid in below:
        os.kill(pid, signal.SIGKILL)


# ---------------------------------------------------------------------- kills


def test_agent_killed_during_a_failing_check_is_pending_then_apply_restores(tmp_path: Path) -> None:
    host = Host(tmp_path / "h")
    cli = host.start("apply", sleep=30, fail=True)
    host.wait_for_check(cli)
    kill_agent(cli)
    cli.communicate(timeout=60)
    assert cli.returncode == 1
    assert host.patched()  # the agent died before it could restore: the unverified change is there

    status = host.run("status")
    assert status.returncode == 3, status
    assert step(status)["status"] == "pending", status
    assert "pending verification" in step(status)["message"]

    again = host.run("apply", fail=True)  # the next apply re-runs the checks: they fail, the original returns
    assert again.returncode == 1, again
    assert "cut off before its checks were recorded" in step(again)["message"], again
    assert "original restored" in step(again)["message"]
    assert sha256(host.config) == host.original

    after = host.run("status")
    assert step(after)["status"] == "pending", after
    clean = host.run("apply")
    assert clean.returncode == 0 and step(clean)["status"] == "changed", clean
    undo = host.run("rollback")
    assert undo.returncode == 0, undo
    assert sha256(host.config) == host.original


def test_agent_killed_during_a_passing_check_is_verified_by_the_next_apply(tmp_path: Path) -> None:
    host = Host(tmp_path / "h")
    cli = host.start("apply", sleep=30)
    host.wait_for_check(cli)
    kill_agent(cli)
    cli.communicate(timeout=60)

    assert step(host.run("status"))["status"] == "pending"
    again = host.run("apply")
    assert again.returncode == 0, again
    assert step(again)["status"] == "ok" and "verified now" in step(again)["message"], again
    assert [c["name"] for c in step(again)["checks"]] == ["read-back", "syntax", "import"]  # the checks of a write
    status = host.run("status")
    assert status.returncode == 0 and step(status)["status"] == "applied", status
    assert host.run("apply").returncode == 0
    undo = host.run("rollback")  # one rollback undoes the cut-off run's change
    assert undo.returncode == 0, undo
    assert sha256(host.config) == host.original
    assert "roll back again" not in undo.stdout


def test_cli_killed_during_a_failing_check_leaves_the_original_and_a_pending_status(tmp_path: Path) -> None:
    host = Host(tmp_path / "h")
    cli = host.start("apply", sleep=2, fail=True)
    host.wait_for_check(cli)
    cli.kill()  # the agent finishes its request: the check fails, the original goes back
    cli.communicate(timeout=60)
    deadline = time.monotonic() + 30
    while host.patched() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sha256(host.config) == host.original

    status = host.run("status")
    assert step(status)["status"] == "pending", status  # not "drifted", not "applied"
    applied = host.run("apply")
    assert applied.returncode == 0 and step(applied)["status"] == "changed", applied
    undo = host.run("rollback")
    assert undo.returncode == 0 and sha256(host.config) == host.original, undo
    assert "roll back again" not in undo.stdout  # the cut-off run left nothing to undo
    assert not list(host.config.parent.glob("*.patchkit-tmp"))


def test_stale_temp_files_of_dead_agents_are_swept(tmp_path: Path) -> None:
    host = Host(tmp_path / "h")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = host.config.parent / f".config.py.{dead.pid}-0123abcd.patchkit-tmp"
    stale.write_text("half a file")
    foreign = host.config.parent / f".other.py.{dead.pid}-0123abcd.patchkit-tmp"
    foreign.write_text("not ours to judge")
    assert host.run("apply").returncode == 0
    assert not stale.exists() and foreign.exists()


# ---------------------------------------------------------------------- full disks


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[callable]:
    """mount(path, size) -> a fresh tmpfs of that size at path; all unmounted at the end."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root (our machines and CI run as root)")
    mounted: list[Path] = []

    def mount(path: Path, size: str) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)], check=True)
        mounted.append(path)
        return path

    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(folder: Path, leave: int) -> None:
    """Fill the file system of folder until at most `leave` bytes are free."""
    st = os.statvfs(folder)
    free = st.f_bavail * st.f_frsize
    with open(folder / "ballast", "wb") as f:
        try:
            f.write(b"\0" * max(free - leave, 0))
            f.flush()
            os.fsync(f.fileno())
        except OSError:
            pass


@pytest.mark.parametrize("wide", [False, True], ids=["small-file", "wide-line"])
@pytest.mark.parametrize("leave", [0, 4096, 8192, 12288, 16384, 20480, 24576, 32768, 40960])
def test_a_full_state_dir_never_leaves_a_change_without_its_record(tmp_path: Path, tmpfs, leave: int,
                                                                   wide: bool) -> None:
    state = tmpfs(tmp_path / "state", "256k")
    host = Host(tmp_path / "h", state=state, wide=wide)
    fill(state, leave)
    applied = host.run("apply")
    assert applied.returncode in (0, 1), applied
    assert "Traceback" not in applied.stderr
    if host.patched():
        # Changed: then the journal names the change and its backup, and rollback works.
        named = [s for r in host.records() for s in r["steps"] if s.get("file") == str(host.config)]
        assert named and all(Path(s["backup"]).is_file() for s in named), applied
        (state / "ballast").unlink()
        undo = host.run("rollback")
        assert undo.returncode == 0, undo
        assert sha256(host.config) == host.original
    else:
        assert applied.returncode == 1, applied
        assert sha256(host.config) == host.original
        report = applied.json()["hosts"]["local"]
        assert report["status"] == "failed", applied
        said = report["message"] + " ".join(s["message"] for s in report["steps"])
        assert "No space left on device" in said or "journal write of this run failed" in said, applied


def test_a_deploy_that_fills_the_disk_leaves_no_part_file(tmp_path: Path, tmpfs) -> None:
    dest = tmpfs(tmp_path / "dest", "128k")
    src = tmp_path / "src"
    src.mkdir()
    (src / "big.bin").write_bytes(os.urandom(512 * 1024))
    recipe = tmp_path / "deploy.yaml"
    recipe.write_text(json.dumps({"name": "d", "steps": [{"name": "dep", "deploy": {"src": str(src), "dest": str(dest)}}]}))
    proc = subprocess.run([PATCHKIT, "apply", str(recipe), "--json", "--state-dir", str(tmp_path / "state")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "No space left on device" in proc.stdout
    assert os.listdir(dest) == []  # no part file keeping the disk full


# ---------------------------------------------------------------------- symlinks


@pytest.mark.parametrize("planted", ["lock", "runs", "backups"])
def test_symlinks_in_the_state_dir_are_refused_not_followed(tmp_path: Path, planted: str) -> None:
    host = Host(tmp_path / "h")
    host.state.mkdir()
    victim = tmp_path / "victim"
    if planted == "lock":
        victim.write_text("someone else's file\n")
    else:
        victim.mkdir(mode=0o755)
        (victim / "keep").write_text("x")
    (host.state / planted).symlink_to(victim)
    result = host.run("apply")
    assert result.returncode == 1, result
    assert "is a symlink; refusing to follow it" in result.stdout, result
    assert sha256(host.config) == host.original
    if planted == "lock":
        assert victim.read_text() == "someone else's file\n"
    else:
        assert (victim.stat().st_mode & 0o777) == 0o755 and os.listdir(victim) == ["keep"]


def test_a_symlinked_module_is_refused_with_its_target_named(tmp_path: Path) -> None:
    host = Host(tmp_path / "h")
    elsewhere = tmp_path / "shared" / "config.py"
    elsewhere.parent.mkdir()
    host.config.rename(elsewhere)
    host.config.symlink_to(elsewhere)
    for command in ("plan", "apply"):
        result = host.run(command)
        assert result.returncode == 1, result
        assert f"is a symlink to {elsewhere}" in step(result)["message"], result
    assert host.config.is_symlink() and sha256(elsewhere) == host.original


ADD_TO_EXT = "--- /dev/null\n+++ b/slowpkg/ext/new.py\n@@ -0,0 +1 @@\n+X = 1\n"
HUNK_IN_EXT = "--- a/slowpkg/ext/mod.py\n+++ b/slowpkg/ext/mod.py\n@@ -1 +1 @@\n-LIMIT = 1\n+LIMIT = 2\n"
SET_IN_EXT = {"set_value": {"names": ["LIMIT"], "value": 2}}


def ext_recipe(host: Host, edit: dict) -> Path:
    recipe = host.root / "ext.yaml"
    modules = {} if "diff" in edit else {"modules": ["slowpkg.ext.mod"]}  # a diff names its own files
    recipe.write_text(json.dumps({"name": "ext", "steps": [
        {"name": "ext", "patch": {"package": "slowpkg", **modules, "edit": edit}}]}))
    return recipe


@pytest.mark.parametrize("edit", [{"diff": {"text": ADD_TO_EXT}}, {"diff": {"text": HUNK_IN_EXT}}, SET_IN_EXT],
                         ids=["diff-adds-a-file", "diff-hunk", "set_value"])
def test_a_symlinked_folder_inside_the_package_is_never_written_through(tmp_path: Path, edit: dict) -> None:
    """`slowpkg/ext -> /elsewhere`: the plan would name package paths while the bytes land
    elsewhere. Every edit kind is refused on the host, naming the real path."""
    host = Host(tmp_path / "h")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "__init__.py").write_text("")
    (elsewhere / "mod.py").write_text("LIMIT = 1\n")
    (host.site / "slowpkg" / "ext").symlink_to(elsewhere)
    recipe = ext_recipe(host, edit)
    real = os.path.realpath(elsewhere)
    for command in ("plan", "apply"):
        proc = subprocess.run([PATCHKIT, command, str(recipe), "--json", "-e", f"python={host.python}",
                               "--state-dir", str(host.state)], capture_output=True, text=True, timeout=120,
                              check=False)
        result = Result([command], proc.returncode, proc.stdout, proc.stderr)
        assert result.returncode == 1, result
        message = step(result)["message"]
        assert f"is a symlink to {real}, outside the package folder" in message, message
    assert sorted(os.listdir(elsewhere)) == ["__init__.py", "mod.py"]
    assert (elsewhere / "mod.py").read_text() == "LIMIT = 1\n"


def test_a_symlinked_folder_that_stays_inside_the_package_is_patched(tmp_path: Path) -> None:
    host = Host(tmp_path / "h")
    inner = host.site / "slowpkg" / "inner"
    inner.mkdir()
    (inner / "__init__.py").write_text("")
    (inner / "mod.py").write_text("LIMIT = 1\n")
    (host.site / "slowpkg" / "ext").symlink_to(inner)
    proc = subprocess.run([PATCHKIT, "apply", str(ext_recipe(host, SET_IN_EXT)), "--json", "-e",
                           f"python={host.python}", "--state-dir", str(host.state)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (inner / "mod.py").read_text() == "LIMIT = 2\n"


def test_the_host_refuses_a_write_that_leaves_the_package_folder(tmp_path: Path) -> None:
    """The write op checks too (a symlink planted between plan and apply): op_apply_files
    refuses a path whose folder links out of the root it is given."""
    agent = host_agent()
    root = tmp_path / "pkg"
    root.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "mod.py").write_text("LIMIT = 1\n")
    (root / "ext").symlink_to(elsewhere)
    target = str(root / "ext" / "mod.py")
    original = hashlib.sha256(b"LIMIT = 1\n").hexdigest()
    new = base64.b64encode(b"LIMIT = 2\n").decode()
    backup = str(tmp_path / "state" / "backups" / "r" / "mod.py")
    with pytest.raises(agent.Refused, match="is a symlink to .*elsewhere, outside the package folder"):
        agent.op_apply_files([{"path": target, "expected_sha256": original, "content_b64": new,
                               "backup_path": backup}], [], 10, root=str(root))
    with pytest.raises(agent.Refused, match="outside the package folder"):
        agent.op_read(str(root / ".." / "elsewhere" / "mod.py"), root=str(root))
    assert (elsewhere / "mod.py").read_text() == "LIMIT = 1\n"


def deploy_recipe(tmp_path: Path, src: Path, dest: Path) -> Path:
    recipe = tmp_path / "deploy.yaml"
    recipe.write_text(json.dumps({"name": "d", "steps": [{"name": "dep", "deploy": {"src": str(src), "dest": str(dest)}}]}))
    return recipe


@pytest.mark.parametrize("planted", ["part-file", "folder-inside-dest", "dest-entry"])
def test_a_deploy_never_writes_through_a_planted_symlink(tmp_path: Path, planted: str) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "weights.bin").write_bytes(b"new weights")
    dest = tmp_path / "dest"
    (dest).mkdir()
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "weights.bin").write_bytes(b"precious")
    if planted == "part-file":
        (dest / "sub").mkdir()
        (dest / "sub" / ".weights.bin.patchkit-part").symlink_to(victim / "weights.bin")
    elif planted == "folder-inside-dest":
        (dest / "sub").symlink_to(victim)
    else:
        (dest / "sub").mkdir()
        (dest / "sub" / "weights.bin").symlink_to(victim / "weights.bin")
    proc = subprocess.run([PATCHKIT, "apply", str(deploy_recipe(tmp_path, src, dest)), "--json",
                           "--state-dir", str(tmp_path / "state")], capture_output=True, text=True, timeout=120)
    assert (victim / "weights.bin").read_bytes() == b"precious"
    assert sorted(os.listdir(victim)) == ["weights.bin"]
    if planted == "part-file":  # a stale part file is replaced, never written through
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert (dest / "sub" / "weights.bin").read_bytes() == b"new weights"
    else:
        assert proc.returncode == 1, proc.stdout + proc.stderr
        refused = {"folder-inside-dest": f"{dest / 'sub'} is a symlink; patchkit does not write through it",
                   "dest-entry": "refusing to"}[planted]
        assert refused in proc.stdout and "symlink" in proc.stdout, proc.stdout


# ---------------------------------------------------------------------- two operators, one file


def test_two_state_dirs_on_one_file_never_lose_the_verified_change(tmp_path: Path) -> None:
    """Run A's check fails slowly; run B (another state dir) applies meanwhile. A's restore must
    not overwrite B's verified change, and B must not report a change that A then takes away."""
    a = Host(tmp_path / "a")
    b_state = tmp_path / "b-state"
    cli_a = a.start("apply", sleep=3, fail=True)
    a.wait_for_check(cli_a)
    b = subprocess.run([PATCHKIT, "apply", str(a.recipe), "--json", "-e", f"python={a.python}",
                        "--state-dir", str(b_state)], capture_output=True, text=True, timeout=120,
                       env={k: v for k, v in os.environ.items() if not k.startswith("SLOWPKG")})
    out_a, _ = cli_a.communicate(timeout=60)
    assert cli_a.returncode == 1
    assert b.returncode == 0, b.stdout + b.stderr
    b_step = json.loads(b.stdout)["hosts"]["local"]["steps"][0]
    assert b_step["status"] == "changed", b_step  # B waited for A, then made (and verified) its own change
    assert a.patched() and sha256(a.config) == b_step["sha256_after"]


def test_a_hand_edit_during_a_failing_check_is_not_overwritten_by_the_restore(tmp_path: Path) -> None:
    host = Host(tmp_path / "h")
    cli = host.start("apply", sleep=2, fail=True)
    host.wait_for_check(cli)
    hand_edit = ORIGINAL.replace('"qwen"]', '"qwen", "mine"]')
    host.config.write_text(hand_edit)  # someone's sed, which takes no lock
    out, _ = cli.communicate(timeout=60)
    assert cli.returncode == 1
    failed = json.loads(out)["hosts"]["local"]["steps"][0]
    assert "NOT restored" in failed["message"] and "changed while it was checked" in failed["message"], failed
    assert failed["restored"] is False
    assert host.config.read_text() == hand_edit


# ---------------------------------------------------------------------- odd files and interpreters


def test_a_utf8_bom_survives_a_patch(tmp_path: Path) -> None:
    host = Host(tmp_path / "h")
    host.config.write_bytes(b"\xef\xbb\xbf" + ORIGINAL.encode())
    result = host.run("apply")
    assert result.returncode == 0, result
    data = host.config.read_bytes()
    assert data.startswith(b"\xef\xbb\xbf") and b'"kimi_k2"' in data
    assert host.run("apply").returncode == 0 and step(host.run("apply"))["status"] == "ok"


def load_host_agent():
    """The host agent's core as a module (stdlib only: it runs here as on a host)."""
    return host_agent()


def test_a_module_owned_by_someone_else_is_not_taken_over(tmp_path: Path, monkeypatch) -> None:
    """A non-root agent that may write the folder could replace a root-owned 0444 module, but
    the new file would be its own: refused, nothing written. (The agent sees uid 1000 here.)"""
    agent = load_host_agent()
    module = tmp_path / "module.py"
    module.write_text("X = 1\n")
    module.chmod(0o444)
    os.chown(module, 0, 0)
    before = sha256(module)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(agent.Refused, match="belongs to uid 0, not to this user .uid 1000.: replacing it would change"):
        agent.op_apply_files([{"path": str(module), "expected_sha256": before,
                               "content_b64": base64.b64encode(b"X = 2\n").decode(),
                               "backup_path": str(tmp_path / "state" / "backups" / "r" / "module.py")}], [], 5)
    assert sha256(module) == before and module.stat().st_uid == 0


def test_a_same_size_edit_within_the_second_never_runs_stale_bytecode(tmp_path: Path, tmpfs) -> None:
    """A read-only __pycache__ keeps a .pyc patchkit cannot remove: the rewritten file must not
    match it (same size, same mtime second), or Python would run the old code."""
    pkg = tmp_path / "site" / "samepkg"
    pkg.mkdir(parents=True)
    module = pkg / "flag.py"
    module.write_text("VALUE = 1\n")
    cache = tmpfs(pkg / "__pycache__", "1m")
    python = make_venv(tmp_path, [tmp_path / "site"])
    while time.time() % 1 > 0.3:  # start early in a second: the whole edit fits in it
        time.sleep(0.01)
    os.utime(module)
    subprocess.run([str(python), "-m", "py_compile", str(module)], check=True)
    assert list(cache.iterdir()), "no .pyc was written"
    subprocess.run(["mount", "-o", "remount,ro", str(cache)], check=True)
    recipe = tmp_path / "flag.yaml"
    recipe.write_text(json.dumps({"name": "flag", "steps": [
        {"name": "set", "patch": {"package": "samepkg", "modules": ["samepkg.flag"],
                                  "edit": {"set_value": {"names": ["VALUE"], "value": 2}}}},
        {"name": "sees-it", "check": {"python": "import samepkg.flag as f; assert f.VALUE == 2, f.VALUE"}}]}))
    proc = subprocess.run([PATCHKIT, "apply", str(recipe), "--json", "-e", f"python={python}",
                           "--state-dir", str(tmp_path / "state")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = subprocess.run([str(python), "-c", "import samepkg.flag as f; print(f.VALUE)"], capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "2"


def test_a_python_older_than_3_8_is_named_plainly(tmp_path: Path) -> None:
    old = Path("/root/.pyenv/versions/3.7.16/bin/python3.7")
    if not old.exists():
        pytest.skip("pyenv's Python 3.7 is not on this machine (it is on ours: CI fails on any skip)")
    host = Host(tmp_path / "h")
    proc = subprocess.run([PATCHKIT, "apply", str(host.recipe), "--json", "-e", f"python={old}",
                           "--state-dir", str(host.state)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    message = json.loads(proc.stdout)["hosts"]["local"]["message"]
    assert "patchkit needs Python >= 3.8 on the host" in message and "is 3.7" in message, message
    assert "invalid syntax" not in message


# ---------------------------------------------------------------------- deploys cut off or misconfigured


def drafter_recipe(tmp_path: Path, dest: Path, target_config: Path) -> Path:
    from fixtures.make_drafter import make_drafter

    src = make_drafter(tmp_path / "drafter", "valid")
    recipe = tmp_path / "drafter.yaml"
    recipe.write_text(json.dumps({"name": "d", "steps": [{"name": "dep", "deploy": {
        "src": str(src), "dest": str(dest), "validate": "eagle3-drafter", "target": {"config": str(target_config)}}}]}))
    return recipe


def test_a_missing_target_config_is_found_before_any_byte_is_sent(tmp_path: Path) -> None:
    dest = tmp_path / "models" / "drafter"
    recipe = drafter_recipe(tmp_path, dest, tmp_path / "no-such-target" / "config.json")
    proc = subprocess.run([PATCHKIT, "apply", str(recipe), "--json", "--state-dir", str(tmp_path / "state")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    message = json.loads(proc.stdout)["hosts"]["local"]["steps"][0]["message"]
    assert "does not exist on the host; nothing sent" in message, message
    assert not dest.exists() and not (tmp_path / "models").exists()


def test_a_deploy_cut_off_after_its_files_landed_is_pending_then_completed(tmp_path: Path) -> None:
    """The state a kill between the last rename and the final record leaves: the files in place,
    the journal holding only the intent record (written before the first byte). Made here by
    turning a finished run's record back into that intent record."""
    from fixtures.make_drafter import write_target_config

    dest = tmp_path / "models" / "drafter"
    recipe = drafter_recipe(tmp_path, dest, write_target_config(tmp_path / "target"))
    state = tmp_path / "state"

    def run(command: str) -> Result:
        proc = subprocess.run([PATCHKIT, command, str(recipe), "--json", "--state-dir", str(state)],
                              capture_output=True, text=True, timeout=120)
        return Result([command], proc.returncode, proc.stdout, proc.stderr)

    assert run("apply").returncode == 0
    [record_file] = (state / "runs" / "d").glob("*.json")
    record = json.loads(record_file.read_text())
    deployed = record["steps"][0]
    deployed["details"]["in_progress"] = True
    deployed["details"]["files"] = [{**f, "planned": True} for f in deployed["details"]["files"]]
    deployed["message"] = "interrupted while sending"
    record.update(status="running", finished=None)
    record_file.write_text(json.dumps(record))

    status = run("status")
    assert status.returncode == 3 and step(status)["status"] == "pending", status
    assert "cut off while deploying" in step(status)["message"]
    again = run("apply")
    assert again.returncode == 0 and step(again)["status"] == "ok", again
    assert "completed and validated now" in step(again)["message"]
    done = run("status")
    assert done.returncode == 0 and step(done)["status"] == "applied", done
    assert "deployed by patchkit" in step(done)["message"]
    undo = run("rollback")
    assert undo.returncode == 0, undo
    assert not dest.exists()
