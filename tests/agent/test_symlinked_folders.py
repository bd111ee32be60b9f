"""Rollback and a later verification never follow a symlink out of the folder a change was
confined to (a patch: its package folder; a deploy: its dest), --force or not.

Between an apply and its rollback a folder inside the package can be swapped for a symlink to
a copy elsewhere (`toyllm/config -> /outside`, holding exactly what patchkit wrote, so no drift
shows): a rollback that followed it would write the backups' bytes (or remove files) out there.
The real CLI and the real host agent on the local transport, real files: each test swaps the
folder, asks for the rollback, checks that nothing outside changed and that the journal still
rolls back once the folder is put back. The agent-level tests call the ops the CLI cannot reach
with a symlinked folder (its plan refuses to read through one first: op_verify) and the
old-journal rule (a record that names no root). The last ones race the agent's own check: the
folder is swapped right after its by-name check passed, before it opens the folder; the ops
work through the folder's descriptor and check that (core.fd_escape).
"""

from __future__ import annotations

import io
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.agent.test_old_journals import SINGLE, originals, plant
from tests.helpers import PKGS, Sandbox, host_agent, recipe, run_patchkit, sandbox_fixture, step  # noqa: F401

TOY = "toyllm_eagle3.yaml"


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def swap_for_symlink(folder: Path, outside: Path) -> Path:
    """folder moved aside, a copy of it at `outside` (what patchkit wrote, byte for byte), and
    folder a symlink to that copy; returns where the real folder went."""
    shutil.copytree(folder, outside, ignore=shutil.ignore_patterns("__pycache__"))
    aside = folder.with_name(folder.name + ".real")
    folder.rename(aside)
    folder.symlink_to(outside)
    return aside


def put_back(folder: Path, aside: Path) -> None:
    folder.unlink()
    aside.rename(folder)


def rolls_back_once_put_back(sb: Sandbox, toy: str, folder: Path, aside: Path) -> None:
    """With the swapped folder put back, the refused rollback goes through: originals restored."""
    put_back(folder, aside)
    back = sb.run("rollback", toy, json_out=True)
    assert back.returncode == 0, back
    for rel, data in originals(sb, SINGLE).items():
        assert sb.file(rel).read_bytes() == data, rel


def live_steps(sb: Sandbox, recipe_name: str) -> list[str]:
    """Steps of the apply runs still in place (not rolled back), by the journal."""
    return sorted(s["name"] for r in sb.run_records(recipe_name) if r["kind"] == "apply"
                  for s in r["steps"] if s["status"] == "changed" and s["name"] not in r["rolled_back_steps"])


def test_the_journal_records_the_package_folder_the_apply_was_confined_to(sandbox: Sandbox) -> None:
    assert sandbox.run("apply", recipe(TOY)).returncode == 0
    (record,) = sandbox.run_records("toyllm_eagle3")
    roots = {s["name"]: s.get("root") for s in record["steps"] if s["kind"] == "patch"}
    assert roots == {"eagle3-whitelist": str(sandbox.pkgs / "toyllm"), "fp32-dtype": str(sandbox.pkgs / "toyllm")}


@pytest.mark.parametrize("force", [False, True], ids=["plain", "force"])
def test_rollback_refuses_a_package_folder_swapped_for_a_symlink_out_of_it(sandbox: Sandbox, tmp_path: Path,
                                                                           force: bool) -> None:
    toy = recipe(TOY)
    assert sandbox.run("apply", toy).returncode == 0
    config, outside = sandbox.pkgs / "toyllm" / "config", tmp_path / "outside"
    aside = swap_for_symlink(config, outside)
    before = snapshot(outside)

    refused = sandbox.run("rollback", toy, *(["--force"] if force else []), json_out=True)
    assert refused.returncode == 1, refused
    for name, rel in (("eagle3-whitelist", "speculative.py"), ("fp32-dtype", "model.py")):
        got = step(refused, name)
        assert got["status"] == "failed", got
        assert f"{config} is a symlink to {outside}, outside" in got["message"], got
        assert f"does not restore {config / rel} through it" in got["message"], got
        assert "--force does not override this" in got["message"], got
    assert snapshot(outside) == before  # not one byte written out there
    assert live_steps(sandbox, "toyllm_eagle3") == ["eagle3-whitelist", "fp32-dtype"]

    rolls_back_once_put_back(sandbox, toy, config, aside)
    assert live_steps(sandbox, "toyllm_eagle3") == []


