"""A command's start: everything done to make it cheap, apart from the command's own work.

A command is a short process, and its start is most of a short command's cost; the light
start is kept by these means, each applied here and nowhere else in the CLI:

- **Imports where used.** At module level, cli/'s modules import the standard library and
  one another only; each command function imports what it runs, so `validate` and `--help`
  never load the runner, asyncio or asyncssh (tests/agent/test_light_start.py).
- **The garbage collector held off during the start** (`starting`, `started`): a start
  builds a few hundred thousand objects that live until exit and almost no garbage, and the
  collector would scan them again and again; then what the start built is frozen, out of
  every later scan, and the command's own work (possibly hours) is collected as usual.
- **No pydantic plugins** (`without_pydantic_plugins`): nothing outside patchkit sees a
  recipe's values, and no scan of every installed distribution's entry points.
- **The SSH helper** (`command_start`): for a command that reaches an inventory's hosts, a
  second process warms up SSH while this one validates the recipe and the inventory.
- **The first hosts reached while the run's code loads** (`reach_then_run`): once everything
  is valid, the first wave's connections start and the rest of the run's modules are
  imported in a thread meanwhile.

bench/README.md has the measurements behind each ("The CLI's start, by the code that pays for it").
"""

from __future__ import annotations

import atexit
import gc
import sys
import types
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from patchkit.base.rollout import Size
    from patchkit.fleet.inventory import HostSpec
    from patchkit.host.transport.early import EarlyReach

T = TypeVar("T")

_held = False
_hooked = False


@contextmanager
def starting() -> Iterator[None]:
    """The collector off until `started()` (or the end of the block); as it was afterwards.

    The interpreter's shutdown would also collect the whole heap once more, only to free
    memory the OS takes back anyway (a noticeable part of a short command's CPU): an exit
    hook freezes the heap first. Standard streams are still flushed and modules torn down;
    only objects in reference cycles are left to the OS (patchkit closes its files and
    connections with `with`/`finally`)."""
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
    """The start is over: what it built is frozen (`gc.freeze`: never scanned again), and the
    collector runs again. Called before a command's own work, which may last hours."""
    global _held
    if _held:
        _held = False
        gc.freeze()
        gc.enable()


def without_pydantic_plugins() -> None:
    """patchkit's models run without pydantic plugins, as if none were installed beside it.

    pydantic hands a plugin every value a model validates (a recipe's and an inventory's
    secrets among them: telemetry plugins record them), and finds plugins by reading the
    entry points of every installed distribution when the first model is built.
    pydantic's own switch is an environment variable, which the targets a local run starts
    would inherit; this one stays in this process. pydantic asks for plugins through one
    function of one private module (`pydantic.plugin._loader.get_plugins`, 2.5 to 2.14 alike),
    imported at the first model build: that module is given here, answering none, before any
    model is built. Not importing the real one spares the scan, importlib.metadata and the
    email package (nothing else on a command's path imports them)."""
    if "pydantic.plugin._loader" in sys.modules:  # a model was built already: leave it as it is
        return
    loader = types.ModuleType("pydantic.plugin._loader", "patchkit: no pydantic plugins (cli/startup.py)")
    loader.get_plugins = lambda: ()  # type: ignore[attr-defined]
    sys.modules["pydantic.plugin._loader"] = loader


@contextmanager
def command_start(reaches_hosts: bool) -> Iterator[None]:
    """Around a command: no pydantic plugins; for a command that reaches an inventory's hosts,
    the SSH helper process (started now, stopped at the end)."""
    without_pydantic_plugins()
    if not reaches_hosts:
        yield
        return
    from patchkit.host.transport.sshhelper import ssh_side

    with ssh_side():
        yield


def reach_then_run(hosts: list[HostSpec], concurrency: int, serial: list[Size] | None, accept_new_host_keys: bool,
                   modules: tuple[str, ...], run: Callable[[EarlyReach], Awaitable[T]]) -> T:
    """The run, its first hosts reached while its code loads: everything is valid by now.

    The first wave's transports open (an SSH handshake waits on the network) while `modules`
    (the command's own), the runner and the report are imported in a thread; then the start
    is over (`started`) and `run` gets the early connections, which its sessions take over.
    Whatever was opened and not taken (an interrupted run) is closed at the end."""
    import asyncio

    from patchkit.host.transport import sshhelper
    from patchkit.host.transport.base import Reach
    from patchkit.host.transport.early import EarlyReach, first_wave

    sshhelper.keep_for(len(hosts))

    async def reached() -> T:
        early = EarlyReach(first_wave(hosts, concurrency, serial), Reach(accept_new_host_keys))
        try:
            await asyncio.sleep(0)  # each connect runs up to its first wait on the network, then the imports
            await asyncio.to_thread(_import_run_code, modules)
            started()
            return await run(early)
        finally:
            await early.close()

    return asyncio.run(reached())


def _import_run_code(modules: tuple[str, ...]) -> None:
    """What a run imports beyond the validation, loaded while the first hosts connect. The
    switch interval is shortened meanwhile so that the event loop's thread gets the
    interpreter back at once when a host answers, not after the default 5 ms."""
    import importlib

    interval = sys.getswitchinterval()
    sys.setswitchinterval(min(interval, 0.0005))
    try:
        for module in ("patchkit.run.runner", *modules, "patchkit.report.output"):
            importlib.import_module(module)
    finally:
        sys.setswitchinterval(interval)
