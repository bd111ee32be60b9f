"""The `local` scheme: the host is this machine, the agent a plain subprocess of patchkit (as its
user). Written `address: local`, or no address on the host named `localhost`."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from patchkit.base.errors import HostError
from patchkit.fleet.reach import TransportOptions
from patchkit.host.transport.base import NoFileSplice, Reach
from patchkit.host.transport.pipes import PipedProcess, start_piped

if TYPE_CHECKING:
    from patchkit.fleet.inventory import HostSpec


class _LocalStreams(NoFileSplice):
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.piped = PipedProcess(proc, keep=None)  # a local agent's stderr is kept whole
        assert proc.stdin and proc.stdout
        self.stdin = proc.stdin
        self.stdout = proc.stdout

    async def stderr_text(self) -> str:
        lines = await self.piped.stderr_lines()
        return "".join(line + "\n" for line in lines)

    async def error_tail(self) -> str:
        return "\n".join((await self.stderr_text()).strip().splitlines()[-5:])

    async def close(self) -> None:
        await self.piped.end()


class LocalOptions(TransportOptions):
    """This machine: nothing to choose, the agent runs as patchkit's user."""


class LocalScheme:
    form = "`local` (this machine)"
    written = False
    options = LocalOptions

    def check_address(self, rest: str) -> None:
        return None  # none, "" or `local`: nothing more to it

    def for_host(self, host: HostSpec, reach: Reach) -> LocalTransport:
        return LocalTransport()

    def reported(self, host: HostSpec) -> tuple[str, str]:
        return "local", "local"


class LocalTransport:
    name = "local"

    def __init__(self) -> None:
        self.exec_requests = 0

    async def spawn(self, argv: list[str]) -> _LocalStreams:
        self.exec_requests += 1
        try:
            proc = await start_piped(argv, own_session=False)
        except FileNotFoundError:
            raise HostError(f"interpreter {argv[0]} not found") from None
        except PermissionError:
            raise HostError(f"interpreter {argv[0]} is not executable") from None
        except OSError as exc:  # e.g. ENOEXEC: not a program at all
            raise HostError(f"interpreter {argv[0]} cannot be run: {exc.strerror or exc}") from None
        return _LocalStreams(proc)

    async def close(self) -> None:
        return None
