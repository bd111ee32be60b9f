"""A patch step's files are one unit under every failure (the real agent, the real CLI).

A write error on any file (an immutable file: `chattr +i`, which stops root too; a file
bind-mounted over the package's, where a rename gives EBUSY) puts back every file written
before it, and the report and the journal say which; files of one step that share a
basename keep one backup each; a run cut off between two files of its unit is put back
whole by the next run, so one rollback undoes the unit; a file emptied by a diff is written
empty, and an empty file a unit adds is created; a replaced file keeps its SELinux label.
"""

from __future__ import annotations

import base64
import difflib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agent.test_diff_apply_local import KIMI, MODEL, SPEC, make_diff, write_recipe
from tests.helpers import Sandbox, host_agent, sandbox_fixture, sha256, step  # noqa: F401 - the `sandbox` fixture

INIT = "toyllm/config/__init__.py"
FP8 = ("_FLOAT16_DTYPES = ('float16', 'bfloat16')", "_FLOAT16_DTYPES = ('float16', 'bfloat16', 'fp8')")


def three_file_diff(sb: Sandbox) -> str:
    """model.py, speculative.py, then __init__.py: the diff's (and the write's) order."""
    return make_diff(sb, {MODEL: FP8, SPEC: KIMI, INIT: ("\n", "\n# patched\n")})


def on_disk(sb: Sandbox, rels: list[str]) -> dict[str, bytes | None]:
    return {rel: sb.file(rel).read_bytes() if sb.file(rel).exists() else None for rel in rels}


@pytest.fixture
def immutable() -> Iterator[callable]:
    """immutable(path): `chattr +i path` (refused writes even to root), undone at the end."""
    if os.geteuid() != 0:
        pytest.fail("chattr +i needs root (our machines and CI run as root)", pytrace=False)
    made: list[Path] = []

    def make(path: Path) -> None:
        subprocess.run(["chattr", "+i", str(path)], check=True)
        made.append(path)

    yield make
    for path in made:
        subprocess.run(["chattr", "-i", str(path)], check=False)


@pytest.fixture
def bind_mount() -> Iterator[callable]:
    """bind_mount(source, target): `mount --bind` of one file over another, unmounted at the end."""
    if os.geteuid() != 0:
        pytest.fail("mount --bind needs root (our machines and CI run as root)", pytrace=False)
    mounted: list[Path] = []

    def mount(source: Path, target: Path) -> None:
        subprocess.run(["mount", "--bind", str(source), str(target)], check=True)
        mounted.append(target)

    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_a_write_error_on_the_last_file_puts_back_every_file_written(sandbox: Sandbox, tmp_path: Path,
                                                                      immutable) -> None:
    rels = [MODEL, SPEC, INIT]
    before = on_disk(sandbox, rels)
    recipe = str(write_recipe(tmp_path, three_file_diff(sandbox)))
    immutable(sandbox.file(INIT))

    failed = sandbox.run("apply", recipe, json_out=True)
    got = step(failed, "upstream-fix")
    assert failed.returncode == 1, failed
    assert got["status"] == "failed" and "Operation not permitted" in got["message"], got
    assert "2 of 3 files were written before it and are restored" in got["message"], got
    assert on_disk(sandbox, rels) == before  # the two files written first are back
    paths = [str(sandbox.file(r)) for r in (MODEL, SPEC)]
    assert got["details"] == {"written": paths, "restored": paths}, got
    assert got["restored"] is True and all(f["sha256_after"] == f["sha256_before"] for f in got["files"]), got
    record = sandbox.run_records("toyfix")[-1]
    assert record["steps"][0]["details"]["restored"] == paths  # the journal says it too
    assert step(sandbox.run("status", recipe, json_out=True), "upstream-fix")["status"] == "pending"
    assert "nothing to roll back" in sandbox.run("rollback", recipe).stdout


def test_a_write_error_on_a_single_file_patch_changes_nothing(sandbox: Sandbox, tmp_path: Path, immutable) -> None:
    recipe = str(write_recipe(tmp_path, make_diff(sandbox, {SPEC: KIMI})))
    before = sandbox.file(SPEC).read_bytes()
    immutable(sandbox.file(SPEC))
    failed = sandbox.run("apply", recipe, json_out=True)
    got = step(failed, "upstream-fix")
    assert failed.returncode == 1 and "Operation not permitted" in got["message"], got
    assert "nothing was written" in got["message"] and got["file"] == str(sandbox.file(SPEC)), got
    assert sandbox.file(SPEC).read_bytes() == before