DIFF = '''--- a/toyllm/__init__.py
+++ b/toyllm/__init__.py
@@ -3,3 +3,4 @@
 from toyllm._version import __version__
 
 __all__ = ["__version__"]
+PATCHED = True
--- a/toyllm/config/model.py
+++ b/toyllm/config/model.py
@@ -3,3 +3,3 @@
 
-_FLOAT16_DTYPES = ('float16', 'bfloat16')  # single quotes on purpose
+_FLOAT16_DTYPES = ('float16', 'bfloat16', 'fp8')  # single quotes on purpose
 
'''


def test_a_unit_with_one_file_behind_a_symlink_is_not_rolled_back_at_all(sandbox: Sandbox, tmp_path: Path) -> None:
    """toyllm/__init__.py is still in its folder, config/model.py is not: neither goes back
    (a half-undone unit is worse than either state), --force or not."""
    (tmp_path / "fix.patch").write_text(DIFF)
    fix = tmp_path / "fix.yaml"
    fix.write_text("name: toyfix\nsteps:\n  - name: two-files\n    patch:\n      package: toyllm\n"
                   "      edit: {diff: {file: fix.patch}}\n    verify: {import: [toyllm.config]}\n")
    applied = sandbox.run("apply", str(fix), json_out=True)
    assert step(applied, "two-files")["status"] == "changed", applied
    init = sandbox.file("toyllm/__init__.py")
    patched_init = init.read_bytes()
    config, outside = sandbox.pkgs / "toyllm" / "config", tmp_path / "outside"
    aside = swap_for_symlink(config, outside)
    before = snapshot(outside)

    for extra in ([], ["--force"]):
        refused = sandbox.run("rollback", str(fix), *extra, json_out=True)
        assert refused.returncode == 1, refused
        message = step(refused, "two-files")["message"]
        assert f"{config} is a symlink to {outside}" in message and "roll back" in message, message
        assert init.read_bytes() == patched_init, extra  # the file still inside was not put back either
        assert snapshot(outside) == before
    put_back(config, aside)
    assert sandbox.run("rollback", str(fix)).returncode == 0
    assert originals(sandbox, ["toyllm/__init__.py", "toyllm/config/model.py"]) == {
        rel: sandbox.file(rel).read_bytes() for rel in ("toyllm/__init__.py", "toyllm/config/model.py")}


def test_rollback_refuses_a_backup_reached_through_a_symlink(sandbox: Sandbox, tmp_path: Path) -> None:
    toy = recipe(TOY)
    assert sandbox.run("apply", toy).returncode == 0
    (record,) = sandbox.run_records("toyllm_eagle3")
    backups = sandbox.state / "backups" / record["run_id"]
    aside = swap_for_symlink(backups, tmp_path / "elsewhere")
    patched = {rel: sandbox.file(rel).read_bytes() for rel in SINGLE}

    refused = sandbox.run("rollback", toy, "--force", json_out=True)
    assert refused.returncode == 1, refused
    message = step(refused, "eagle3-whitelist")["message"]
    assert f"{backups} is a symlink (to {tmp_path / 'elsewhere'})" in message, message
    assert "never reads a backup through a symlink" in message, message
    assert {rel: sandbox.file(rel).read_bytes() for rel in SINGLE} == patched

    rolls_back_once_put_back(sandbox, toy, backups, aside)


