"""What the container engines' schemes share (podman.py, docker.py, k8s.py): the options every
engine takes, a target that builds the engine's argv, and the way from a host to its transport
(container.py's exec, imported only once a container host is reached). Light: the process
code is container.py's; an engine's module says only how its CLI execs into a container.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from pydantic import Field

from patchkit.fleet.reach import TransportOptions
from patchkit.host.transport.container_errors import Where

if TYPE_CHECKING:
    from patchkit.fleet.inventory import HostSpec
    from patchkit.host.transport.base import Reach, Transport


class EngineOptions(TransportOptions):
    """What every container engine takes (an engine's module describes `engine` with its own binary)."""

    engine: str | None = Field(default=None, description="The engine's binary: a name looked up in PATH, or a path.")
    engine_args: list[str] = Field(default_factory=list, description=(
        "Options the engine takes before `exec`, one word an item, e.g. `[--runtime, runc, "
        "--cgroup-manager=cgroupfs]`."))


@dataclass(frozen=True, kw_only=True)
class EngineTarget(ABC):
    """One container or pod as its engine's CLI reaches it (built from the host by its scheme)."""

    name: str  # the inventory's name, for messages
    prefix: tuple[str, ...]  # the engine (a name looked up in PATH, or a path) and its global options
    python: str = "python3"

    @property
    def engine(self) -> str:
        return self.prefix[0]

    @property
    @abstractmethod
    def what(self) -> str:
        """The container as messages name it: `container web-1`, `pod ns/web-1`."""

    @abstractmethod
    def command(self, remote: list[str]) -> list[str]:
        """The whole argv that runs `remote` in the container, its stdin attached (never a shell)."""

    @property
    def where(self) -> Where:
        return Where(self.name, self.what, os.path.basename(self.engine), self.python)


class EngineScheme(ABC):
    """A container engine's scheme: `SCHEME://...` reached by one `ENGINE exec -i` per run."""

    written: ClassVar[bool] = True
    scheme: ClassVar[str]  # as addresses write it

    @abstractmethod
    def target(self, host: HostSpec) -> EngineTarget:
        """The container the host's address and options name."""

    def for_host(self, host: HostSpec, reach: Reach) -> Transport:
        from patchkit.host.transport.container import CHANGES_NOTE, ContainerTransport  # process code: now

        return ContainerTransport(self.target(host), CHANGES_NOTE if reach.changes_note else None)

    def reported(self, host: HostSpec) -> tuple[str, str]:
        return self.scheme, host.address or host.name