def test_a_file_bind_mounted_over_the_package_s_is_refused_naming_the_mount(sandbox: Sandbox, tmp_path: Path,
                                                                          bind_mount) -> None:
    """`podman run -v FILE:FILE` puts a mount point where the module was: a rename over it
    fails (EBUSY). Refused, saying so, and the file written before it is put back."""
    outside = tmp_path / "mounted-speculative.py"
    outside.write_bytes(sandbox.file(SPEC).read_bytes())
    bind_mount(outside, sandbox.file(SPEC))
    before = on_disk(sandbox, [MODEL, SPEC])
    recipe = str(write_recipe(tmp_path, make_diff(sandbox, {MODEL: FP8, SPEC: KIMI})))
    failed = sandbox.run("apply", recipe, json_out=True)
    got = step(failed, "upstream-fix")
    assert failed.returncode == 1, failed
    assert f"{sandbox.file(SPEC)} is a mount point of its own (a file bind-mounted there" in got["message"], got
    assert "1 of 2 files were written before it and are restored" in got["message"], got
    assert on_disk(sandbox, [MODEL, SPEC]) == before and outside.read_bytes() == before[SPEC]


def test_files_of_one_step_that_share_a_basename_each_keep_their_backup(sandbox: Sandbox, tmp_path: Path) -> None:
    rels = [f"toyllm/{part}/serving.py" for part in ("api", "engine", "worker")]
    for i, rel in enumerate(rels):
        sandbox.file(rel).parent.mkdir(exist_ok=True)
        sandbox.file(rel).write_text(f"PORT = {8000 + i}\n")
    before = on_disk(sandbox, rels)
    recipe = str(write_recipe(tmp_path, make_diff(sandbox, {rel: ("PORT", "HOST = 'x'\nPORT") for rel in rels}),
                              verify="[]"))
    applied = sandbox.run("apply", recipe, json_out=True)
    assert applied.returncode == 0, applied
    backups = [f["backup"] for f in step(applied, "upstream-fix")["files"]]
    assert len(set(backups)) == 3 and all(Path(b).read_bytes() == before[r] for b, r in zip(backups, rels))
    back = sandbox.run("rollback", recipe, json_out=True)
    assert back.returncode == 0 and "restored 3 files" in step(back, "upstream-fix")["message"], back
    assert on_disk(sandbox, rels) == before


def cut_off_after_first_file(sb: Sandbox, recipe_name: str, rels: list[str], before: dict[str, bytes | None]) -> str:
    """The host as an agent killed right after the rename of the unit's first file leaves it:
    the intent record (verified False, every file and backup named: they are written before
    any file), the backups, the first file new, the others as they were."""
    path = max((sb.state / "runs" / recipe_name).glob("*.json"))
    record = json.loads(path.read_text())
    done = record["steps"][0]
    done.update(verified=False, message="cut off while writing or verifying", checks=[])
    record.update(finished=None, status="running")
    path.write_text(json.dumps(record))
    for rel in rels[1:]:
        data = before[rel]
        assert data is not None
        sb.file(rel).write_bytes(data)
    return record["run_id"]


def test_a_unit_cut_off_between_two_files_then_rerun_is_undone_by_one_rollback(sandbox: Sandbox,
                                                                                tmp_path: Path) -> None:
    rels = [MODEL, SPEC]
    before = on_disk(sandbox, rels)
    recipe = str(write_recipe(tmp_path, make_diff(sandbox, {MODEL: FP8, SPEC: KIMI})))
    assert sandbox.run("apply", recipe).returncode == 0
    first = cut_off_after_first_file(sandbox, "toyfix", rels, before)
    status = step(sandbox.run("status", recipe, json_out=True), "upstream-fix")
    assert status["status"] == "pending" and f"run {first} was cut off while writing: 1 of its 2" in status["message"]

    rerun = sandbox.run("apply", recipe, json_out=True)
    got = step(rerun, "upstream-fix")
    assert rerun.returncode == 0 and got["status"] == "changed", rerun
    assert "put back first, the unit written whole by this run" in got["message"], got
    assert [f["sha256_before"] for f in got["files"]] == [sha256_of(before[r]) for r in rels], got

    back = sandbox.run("rollback", recipe, json_out=True)
    assert back.returncode == 0, back
    assert on_disk(sandbox, rels) == before  # the whole unit, with one rollback
    assert "roll back again" not in back.json()["hosts"]["local"]["message"]
    assert step(sandbox.run("status", recipe, json_out=True), "upstream-fix")["status"] == "pending"
    assert "nothing to roll back" in sandbox.run("rollback", recipe).stdout


