"""Journals written before the one file-change pipeline still read, status and roll back.

fixtures/journals/patch-single-apply.json and patch-multi-apply.json are run records exactly
as the code before the unit pipeline wrote them (commit f928574: a single-file patch step
names `file`, `sha256_before/after` and a `<step>--<basename>` backup; a multi-file diff
step names `files`), with the sandbox's folders replaced by {PKGS} and {STATE}. A test puts
the host in the state such a run left (the same edits, byte for byte, so the hashes hold),
plants the old record and its backups, and asks status and rollback about it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from tests.helpers import PKGS, REPO, Sandbox, recipe, sandbox_fixture, sha256, step  # noqa: F401 - the fixture

JOURNALS = REPO / "fixtures" / "journals"


def plant(sb: Sandbox, fixture: str, recipe_name: str, unverified: str | None = None) -> dict[str, Any]:
    """The fixture's record as this host's only journal entry, its backups beside it (each the
    package file as shipped: what the run backed up)."""
    shutil.rmtree(sb.state / "runs", ignore_errors=True)
    shutil.rmtree(sb.state / "backups", ignore_errors=True)
    text = (JOURNALS / fixture).read_text().replace("{PKGS}", str(sb.pkgs)).replace("{STATE}", str(sb.state))
    record = json.loads(text)
    for done in record["steps"]:
        for change in done.get("files") or [done]:
            if change.get("backup") and change.get("file"):
                backup = Path(change["backup"])
                backup.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                shipped = PKGS / "toyllm" / Path(change["file"]).relative_to(sb.pkgs)
                backup.write_bytes(shipped.read_bytes())
                assert sha256(backup) == change["sha256_before"]
        if done["name"] == unverified:
            done["verified"] = False
    folder = sb.state / "runs" / recipe_name
    folder.mkdir(parents=True, mode=0o700)
    (folder / f"{record['run_id']}.json").write_text(json.dumps(record))
    return record


def multi_recipe(folder: Path) -> str:
    shutil.copy(JOURNALS / "patch-multi-apply.patch", folder / "fix.patch")
    path = folder / "fix.yaml"
    path.write_text("name: toyfix\nsteps:\n  - name: upstream-fix\n    patch:\n      package: toyllm\n"
                    "      edit: {diff: {file: fix.patch}}\n    verify: {import: [toyllm.config]}\n")
    return str(path)


def originals(sb: Sandbox, rels: list[str]) -> dict[str, bytes]:
    return {rel: (PKGS / "toyllm" / rel).read_bytes() for rel in rels}


SINGLE = ["toyllm/config/speculative.py", "toyllm/config/model.py"]


def test_an_old_single_file_record_shows_applied_and_rolls_back(sandbox: Sandbox) -> None:
    toy = recipe("toyllm_eagle3.yaml")
    assert sandbox.run("apply", toy).returncode == 0  # the host as that run left it
    record = plant(sandbox, "patch-single-apply.json", "toyllm_eagle3")
    status = sandbox.run("status", toy, json_out=True)
    for name in ("eagle3-whitelist", "fp32-dtype"):
        got = step(status, name)
        assert got["status"] == "applied" and "applied by patchkit" in got["message"], got
        assert got["file"] and got["sha256_before"] == got["sha256_after"], got
    back = sandbox.run("rollback", toy, json_out=True)
    assert back.returncode == 0, back
    assert {s["name"]: s["status"] for s in back.hosts()["local"]["steps"]} == {
        "eagle3-whitelist": "changed", "fp32-dtype": "changed"}
    for rel, data in originals(sandbox, SINGLE).items():
        assert sandbox.file(rel).read_bytes() == data, rel
    assert record["run_id"] in back.json()["hosts"]["local"]["message"]
    assert step(sandbox.run("status", toy, json_out=True), "eagle3-whitelist")["status"] == "pending"


def test_an_old_single_file_record_cut_off_before_its_checks_is_settled(sandbox: Sandbox) -> None:
    toy = recipe("toyllm_eagle3.yaml")
    assert sandbox.run("apply", toy).returncode == 0
    plant(sandbox, "patch-single-apply.json", "toyllm_eagle3", unverified="eagle3-whitelist")
    pending = step(sandbox.run("status", toy, json_out=True), "eagle3-whitelist")
    assert pending["status"] == "pending" and "pending verification" in pending["message"], pending
    settled = step(sandbox.run("apply", toy, json_out=True), "eagle3-whitelist")
    assert settled["status"] == "ok" and "verified now" in settled["message"], settled
    assert step(sandbox.run("status", toy, json_out=True), "eagle3-whitelist")["status"] == "applied"


def test_an_old_multi_file_record_shows_applied_and_rolls_back(sandbox: Sandbox, tmp_path: Path) -> None:
    fix = multi_recipe(tmp_path)
    assert sandbox.run("apply", fix).returncode == 0
    record = plant(sandbox, "patch-multi-apply.json", "toyfix")
    got = step(sandbox.run("status", fix, json_out=True), "upstream-fix")
    assert got["status"] == "applied" and "applied by patchkit" in got["message"], got
    assert len(got["files"]) == 2, got
    back = sandbox.run("rollback", fix, json_out=True)
    assert back.returncode == 0, back
    assert step(back, "upstream-fix")["status"] == "changed", back
    for rel, data in originals(sandbox, SINGLE).items():
        assert sandbox.file(rel).read_bytes() == data, rel
    assert record["run_id"] in back.json()["hosts"]["local"]["message"]
    assert step(sandbox.run("status", fix, json_out=True), "upstream-fix")["status"] == "pending"


def test_an_old_multi_file_record_cut_off_before_its_checks_is_settled(sandbox: Sandbox, tmp_path: Path) -> None:
    fix = multi_recipe(tmp_path)
    assert sandbox.run("apply", fix).returncode == 0
    plant(sandbox, "patch-multi-apply.json", "toyfix", unverified="upstream-fix")
    pending = step(sandbox.run("status", fix, json_out=True), "upstream-fix")
    assert pending["status"] == "pending" and "pending verification" in pending["message"], pending
    settled = step(sandbox.run("apply", fix, json_out=True), "upstream-fix")
    assert settled["status"] == "ok" and "verified now" in settled["message"], settled
