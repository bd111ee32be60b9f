"""asyncssh without the cost of packet logging nobody reads.

asyncssh formats a log line for every SSH packet it sends or receives (`SSHPacketLogger.
_log_packet`: the packet's name, its size) and only then asks its logger whether packets are
logged at all, which they are only at `asyncssh.set_debug_level(3)`. That is ~66 packets
per host for a patch run (0.7 ms of control CPU a host under cProfile, bench/README.md) and
one per 32 KiB of a deploy. `quiet_packet_logging` asks first: the same lines are logged
when debug level 3 is on, and no work is done when it is not.

Its other log lines (~32 a host: opening the connection, auth, each channel) are the same:
`SSHLogger.log` turns every argument into text before `LoggerAdapter.log` asks whether the
level is enabled at all (patchkit leaves asyncssh's logger at WARNING). `quiet_log_calls`
asks first.
"""

from __future__ import annotations

from typing import Any


def quiet_packet_logging() -> bool:
    """Wrap asyncssh's packet logger once; False if asyncssh's layout is not the expected one."""
    try:
        from asyncssh.logging import SSHLogger
        from asyncssh.packet import SSHPacketLogger
    except ImportError:  # pragma: no cover - another asyncssh layout: leave it alone
        return False
    original = getattr(SSHPacketLogger, "_log_packet", None)
    if original is None or not isinstance(getattr(SSHLogger, "_debug_level", None), int):
        return False
    if getattr(original, "patchkit_quiet", False):
        return True

    def _log_packet(self: Any, *args: Any, **kwargs: Any) -> None:
        if SSHLogger._debug_level >= 3:  # what SSHLogger.packet checks, asked before formatting
            original(self, *args, **kwargs)

    _log_packet.patchkit_quiet = True  # type: ignore[attr-defined]
    SSHPacketLogger._log_packet = _log_packet  # type: ignore[method-assign]
    return True


def quiet_log_calls() -> bool:
    """Wrap asyncssh's SSHLogger.log once; False if asyncssh's layout is not the expected one."""
    try:
        from asyncssh.logging import SSHLogger
    except ImportError:  # pragma: no cover - another asyncssh layout: leave it alone
        return False
    original = SSHLogger.__dict__.get("log")
    if original is None:
        return False
    if getattr(original, "patchkit_quiet", False):
        return True

    def log(self: Any, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if self.isEnabledFor(level):  # what LoggerAdapter.log asks, asked before the arguments become text
            original(self, level, msg, *args, **kwargs)

    log.patchkit_quiet = True  # type: ignore[attr-defined]
    SSHLogger.log = log  # type: ignore[method-assign]
    return True