def test_an_old_record_without_a_root_is_held_to_the_package_folder_located_now(sandbox: Sandbox,
                                                                                tmp_path: Path) -> None:
    """The fixture's record (written before roots were journaled) names none: rollback holds it
    to the package folder the step locates on the host now (pkgs/toyllm here), as every record."""
    toy = recipe(TOY)
    assert sandbox.run("apply", toy).returncode == 0
    record = plant(sandbox, "patch-single-apply.json", "toyllm_eagle3")
    assert all("root" not in s for s in record["steps"])
    config, outside = sandbox.pkgs / "toyllm" / "config", tmp_path / "outside"
    aside = swap_for_symlink(config, outside)
    before = snapshot(outside)

    refused = sandbox.run("rollback", toy, "--force", json_out=True)
    assert refused.returncode == 1, refused
    message = step(refused, "eagle3-whitelist")["message"]
    assert f"{config} is a symlink to {outside}, outside the change's folder {sandbox.pkgs / 'toyllm'}" in message
    assert snapshot(outside) == before

    rolls_back_once_put_back(sandbox, toy, config, aside)


def test_a_cut_off_unit_is_not_settled_through_a_folder_swapped_for_a_symlink(sandbox: Sandbox,
                                                                             tmp_path: Path) -> None:
    """The interrupted-verify path through the CLI: the plan's read refuses the symlinked folder
    before the checks would run (op_verify holds on its own too: the agent-level test below)."""
    toy = recipe(TOY)
    assert sandbox.run("apply", toy).returncode == 0
    (path,) = (sandbox.state / "runs" / "toyllm_eagle3").glob("*.json")
    record = json.loads(path.read_text())
    for done in record["steps"]:
        done["verified"] = False if done["name"] == "eagle3-whitelist" else done.get("verified")
    path.write_text(json.dumps(record))  # as a run cut off before its checks were recorded leaves it
    config, outside = sandbox.pkgs / "toyllm" / "config", tmp_path / "outside"
    aside = swap_for_symlink(config, outside)
    before = snapshot(outside)

    # only the unit's step: the recipe's preflight check imports the package with the target
    # interpreter, which follows the swapped folder as Python does (and writes bytecode there)
    refused = sandbox.run("apply", toy, "--steps", "eagle3-whitelist", json_out=True)
    assert refused.returncode == 1, refused
    message = step(refused, "eagle3-whitelist")["message"]
    assert f"{config} is a symlink to {outside}, outside the package folder" in message, message
    assert snapshot(outside) == before
    put_back(config, aside)
    settled = step(sandbox.run("apply", toy, json_out=True), "eagle3-whitelist")
    assert settled["status"] == "ok" and "verified now" in settled["message"], settled


# ---------------------------------------------------------------- deploy: dest is the root

def test_a_deploy_rollback_refuses_a_dest_subfolder_swapped_for_a_symlink(tmp_path: Path) -> None:
    """shards/ of a deployed model swapped for a link to a copy elsewhere: rollback would put
    the replaced shard's backup there and remove the file the deploy added out there."""
    src, dest, state = tmp_path / "src", tmp_path / "dest", tmp_path / "state"
    (src / "shards").mkdir(parents=True)
    (dest / "shards").mkdir(parents=True)
    (src / "shards" / "a.bin").write_bytes(b"new shard a\n")  # replaces dest's: restored from its backup
    (src / "shards" / "b.bin").write_bytes(b"new shard b\n")  # added by the deploy: removed by rollback
    (dest / "shards" / "a.bin").write_bytes(b"old shard a\n")
    deploy = tmp_path / "deploy.yaml"
    deploy.write_text(f"name: artifact\nsteps:\n  - name: sync\n    deploy: {{src: {src}, dest: {dest}}}\n")
    common = ["--state-dir", str(state), "--json"]
    assert run_patchkit("apply", str(deploy), *common).returncode == 0
    outside = tmp_path / "outside"
    aside = swap_for_symlink(dest / "shards", outside)
    before = snapshot(outside)

    for extra in ([], ["--force"]):
        refused = run_patchkit("rollback", str(deploy), *common, *extra)
        assert refused.returncode == 1, refused
        message = refused.hosts()["local"]["steps"][0]["message"]
        assert f"{dest / 'shards'} is a symlink to {outside}, outside the change's folder {dest}" in message, message
        assert snapshot(outside) == before, extra

    put_back(dest / "shards", aside)
    back = run_patchkit("rollback", str(deploy), *common)
    assert back.returncode == 0, back
    assert snapshot(dest) == {"shards/a.bin": b"old shard a\n"}