def test_a_unit_cut_off_between_two_files_is_rolled_back_whole(sandbox: Sandbox, tmp_path: Path) -> None:
    rels = [MODEL, SPEC]
    before = on_disk(sandbox, rels)
    recipe = str(write_recipe(tmp_path, make_diff(sandbox, {MODEL: FP8, SPEC: KIMI})))
    assert sandbox.run("apply", recipe).returncode == 0
    cut_off_after_first_file(sandbox, "toyfix", rels, before)
    back = sandbox.run("rollback", recipe, json_out=True)
    assert back.returncode == 0, back
    assert on_disk(sandbox, rels) == before


def sha256_of(data: bytes | None) -> str:
    import hashlib

    assert data is not None
    return hashlib.sha256(data).hexdigest()


def test_a_diff_that_empties_a_file_writes_it_empty_and_rolls_back(sandbox: Sandbox, tmp_path: Path) -> None:
    legacy = sandbox.file("toyllm/config/legacy.py")
    legacy.write_text("OLD = 1\n")
    diff = make_diff(sandbox, {SPEC: KIMI})
    diff += "".join(difflib.unified_diff(["OLD = 1\n"], [], "a/toyllm/config/legacy.py", "b/toyllm/config/legacy.py"))
    recipe = str(write_recipe(tmp_path, diff))
    applied = sandbox.run("apply", recipe, json_out=True)
    assert applied.returncode == 0, applied
    assert legacy.exists() and legacy.read_bytes() == b""
    # (applying it again is the diff engine's to see as `already`: today it says not found)
    assert sandbox.run("rollback", recipe).returncode == 0
    assert legacy.read_bytes() == b"OLD = 1\n"


def test_the_agent_creates_an_empty_file_a_unit_adds_and_removes_it_on_failure(tmp_path: Path) -> None:
    agent = host_agent()
    folder = tmp_path / "pkg"
    folder.mkdir()
    (folder / "a.py").write_text("A = 1\n")
    unit = [{"path": str(folder / "empty.py"), "expected_sha256": None, "content_b64": "", "backup_path": ""},
            {"path": str(folder / "a.py"), "expected_sha256": sha256(folder / "a.py"),
             "content_b64": base64.b64encode(b"A = 2\n").decode(), "backup_path": str(tmp_path / "s" / "b" / "r" / "a")}]
    done = agent.op_apply_files(unit, [], 30)
    assert done["ok"], done
    assert (folder / "empty.py").read_bytes() == b"" and (folder / "a.py").read_bytes() == b"A = 2\n"
    (folder / "empty.py").unlink()
    (folder / "a.py").write_text("A = 1\n")
    unit[1]["content_b64"] = base64.b64encode(b"A = (\n").decode()  # a syntax error: the unit goes back
    failed = agent.op_apply_files(unit, [], 30)
    assert not failed["ok"] and failed["restored"] and failed["restored_files"] == [u["path"] for u in unit]
    assert not (folder / "empty.py").exists() and (folder / "a.py").read_bytes() == b"A = 1\n"


@pytest.mark.parametrize("name", ["security.selinux", "user.patchkit_label"])
def test_a_replaced_file_keeps_its_selinux_label(tmp_path: Path, name: str) -> None:
    """security.selinux can be set here (root, ext4, no SELinux policy loaded: stored as any
    xattr); the user.* run is the same copy where security.* cannot be set."""
    agent = host_agent()
    if name.startswith("user."):
        agent.KEPT_XATTRS = (name,)
    module = tmp_path / "m.py"
    module.write_text("X = 1\n")
    label = b"system_u:object_r:container_file_t:s0:c1,c2\0"
    os.setxattr(module, name, label)
    unit = [{"path": str(module), "expected_sha256": sha256(module), "content_b64": base64.b64encode(b"X = 2\n").decode(),
             "backup_path": str(tmp_path / "s" / "b" / "r" / "m")}]
    assert agent.op_apply_files(unit, [], 30)["ok"]
    assert module.read_bytes() == b"X = 2\n" and os.getxattr(module, name) == label
