"""The collector is held off during a command's start and frozen over what it built (cli/startup.py).

Counted, never timed: gc's own collection counters and its frozen-object count."""

from __future__ import annotations

import gc
import subprocess
import sys

from tests.helpers import REPO


def test_no_collection_during_the_start_and_the_start_frozen_after_it() -> None:
    from patchkit.cli.startup import started, starting

    assert gc.isenabled()
    with starting():
        before = [s["collections"] for s in gc.get_stats()]
        junk = [[object()] for _ in range(50_000)]  # far over gen 0's threshold (700)
        assert [s["collections"] for s in gc.get_stats()] == before
        assert not gc.isenabled()
        started()
        assert gc.isenabled()
        assert gc.get_freeze_count() >= len(junk)
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0  # an in-process caller keeps nothing frozen


def test_a_caller_that_turned_the_collector_off_keeps_it_off() -> None:
    from patchkit.cli.startup import started, starting

    gc.disable()
    try:
        with starting():
            started()
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_heap_is_frozen_at_exit_so_the_shutdown_does_not_collect_it() -> None:
    probe = ("import atexit, gc\n"
             "from patchkit.cli.startup import starting\n"
             "with starting():\n    pass\n"
             "atexit.register(lambda: print(gc.get_freeze_count()))\n")  # runs before startup.py's hook
    out = subprocess.run([sys.executable, "-P", "-c", probe], cwd=REPO, capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert out.stdout.strip() == "0"  # not yet: the hook runs last-registered-first
    probe2 = ("import atexit, gc\n"
              "atexit.register(lambda: print(gc.get_freeze_count()))\n"  # registered first: runs after the hook
              "from patchkit.cli.startup import starting\n"
              "with starting():\n    pass\n")
    out = subprocess.run([sys.executable, "-P", "-c", probe2], cwd=REPO, capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert int(out.stdout.strip()) > 1000
