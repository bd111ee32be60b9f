"""The transport interface: start one process on the host and hand back its pipes.

Everything else (what to run, what to ask it) lives above this line, so a new
transport only has to say how a process is started on its kind of host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol


class ByteWriter(Protocol):
    def write(self, data: bytes) -> None: ...
    async def drain(self) -> None: ...


class ByteReader(Protocol):
    async def readline(self) -> bytes:
        """The next line; b"" at the end. After close(): what is left, then b""."""


class AgentStreams(Protocol):
    @property
    def stdin(self) -> ByteWriter: ...  # read-only here: a transport's own writer type fits

    @property
    def stdout(self) -> ByteReader: ...
    # Optional ability, declared: True when `write_file` can move a file's bytes into stdin
    # itself (OpenSSH: splice(2) into ssh's stdin pipe, never through Python; Ray: each chunk
    # put into the object store once for every node of the run). False: write() them.
    supports_file_splice: ClassVar[bool]

    async def write_file(self, fd: int, offset: int, count: int) -> int | None:
        """Move up to `count` bytes of the file `fd` from `offset` into stdin, after what was
        written before; how many moved (0: the file ends there), or None when it cannot now:
        then write() the bytes. Only called when `supports_file_splice`."""

    async def error_tail(self) -> str:
        """The last lines the process wrote to stderr (for error messages)."""

    async def stderr_text(self) -> str:
        """Everything the process wrote to stderr (the transport's own messages left out),
        once it has exited; the agent client reports it as skipped output after close()."""

    async def close(self) -> None: ...


class NoFileSplice:
    """For streams without the ability: file bytes are written through stdin.write()."""

    supports_file_splice: ClassVar[bool] = False

    async def write_file(self, fd: int, offset: int, count: int) -> int | None:
        return None


class Transport(Protocol):
    """Optional abilities, read with getattr:
    - `changes_note: str | None`, what `apply` tells the user once per host it changed when
      changes there do not outlive the host (containers);
    - `start_in_command: bool`, True when writing to a new process's stdin costs a round trip
      of its own after the start (SSH: the server opens the session's window only once the
      command runs): the agent's start then rides in its command line (host/agent/client.py START);
    - `open()`, start reaching the host now, before the first spawn asks: called once the run
      is valid, while the rest of the run's code loads (host/transport/early.py)."""

    name: str
    exec_requests: int  # processes started on the host so far (each SSH exec costs a login shell)

    async def spawn(self, argv: list[str]) -> AgentStreams:
        """Start argv on the host (never through an unquoted shell)."""

    async def close(self) -> None: ...


@dataclass(frozen=True)
class Reach:
    """What a run tells every transport beyond the host's own inventory entry."""

    accept_new_host_keys: bool = False  # SSH: record unknown host keys (a changed key is still refused)
    changes_note: bool = True  # containers: apply says once per host that changes last as long as it