def test_a_deploy_never_writes_its_backup_through_a_symlinked_backups_folder(tmp_path: Path) -> None:
    """backups/ in the state folder swapped for a symlink would steer the backup of the file a
    deploy replaces out there (and a rollback's bytes back from there): refused, host as it was."""
    src, dest, state, outside = tmp_path / "src", tmp_path / "dest", tmp_path / "state", tmp_path / "outside"
    for folder in (src, dest, state, outside):
        folder.mkdir()
    (src / "a.bin").write_bytes(b"new a\n")
    (dest / "a.bin").write_bytes(b"old a\n")
    (state / "backups").symlink_to(outside)
    deploy = tmp_path / "deploy.yaml"
    deploy.write_text(f"name: artifact\nsteps:\n  - name: sync\n    deploy: {{src: {src}, dest: {dest}}}\n")
    applied = run_patchkit("apply", str(deploy), "--state-dir", str(state), "--json")
    assert applied.returncode == 1, applied
    message = applied.hosts()["local"]["steps"][0]["message"]
    assert f"{state / 'backups'} is a symlink; refusing to follow it" in message, message
    assert list(outside.rglob("*")) == []
    assert sorted(p.name for p in dest.iterdir()) == ["a.bin"]
    assert (dest / "a.bin").read_bytes() == b"old a\n"


# ---------------------------------------------------------------- the agent's ops themselves

@pytest.fixture(name="agent")
def agent_fixture() -> Any:
    return host_agent("transfer")


def test_verify_of_a_cut_off_unit_refuses_a_folder_swapped_for_a_symlink(agent: Any, tmp_path: Path) -> None:
    """The CLI's plan refuses to read through the symlink before it would settle the unit; the
    op holds on its own (the folder may be swapped between the plan's read and the checks)."""
    pkg = tmp_path / "site" / "toyllm"
    shutil.copytree(PKGS / "toyllm" / "toyllm", pkg)
    outside = tmp_path / "outside"
    swap_for_symlink(pkg / "config", outside)
    spec = outside / "speculative.py"
    files = [{"path": str(pkg / "config" / "speculative.py"), "expected_sha256": agent.sha256_file(str(spec))}]
    with pytest.raises(agent.Refused, match=f"{pkg / 'config'} is a symlink to {outside}, outside .*does not verify"):
        agent.op_verify(files, [], 30, str(pkg))
    inside = [{"path": str(pkg / "__init__.py"), "expected_sha256": agent.sha256_file(str(pkg / "__init__.py"))}]
    assert agent.op_verify(inside, [], 30, str(pkg))["ok"] is True


def restore_args(target: Path, backup: Path, state: Path, data: bytes, root: str | None) -> dict[str, Any]:
    import hashlib

    return {"path": str(target), "backup_path": str(backup), "expected_current": hashlib.sha256(
        target.read_bytes()).hexdigest(), "original_sha256": hashlib.sha256(data).hexdigest(), "force": True,
        "root": root, "state_dir": str(state)}


def test_a_record_naming_no_root_off_the_import_path_refuses_any_symlinked_folder(agent: Any,
                                                                                   tmp_path: Path) -> None:
    """No sys.path entry holds the file (another interpreter, a moved environment): the
    package folder cannot be derived, so every folder from / down is held to no symlink."""
    assert not any(str(tmp_path).startswith(p) for p in sys.path if p and p != "/")
    real, state = tmp_path / "real", tmp_path / "state"
    real.mkdir()
    (real / "m.py").write_text("X = 2\n")
    backup = state / "backups" / "run" / "step--m.py"
    backup.parent.mkdir(parents=True)
    backup.write_text("X = 1\n")
    link = tmp_path / "pkg"
    link.symlink_to(real)
    with pytest.raises(agent.Refused, match=f"{link} is a symlink to {real}: patchkit does not restore"):
        agent.op_restore(**restore_args(link / "m.py", backup, state, b"X = 1\n", None))
    assert (real / "m.py").read_text() == "X = 2\n"
    assert agent.op_restore(**restore_args(real / "m.py", backup, state, b"X = 1\n", None))["already"] is False
    assert (real / "m.py").read_text() == "X = 1\n"


