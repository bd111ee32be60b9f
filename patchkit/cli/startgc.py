"""The cyclic garbage collector during a command's start: off, then what the start built is frozen.

A command's start (imports, pydantic's model builds, the recipe's validation) allocates a
few hundred thousand container objects that live until the process exits, and almost no
garbage. The collector would pass over them again and again meanwhile (a young pass every
700 allocations, whole-heap passes as the heap grows): tens of ms of CPU per command
(bench/README.md, issue 27). `starting()` holds the collector off; `started()`, before the
run's own work (which may last hours and must be collected), moves everything alive into
the permanent generation (`gc.freeze`: never scanned again) and lets the collector run.

And at the end: the interpreter's shutdown collects the whole heap once more, only to free
memory the OS takes back anyway: ~0.2 s of CPU after a fresh `apply` on one SSH host
(measured, bench/README.md). `starting()` registers an exit hook that freezes the heap
first. Standard streams are still flushed and modules torn down; only objects in reference
cycles are left to the OS (patchkit closes its files and connections with `with`/`finally`).
"""

from __future__ import annotations

import atexit
import gc
from collections.abc import Iterator
from contextlib import contextmanager

_held = False
_hooked = False


@contextmanager
def starting() -> Iterator[None]:
    """The collector off until `started()` (or the end of the block); as it was afterwards."""
    global _held, _hooked
    if not _hooked:
        _hooked = True
        atexit.register(gc.freeze)  # the shutdown's collection then skips the heap
    if not gc.isenabled():  # a caller's choice (or a nested start): left alone
        yield
        return
    gc.disable()
    _held = True
    try:
        yield
    finally:
        started()
        gc.unfreeze()  # an in-process caller (tests) keeps no frozen objects of ours


def started() -> None:
    """The start is over: what it built is frozen, and the collector runs again."""
    global _held
    if _held:
        _held = False
        gc.freeze()
        gc.enable()
