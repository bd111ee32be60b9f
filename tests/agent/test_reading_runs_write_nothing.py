"""A run that only reads its hosts (plan, apply --dry-run, status, history) makes nothing there:
no state folder, no lock file. Where the state folder is, such runs lock it shared: readers
do not wait for one another, a writer waits for them (and says a reader holds it)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from tests.helpers import TOY_SPECULATIVE, make_sandbox, recipe, sha256, tree_listing

TOY = recipe("toyllm_eagle3.yaml")


def test_plan_status_and_history_make_nothing_on_a_host_patchkit_never_wrote_to(tmp_path: Path) -> None:
    box = make_sandbox(tmp_path / "host", ("toyllm",))
    before = sha256(box.file(TOY_SPECULATIVE))
    for argv, code in ((("plan", TOY), 0), (("apply", TOY, "--dry-run"), 0), (("status", TOY), 3),
                       (("history", None), 0)):
        done = box.run(*argv)
        assert done.returncode == code, done
        assert not box.state.exists(), f"{argv[0]} made {box.state}"
    assert sha256(box.file(TOY_SPECULATIVE)) == before

    assert box.run("apply", TOY, "--steps", "eagle3-whitelist").returncode == 0
    made = tree_listing(box.state)
    lock = box.state / "lock"
    written = lock.read_bytes()
    assert box.run("status", TOY, "--steps", "eagle3-whitelist").returncode == 0
    assert box.run("plan", TOY).returncode == 0
    assert lock.read_bytes() == written  # a reader leaves the last writer's name
    assert tree_listing(box.state) == made


def test_readers_share_the_lock_and_a_writer_waits_for_them(tmp_path: Path) -> None:
    box = make_sandbox(tmp_path / "host", ("toyllm",))
    assert box.run("apply", TOY, "--steps", "eagle3-whitelist").returncode == 0
    fd = os.open(box.state / "lock", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # as a plan in progress holds it
        status = box.run("status", TOY, "--steps", "eagle3-whitelist", "--lock-timeout", "1")
        assert status.returncode == 0, status  # readers do not wait for each other
        blocked = box.run("rollback", TOY, "--lock-timeout", "1")
        assert blocked.returncode == 1, blocked
        assert "another patchkit run holds the lock" in blocked.stdout and "a run that only reads" in blocked.stdout, \
            blocked
    finally:
        os.close(fd)
    assert box.run("rollback", TOY).returncode == 0


def test_a_reader_waits_for_a_writer_and_names_it(tmp_path: Path) -> None:
    box = make_sandbox(tmp_path / "host", ("toyllm",))
    assert box.run("apply", TOY, "--steps", "eagle3-whitelist").returncode == 0
    fd = os.open(box.state / "lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # as an apply in progress holds it
        os.ftruncate(fd, 0)
        os.pwrite(fd, b'{"pid": 1, "host": "elsewhere", "owner": "apply r1", "since": 0}', 0)
        status = box.run("status", TOY, "--steps", "eagle3-whitelist", "--lock-timeout", "1")
        assert status.returncode == 1, status
        assert "another patchkit run holds the lock" in status.stdout and "owner apply r1" in status.stdout, status
    finally:
        os.close(fd)
    assert box.run("status", TOY, "--steps", "eagle3-whitelist").returncode == 0
