"""Containers and pods: `podman exec -i`, `docker exec -i`, `kubectl exec -i`, one per spawn.

The same one-agent-process model as SSH: the agent's bootstrap is the exec'd command, its
source and every request go to its stdin, replies come on its stdout. One exec per
container per run (counted in `exec_requests`), nothing installed in the container. The
engine's argv is built here from the inventory (`ContainerTarget.command`), never through a
shell:

    podman [ENGINE_ARGS] exec -i [--user=USER] -- CONTAINER PYTHON -c BOOTSTRAP NONCE
    docker [ENGINE_ARGS] exec -i [--user=USER] -- CONTAINER ...  (DOCKER_HOST as the user set it)
    kubectl [--kubeconfig F] [--context C] [ENGINE_ARGS] exec -i -n NS POD [-c CONTAINER] -- ...

An exec that fails before the agent's first line (no such container, not running, no such
interpreter in the image, no engine service) is read from the engine's stderr where the first
answer is awaited and raised as one `ContainerFailure` (container_errors.py) naming the host.

A container's files live as long as the container: `CHANGES_NOTE` is what `apply` tells the
user once per container host it changed (a recreated container starts from its image again).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from patchkit.fleet.inventory import K8S_NAME, split_address
from patchkit.host.transport.base import NoFileSplice, Reach
from patchkit.host.transport.pipes import PipedProcess, start_piped
from patchkit.host.transport.container_errors import (
    ContainerFailure,
    Where,
    container_failure,
    failure_from,
    is_engine_note,
)

if TYPE_CHECKING:
    from patchkit.fleet.inventory import HostSpec

CLOSE_TIMEOUT_S = 10.0
ERROR_TAIL_LINES = 5

CHANGES_NOTE = ("changes made inside a running container are lost when the container is recreated from its "
                "image: bake them into the image (`patchkit bake RECIPE --from IMAGE -t TAG`)")


ENGINES: dict[str, str] = {"podman": "podman", "docker": "docker", "k8s": "kubectl"}  # scheme -> engine binary
_CONTAINER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # podman/docker names and ids


@dataclass(frozen=True)
class ContainerAddress:
    """A parsed container address: `podman://C`, `docker://C`, `k8s://NS/POD[/CONTAINER]`."""

    scheme: Literal["podman", "docker", "k8s"]
    container: str  # the container's name or id; for k8s the pod
    namespace: str | None = None  # k8s only
    pod_container: str | None = None  # k8s only: the container in the pod (-c), None: the pod's default

    def __str__(self) -> str:
        if self.scheme != "k8s":
            return f"{self.scheme}://{self.container}"
        tail = f"/{self.pod_container}" if self.pod_container else ""
        return f"k8s://{self.namespace}/{self.container}{tail}"


def parse_container_address(address: str) -> ContainerAddress:
    """The container `podman://C`, `docker://C` or `k8s://NS/POD[/CONTAINER]` names; ValueError
    (one line, naming the form wanted) for a malformed one."""
    scheme, rest = split_address(address)
    if scheme == "k8s":
        parts = rest.split("/")
        if len(parts) not in (2, 3) or not all(parts):
            raise ValueError(f"address {address!r}: want k8s://NAMESPACE/POD or k8s://NAMESPACE/POD/CONTAINER")
        for what, part in zip(("namespace", "pod", "container"), parts):
            if not K8S_NAME.fullmatch(part):
                raise ValueError(f"address {address!r}: {what} {part!r} is not a Kubernetes name "
                                 "(lower-case letters, digits, '-' and '.')")
        return ContainerAddress("k8s", parts[1], parts[0], parts[2] if len(parts) == 3 else None)
    if scheme not in ("podman", "docker"):
        raise ValueError(f"address {address!r} is not a container address (podman://, docker:// or k8s://)")
    if not _CONTAINER_NAME.fullmatch(rest):
        raise ValueError(f"address {address!r}: want {scheme}://CONTAINER, a container name or id "
                         "(letters, digits, '_', '.', '-')")
    return ContainerAddress("podman" if scheme == "podman" else "docker", rest)


@dataclass(frozen=True)
class ContainerTarget:
    """One container or pod as the transport sees it (built from the inventory in `from_host`)."""

    name: str  # the inventory's name, for messages
    address: ContainerAddress
    engine: str  # the binary: a name looked up in PATH, or a path
    engine_args: tuple[str, ...] = ()
    user: str | None = None  # podman/docker `-u`; kubectl exec has no such option
    kubeconfig: str | None = None
    context: str | None = None
    python: str = "python3"

    @classmethod
    def from_host(cls, host: HostSpec, python: str = "python3") -> ContainerTarget:
        address = parse_container_address(host.address or "")
        return cls(name=host.name, address=address, engine=host.engine or ENGINES[address.scheme],
                   engine_args=tuple(host.engine_args),
                   user=host.user if address.scheme != "k8s" else None,
                   kubeconfig=host.kubeconfig, context=host.context, python=python)

    @property
    def what(self) -> str:
        a = self.address
        if a.scheme != "k8s":
            return f"container {a.container}"
        pod = f"pod {a.namespace}/{a.container}"
        return f"container {a.pod_container} of {pod}" if a.pod_container else pod

    @property
    def where(self) -> Where:
        return Where(self.name, self.what, os.path.basename(self.engine), self.python)

    def engine_prefix(self) -> list[str]:
        """The engine with its global options (kubectl's config flags first)."""
        argv = [self.engine]
        if self.address.scheme == "k8s":
            if self.kubeconfig:
                argv += ["--kubeconfig", os.path.expanduser(self.kubeconfig)]
            if self.context:
                argv += ["--context", self.context]
        return argv + list(self.engine_args)

    def command(self, remote: list[str]) -> list[str]:
        """The whole argv that runs `remote` in the container, its stdin attached."""
        a = self.address
        if a.scheme == "k8s":
            assert a.namespace is not None
            container = ["-c", a.pod_container] if a.pod_container else []
            return [*self.engine_prefix(), "exec", "-i", "-n", a.namespace, a.container, *container, "--", *remote]
        user = [f"--user={self.user}"] if self.user else []  # one word: a user can never be read as an option
        return [*self.engine_prefix(), "exec", "-i", *user, "--", a.container, *remote]


class ContainerTransport:
    name = "container"
    changes_note: str | None = CHANGES_NOTE  # apply says it once per host it changed

    def __init__(self, target: ContainerTarget, changes_note: str | None = CHANGES_NOTE) -> None:
        self.target = target
        self.exec_requests = 0
        self.changes_note = changes_note
        self._live: set[_ContainerStreams] = set()

    @classmethod
    def check_address(cls, scheme: str, rest: str) -> None:
        parse_container_address(f"{scheme}://{rest}")

    @classmethod
    def for_host(cls, host: HostSpec, reach: Reach) -> ContainerTransport:
        return cls(ContainerTarget.from_host(host), CHANGES_NOTE if reach.changes_note else None)

    async def spawn(self, argv: list[str]) -> _ContainerStreams:
        target = self.target
        if shutil.which(target.engine) is None:
            raise container_failure("engine_missing", replace(target.where, engine=target.engine), detail="")
        if argv:  # what the messages call the interpreter: the one actually started
            target = replace(target, python=argv[0])
        self.exec_requests += 1
        command = target.command(argv)
        try:
            proc = await start_piped(command)
        except OSError as exc:
            raise container_failure("engine_missing", replace(target.where, engine=target.engine),
                                    detail=exc.strerror or str(exc)) from None
        streams = _ContainerStreams(self, proc, target.where)
        self._live.add(streams)
        return streams

    async def close(self) -> None:
        for streams in list(self._live):
            await streams.close()


class _Stdin:
    """The exec's stdin; a broken pipe says how the exec ended (the container stopped...)."""

    def __init__(self, streams: _ContainerStreams) -> None:
        assert streams.proc.stdin is not None
        self._streams = streams
        self._writer = streams.proc.stdin

    def write(self, data: bytes) -> None:
        if not self._writer.is_closing():  # closing: the exec is gone, drain() says why
            self._writer.write(data)

    async def drain(self) -> None:
        """Before the agent's first line a broken pipe is not an error yet: the exec failed (no
        such container...) and the reader says why, from the engine's stderr."""
        try:
            if self._writer.is_closing():
                raise ConnectionResetError("closed")
            await self._writer.drain()
        except (ConnectionError, OSError):
            if not self._streams.answered:
                return
            raise ConnectionResetError(await self._streams.ended()) from None

    def close(self) -> None:
        self._writer.close()


class _ContainerStreams(NoFileSplice):
    """The pipes of one exec process; its first empty read asks the engine's stderr why."""

    def __init__(self, transport: ContainerTransport, proc: asyncio.subprocess.Process, where: Where) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.transport = transport
        self.proc = proc
        self.where = where
        self.piped = PipedProcess(proc)  # stderr read as it comes; how the exec is ended
        self.stdin = _Stdin(self)  # write/drain
        self.stdout = self  # readline
        self.answered = False  # a line of stdout arrived: the exec started the interpreter

    async def ended(self) -> str:
        """Why the exec is gone, for a broken pipe: its exit status, and what that usually means."""
        try:
            code = await asyncio.wait_for(self.proc.wait(), 2)
        except TimeoutError:
            return f"{self.where.engine} exec stopped reading"
        meaning = " (the container was stopped or removed?)" if code in (137, 143, 255) or code < 0 else ""
        return f"{self.where.engine} exec exited with {code}{meaning}"

    async def _stderr_lines(self) -> list[str]:
        return await self.piped.stderr_lines()

    async def readline(self) -> bytes:
        assert self.proc.stdout is not None
        line = await self.proc.stdout.readline()
        if line:
            self.answered = True
            return line
        if not self.answered:  # the exec itself failed: the engine says why on stderr
            failure = failure_from(await self._stderr_lines(), self.where)
            if failure is not None:
                raise failure
        return b""

    async def stderr_text(self) -> str:
        """The exec's stderr without the engine's own notes (kubectl's `Defaulted container ...`)."""
        return "\n".join(line for line in await self._stderr_lines() if not is_engine_note(line))

    async def error_tail(self) -> str:
        lines = await self._stderr_lines()
        if not self.answered:
            failure = failure_from(lines, self.where)
            if failure is not None:  # the client prefixes the host's name itself
                return str(failure).removeprefix(f"{self.where.host}: ")
        tail = "; ".join([line.strip() for line in lines if line.strip()][-ERROR_TAIL_LINES:])  # one line
        if self.proc.returncode not in (None, 0):  # how the exec ended, then what it said
            return await self.ended() + (f": {tail}" if tail else "")
        return tail

    async def close(self) -> None:
        self.transport._live.discard(self)
        await self.piped.end(CLOSE_TIMEOUT_S)


__all__ = ["CHANGES_NOTE", "ContainerAddress", "ContainerFailure", "ContainerTarget", "ContainerTransport",
           "parse_container_address"]
