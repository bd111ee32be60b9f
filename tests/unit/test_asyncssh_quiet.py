"""asyncssh's packet log lines: formatted only when asyncssh would log them (debug level 3).
No connection: the packet logger is called as asyncssh calls it for every packet."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from patchkit.host.transport.asyncssh_import import asyncssh
from patchkit.host.transport.asyncssh_quiet import quiet_log_calls, quiet_packet_logging


class Logged(asyncssh.packet.SSHPacketLogger):
    def __init__(self) -> None:
        self.formatted = 0

    @property
    def logger(self) -> Logged:  # type: ignore[override]  # the packet call is what is counted
        return self

    def packet(self, pktid: int | None, packet: bytes, msg: str, *args: str) -> None:  # SSHLogger.packet
        self.formatted += 1
        asyncssh.logging.logger.packet(pktid, packet, msg, *args)


def test_packets_are_formatted_only_at_debug_level_3(caplog: pytest.LogCaptureFixture) -> None:
    assert quiet_packet_logging() and quiet_packet_logging()  # once, and again is a no-op
    sent = Logged()
    level = asyncssh.logging.SSHLogger._debug_level
    try:
        asyncssh.set_debug_level(1)
        sent.log_sent_packet(94, 7, b"x" * 100)
        assert sent.formatted == 0
        asyncssh.set_debug_level(3)
        with caplog.at_level(logging.DEBUG, logger="asyncssh"):
            sent.log_sent_packet(94, 7, b"x" * 100)
        assert sent.formatted == 1
        assert any("Sent" in r.getMessage() and "100 bytes" in r.getMessage() for r in caplog.records)
    finally:
        asyncssh.logging.SSHLogger._debug_level = level


class Texts(list):  # type: ignore[type-arg]
    """A list argument (asyncssh joins those into text) that counts how often it is read."""

    def __init__(self) -> None:
        super().__init__(["channel 7"])
        self.made = 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        self.made += 1
        return super().__iter__()


def test_other_lines_become_text_only_when_their_level_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    assert quiet_log_calls() and quiet_log_calls()
    arg = Texts()
    logger = asyncssh.logging.logger.get_child("conn", "conn=1")
    with caplog.at_level(logging.WARNING, logger="asyncssh"):
        logger.info("Opening %s", arg)
        logger.debug1("Closing %s", arg)
    assert arg.made == 0
    with caplog.at_level(logging.INFO, logger="asyncssh"):
        logger.info("Opening %s", arg)
    assert arg.made == 1
    assert any(r.getMessage() == "[conn=1] Opening channel 7" for r in caplog.records)


def test_the_ssh_transport_installs_both_quiet_loggers() -> None:
    """What the tests above check is what a run gets: importing the SSH transport, in a process
    of its own (the tests above install them themselves), puts both in place."""
    probe = ("import patchkit.host.transport.ssh, asyncssh.logging, asyncssh.packet\n"
             "print(getattr(asyncssh.logging.SSHLogger.__dict__['log'], 'patchkit_quiet', False),"
             " getattr(asyncssh.packet.SSHPacketLogger.__dict__['_log_packet'], 'patchkit_quiet', False))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True"], out.stdout
