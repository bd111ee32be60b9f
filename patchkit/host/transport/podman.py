"""The `podman` scheme: `podman://CONTAINER`, a running container reached by `podman exec -i`
(one exec per run, nothing installed in the container):

    podman [ENGINE_ARGS] exec -i [--user=USER] -- CONTAINER PYTHON -c BOOTSTRAP NONCE
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from pydantic import Field

from patchkit.host.transport.engine import EngineOptions, EngineScheme, EngineTarget

if TYPE_CHECKING:
    from patchkit.fleet.inventory import HostSpec

CONTAINER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # podman's and docker's names and ids


class PodmanOptions(EngineOptions):
    """podman containers (the host's `user` is exec's `--user`; default: the container's)."""

    engine: str | None = Field(default=None, description=(
        "The podman binary: a name looked up in PATH, or a path; default `podman`."))


@dataclass(frozen=True, kw_only=True)
class ExecTarget(EngineTarget):
    """A container of podman or docker: `ENGINE exec -i [--user=USER] -- CONTAINER ...`."""

    container: str  # its name or id
    user: str | None = None

    @property
    def what(self) -> str:
        return f"container {self.container}"

    def command(self, remote: list[str]) -> list[str]:
        user = [f"--user={self.user}"] if self.user else []  # one word: a user can never be read as an option
        return [*self.prefix, "exec", "-i", *user, "--", self.container, *remote]


class PodmanScheme(EngineScheme):
    scheme: ClassVar[str] = "podman"
    form: ClassVar[str] = "podman://CONTAINER"
    options: ClassVar[type[PodmanOptions]] = PodmanOptions

    def check_address(self, rest: str) -> None:
        if not CONTAINER_NAME.fullmatch(rest):
            raise ValueError(f"address {f'{self.scheme}://{rest}'!r}: want {self.form}, a container name or id "
                             "(letters, digits, '_', '.', '-')")

    def target(self, host: HostSpec) -> ExecTarget:
        options = host.options_as(self.options)
        container = (host.address or "").removeprefix(f"{self.scheme}://")
        return ExecTarget(name=host.name, prefix=(options.engine or self.scheme, *options.engine_args),
                          container=container, user=host.user)