def test_a_backup_outside_the_state_folders_backups_is_refused(agent: Any, tmp_path: Path) -> None:
    target, state = tmp_path / "pkg" / "m.py", tmp_path / "state"
    target.parent.mkdir()
    target.write_text("X = 2\n")
    stray = tmp_path / "stray-backup"
    stray.write_text("X = 1\n")
    for backup in (stray, state / "backups" / ".." / ".." / "stray-backup"):
        with pytest.raises(agent.Refused, match="is outside .*/state/backups: patchkit restores only from its own"):
            agent.op_restore(**restore_args(target, backup, state, b"X = 1\n", str(target.parent)))
    assert target.read_text() == "X = 2\n"


def test_remove_file_refuses_a_folder_swapped_for_a_symlink(agent: Any, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    (dest / "sub").mkdir(parents=True)
    (dest / "sub" / "added.bin").write_bytes(b"deployed\n")
    outside = tmp_path / "outside"
    swap_for_symlink(dest / "sub", outside)
    sha = agent.sha256_file(str(outside / "added.bin"))
    with pytest.raises(agent.Refused, match="does not remove"):
        agent.op_remove_file(str(dest / "sub" / "added.bin"), sha, str(dest), force=True,
                             remove_dirs=[str(dest / "sub")])
    assert (outside / "added.bin").read_bytes() == b"deployed\n"


@pytest.mark.parametrize("planted", ["run-1", "run-1/sync", "run-1/sync/sub"])
def test_receive_file_refuses_a_symlink_on_the_way_to_its_backup(agent: Any, tmp_path: Path, planted: str) -> None:
    """Any folder between the state folder's backups/ and the backup (the run's, the step's, the
    file's own folders) planted as a symlink: the file is not replaced, nothing lands outside."""
    import hashlib

    dest, state, outside = tmp_path / "dest", tmp_path / "state", tmp_path / "outside"
    (dest / "sub").mkdir(parents=True)
    (dest / "sub" / "w.bin").write_bytes(b"old\n")
    outside.mkdir()
    link = state / "backups" / planted
    link.parent.mkdir(parents=True, mode=0o700)
    link.symlink_to(outside)
    data = b"new\n"
    backup = state / "backups" / "run-1" / "sync" / "sub" / "w.bin"
    with pytest.raises(agent.Refused, match=f"{link} is a symlink; refusing to follow it"):
        agent.op_receive_file(io.BytesIO(data), str(dest), "sub/w.bin", 0, len(data),
                              hashlib.sha256(data).hexdigest(), 0o644, str(backup), str(state / "cache.json"))
    assert list(outside.rglob("*")) == []
    assert (dest / "sub" / "w.bin").read_bytes() == b"old\n"
    assert sorted(p.name for p in (dest / "sub").iterdir()) == ["w.bin"]


def test_receive_file_refuses_a_backup_path_that_does_not_end_with_the_files_path(agent: Any,
                                                                                  tmp_path: Path) -> None:
    """The backup's folders are made from STATE/backups down, found by taking the file's path
    off the backup's: a backup path of another shape would have folders made elsewhere."""
    import hashlib

    dest, state = tmp_path / "dest", tmp_path / "state"
    dest.mkdir()
    (dest / "w.bin").write_bytes(b"old\n")
    data = b"new\n"
    backup = state / "backups" / "run-1" / "sync" / "other.bin"
    with pytest.raises(agent.Refused, match="does not end with the file's path w.bin; nothing written"):
        agent.op_receive_file(io.BytesIO(data), str(dest), "w.bin", 0, len(data),
                              hashlib.sha256(data).hexdigest(), 0o644, str(backup), str(state / "cache.json"))
    assert sorted(p.name for p in dest.iterdir()) == ["w.bin"]
    assert (dest / "w.bin").read_bytes() == b"old\n"
    assert not state.exists()


# ---------------------------------------------------------------- the race: swapped after the check

def listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def swap_right_after_the_check(monkeypatch: pytest.MonkeyPatch, agent: Any, check: str, folder: Path,
                               outside: Path, swap_back: bool) -> dict[str, Path]:
    """Wrap the agent's by-name check `check` (refuse_path_escape or refuse_leaving_root): the
    first time it passes, `folder` is swapped for a symlink to a copy of it at `outside` before
    the agent goes on (to open it). swap_back: the real folder is put back as soon as the agent
    checks again through what it opened (a call with a descriptor), so a second look by name
    would find nothing wrong: only the descriptor tells. Returns {"aside": where the real folder is}."""
    real_check = getattr(agent, check)
    fd_arg = {"refuse_path_escape": 2, "refuse_leaving_root": 3}[check]
    state: dict[str, Path] = {}

    def racing(*args: Any, **kwargs: Any) -> None:
        through_fd = len(args) > fd_arg or kwargs.get("fd") is not None
        if through_fd and swap_back and "aside" in state and folder.is_symlink():
            put_back(folder, state["aside"])
        real_check(*args, **kwargs)
        if not through_fd and "aside" not in state:
            state["aside"] = swap_for_symlink(folder, outside)

    monkeypatch.setattr(agent, check, racing)
    return state


def racing_op(agent: Any, op: str, pkg: Path, state_dir: Path) -> tuple[str, Any]:
    """(the by-name check the op makes first, a call of the op on pkg/config/speculative.py)."""
    import base64
    import hashlib

    target = pkg / "config" / "speculative.py"
    data = target.read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    if op == "apply_files":
        unit = [{"path": str(target), "expected_sha256": sha, "content_b64": base64.b64encode(data + b"X = 1\n").decode(),
                 "backup_path": str(state_dir / "backups" / "run-1" / "step--speculative.py")}]
        return "refuse_path_escape", lambda: agent.op_apply_files(unit, [], 30, root=str(pkg))
    if op == "restore":
        backup = state_dir / "backups" / "run-1" / "step--speculative.py"
        backup.parent.mkdir(parents=True)
        backup.write_bytes(b"ORIGINAL = True\n")
        args = restore_args(target, backup, state_dir, b"ORIGINAL = True\n", str(pkg))
        return "refuse_leaving_root", lambda: agent.op_restore(**dict(args, force=False))
    if op == "verify":
        return "refuse_leaving_root", lambda: agent.op_verify([{"path": str(target), "expected_sha256": sha}], [], 30,
                                                              str(pkg))
    if op == "read":
        return "refuse_path_escape", lambda: agent.op_read(str(target), str(pkg))
    assert op == "hash"
    return "refuse_leaving_root", lambda: agent.op_hash([str(target)], confined=True, root=str(pkg))


@pytest.mark.parametrize("swap_back", [False, True], ids=["stays-swapped", "swapped-back"])
@pytest.mark.parametrize("op", ["apply_files", "restore", "verify", "read", "hash"])
def test_a_folder_swapped_for_a_symlink_right_after_the_check_is_refused_through_the_descriptor(
        agent: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, op: str, swap_back: bool) -> None:
    """The by-name check passes, then pkg/config becomes a symlink to a copy of it outside the
    package (what patchkit wrote, byte for byte: no drift shows) before the agent opens it. The
    agent works through the folder's descriptor and checks that: refused, naming the folder;
    not a byte or a name changed out there, no temp file anywhere, nothing backed up. Swapped
    back as soon as it was opened, no second look by name could see it: the descriptor does."""
    pkg, state_dir, outside = tmp_path / "site" / "toyllm", tmp_path / "state", tmp_path / "outside"
    shutil.copytree(PKGS / "toyllm" / "toyllm", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    config = pkg / "config"
    check, call = racing_op(agent, op, pkg, state_dir)
    inside_before = snapshot(config)
    raced = swap_right_after_the_check(monkeypatch, agent, check, config, outside, swap_back)

    try:
        outcome = call()
    except agent.Refused as exc:
        outcome = exc
    assert "aside" in raced, "the race did not happen: the op never made its by-name check"
    # first what a write through the swapped folder would have changed out there
    assert snapshot(outside) == inside_before and listing(outside) == sorted(inside_before)
    assert [p for p in tmp_path.rglob("*") if "patchkit-tmp" in p.name] == []
    # then the refusal (a read through it would have returned the outside copy's bytes)
    assert isinstance(outcome, agent.Refused), f"not refused: {outcome}"
    message = str(outcome)
    if swap_back:
        assert f"{config} is {outside} since it was checked, outside " in message, message
    else:
        assert f"{config} is a symlink to {outside}, outside " in message, message
    if not swap_back:
        put_back(config, raced["aside"])
    assert config.is_dir() and not config.is_symlink()
    assert snapshot(config) == inside_before and listing(config) == sorted(inside_before)
    assert not (state_dir / "backups").exists() or op == "restore"


@pytest.mark.parametrize("op", ["apply_files", "restore"])
def test_a_folder_swapped_after_the_descriptor_check_steers_nothing(agent: Any, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch, op: str) -> None:
    """Swapped later still (once the op checked the folder it opened, before it writes: when it
    sweeps old temp files), the name leads outside but the op goes through the folder it opened:
    the change lands in the real folder (moved aside by the swap), not a byte out there."""
    import hashlib

    pkg, state_dir, outside = tmp_path / "site" / "toyllm", tmp_path / "state", tmp_path / "outside"
    shutil.copytree(PKGS / "toyllm" / "toyllm", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    config = pkg / "config"
    _, call = racing_op(agent, op, pkg, state_dir)
    before = snapshot(config)
    real_sweep, swapped = agent.sweep_temps, {}

    def sweep_then_swap(*args: Any) -> None:
        real_sweep(*args)
        if not swapped:
            swapped["aside"] = swap_for_symlink(config, outside)

    monkeypatch.setattr(agent, "sweep_temps", sweep_then_swap)
    result = call()
    assert swapped and result["ok"], result
    assert snapshot(outside) == before and listing(outside) == sorted(before)
    changed = (swapped["aside"] / "speculative.py").read_bytes()
    assert changed == (before["speculative.py"] + b"X = 1\n" if op == "apply_files" else b"ORIGINAL = True\n")
    assert hashlib.sha256(changed).hexdigest() != hashlib.sha256(before["speculative.py"]).hexdigest()
    assert [p for p in tmp_path.rglob("*") if "patchkit-tmp" in p.name] == []


@pytest.mark.parametrize("op, what", [("apply_files", "patch"), ("restore", "restore"), ("verify", "verify")])
def test_a_file_swapped_for_a_symlink_right_after_the_check_is_refused_not_followed(
        agent: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, op: str, what: str) -> None:
    """The file itself swapped for a symlink to a copy outside, after the by-name checks: the
    agent opens it without following (O_NOFOLLOW) and refuses as it refuses a symlink it sees
    first; nothing out there changes."""
    pkg, state_dir, outside = tmp_path / "site" / "toyllm", tmp_path / "state", tmp_path / "outside"
    shutil.copytree(PKGS / "toyllm" / "toyllm", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    target = pkg / "config" / "speculative.py"
    _, call = racing_op(agent, op, pkg, state_dir)
    real_symlink_check = agent.refuse_symlink
    outside.mkdir()
    copy = outside / "speculative.py"
    copy.write_bytes(target.read_bytes())

    def check_then_swap(*args: Any, **kwargs: Any) -> None:
        real_symlink_check(*args, **kwargs)  # the by-name symlink check, the last before the op opens anything
        if not target.is_symlink():
            target.unlink()
            target.symlink_to(copy)

    monkeypatch.setattr(agent, "refuse_symlink", check_then_swap)
    with pytest.raises(agent.Refused, match=f"{target} is a symlink \\(to {copy}\\); refusing to {what} through it"):
        call()
    assert target.is_symlink() and listing(outside) == ["speculative.py"]
    assert copy.read_bytes() == (PKGS / "toyllm" / "toyllm" / "config" / "speculative.py").read_bytes()
    assert [p for p in tmp_path.rglob("*") if "patchkit-tmp" in p.name] == []


@pytest.mark.parametrize("op", ["read", "hash"])
def test_a_file_symlink_is_read_through_inside_the_root_and_refused_once_it_leads_out(
        agent: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, op: str) -> None:
    """read and hash (confined) follow a file that is a symlink inside the package, as before;
    the same file swapped for a symlink out of it right after the by-name check is refused by
    what was opened (the descriptor's real name), its bytes not returned."""
    import hashlib

    pkg, outside = tmp_path / "site" / "toyllm", tmp_path / "outside"
    (pkg / "config").mkdir(parents=True)
    outside.mkdir()
    (pkg / "config" / "real.py").write_bytes(b"INSIDE = 1\n")
    (outside / "secret.py").write_bytes(b"OUTSIDE = 1\n")
    link = pkg / "config" / "alias.py"
    link.symlink_to(pkg / "config" / "real.py")

    def run(target: Path) -> Any:
        return agent.op_read(str(target), str(pkg)) if op == "read" else \
            agent.op_hash([str(target)], confined=True, root=str(pkg))[str(target)]

    got = run(link)
    if op == "read":
        assert got["symlink_to"] == str(pkg / "config" / "real.py") and got["content_b64"] == "SU5TSURFID0gMQo=", got
    else:
        assert got == hashlib.sha256(b"INSIDE = 1\n").hexdigest()

    check = "refuse_path_escape" if op == "read" else "refuse_leaving_root"
    real_check, swapped = getattr(agent, check), []

    def check_then_swap(*args: Any, **kwargs: Any) -> None:
        real_check(*args, **kwargs)
        if not swapped:
            link.unlink()
            link.symlink_to(outside / "secret.py")
            swapped.append(True)

    monkeypatch.setattr(agent, check, check_then_swap)
    with pytest.raises(agent.Refused, match=f"{link} is a symlink to {outside / 'secret.py'}, outside the"):
        run(link)
    assert swapped


def test_a_deploy_rollback_removes_nothing_through_a_folder_swapped_right_after_its_check(
        agent: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """op_remove_file (a deploy's rollback of a file it added) checks dest/sub by name, then the
    folder is swapped for a symlink to a copy outside, and put back once the op checks what it
    opened: refused through the descriptor, the copy outside still holds its file."""
    dest = tmp_path / "dest"
    (dest / "sub").mkdir(parents=True)
    (dest / "sub" / "added.bin").write_bytes(b"deployed\n")
    outside = tmp_path / "outside"
    sha = agent.sha256_file(str(dest / "sub" / "added.bin"))
    raced = swap_right_after_the_check(monkeypatch, agent, "refuse_leaving_root", dest / "sub", outside, swap_back=True)
    with pytest.raises(agent.Refused, match=f"{dest / 'sub'} is {outside} since it was checked"):
        agent.op_remove_file(str(dest / "sub" / "added.bin"), sha, str(dest), force=True)
    assert "aside" in raced, "the race did not happen"
    assert (outside / "added.bin").read_bytes() == b"deployed\n"
    assert (dest / "sub" / "added.bin").read_bytes() == b"deployed\n"


def test_a_deploy_rollback_still_removes_its_file_and_folders_and_says_already_the_second_time(
        agent: Any, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    (dest / "a" / "b").mkdir(parents=True)
    (dest / "a" / "b" / "added.bin").write_bytes(b"deployed\n")
    sha = agent.sha256_file(str(dest / "a" / "b" / "added.bin"))
    dirs = [str(dest / "a" / "b"), str(dest / "a")]
    assert agent.op_remove_file(str(dest / "a" / "b" / "added.bin"), sha, str(dest), remove_dirs=dirs) == {
        "removed": True, "already": False}
    assert sorted(p.name for p in dest.iterdir()) == []
    assert agent.op_remove_file(str(dest / "a" / "b" / "added.bin"), sha, str(dest), remove_dirs=dirs) == {
        "removed": False, "already": True}
