"""The first hosts' connections start once the run is valid, while its code loads
(host/transport/early.py); the runner's session takes them. Against real sshd hosts."""

from __future__ import annotations

import asyncio

import pytest

from patchkit.fleet.inventory import HostSpec
from patchkit.host.transport.base import Reach
from patchkit.host.transport.early import EarlyReach, first_wave
from patchkit.base.rollout import parse_serial
from tests.sshd import SSHD, Testbed, fleet, sshd_root, testbed  # noqa: F401 - pytest fixtures

pytestmark = pytest.mark.timeout(120)


def test_the_first_wave_is_the_first_batchs_first_hosts() -> None:
    hosts = [HostSpec(name=f"h{i}") for i in range(5)]
    names = lambda wave: [h.name for h in wave]  # noqa: E731
    assert names(first_wave(hosts, 32, None)) == ["h0", "h1", "h2", "h3", "h4"]
    assert names(first_wave(hosts, 2, None)) == ["h0", "h1"]
    assert names(first_wave(hosts, 32, parse_serial("1", "--serial"))) == ["h0"]
    assert names(first_wave(hosts, 32, parse_serial("40%,100%", "--serial"))) == ["h0", "h1"]
    assert first_wave([], 32, None) == []


def hosts_of(testbed: Testbed, n: int) -> tuple[list[SSHD], list[int]]:
    """The first n servers as the testbed's hosts, and how many SSH connections each had so far."""
    servers = testbed.fleet.servers[:n]
    for server in servers:
        testbed.add(server.name, server)
    testbed.fleet.write_known_hosts(testbed.known_hosts, servers)
    return servers, [s.ssh_connections() for s in servers]


def test_each_host_is_connected_once_and_its_session_uses_that_connection(testbed: Testbed) -> None:
    servers, before = hosts_of(testbed, 2)
    result = testbed.run("apply", str(testbed.recipe()), "-i", str(testbed.inventory()), "--json")
    assert result.returncode == 0, result
    hosts = result.json()["hosts"]
    assert {hosts[s.name]["status"] for s in servers} == {"changed"}
    assert all(hosts[s.name]["exec_requests"] == 1 for s in servers), hosts
    assert [s.ssh_connections() - b for s, b in zip(servers, before)] == [1, 1]


def test_hosts_after_the_first_batch_are_not_reached_early(testbed: Testbed) -> None:
    """--serial 1 with the first host failing: the others are never contacted, early or late."""
    servers, before = hosts_of(testbed, 3)
    inventory = testbed.inventory(**{servers[0].name.replace("-", "_"): {"python": "/nonexistent/python3"}})
    result = testbed.run("apply", str(testbed.recipe()), "-i", str(inventory), "--serial", "1", "--json")
    assert result.returncode == 1, result
    hosts = result.json()["hosts"]
    assert hosts[servers[0].name]["status"] == "failed", hosts
    assert [hosts[s.name]["status"] for s in servers[1:]] == ["skipped", "skipped"], hosts
    assert [s.ssh_connections() - b for s, b in zip(servers, before)] == [1, 0, 0]


def test_a_connection_no_session_took_is_closed(testbed: Testbed) -> None:
    """Opened early, never used (a run interrupted before its sessions): closed, in flight or made."""
    server = testbed.fleet.servers[0]
    testbed.add(server.name, server)
    testbed.fleet.write_known_hosts(testbed.known_hosts, [server])
    host = HostSpec(name=server.name, address="127.0.0.1", port=server.port, user="root",
                    identity_file=str(testbed.fleet.client_key), known_hosts=str(testbed.known_hosts))

    async def opened_then_closed(wait: bool) -> object:
        early = EarlyReach([host], Reach())
        transport = early._open[server.name]
        if wait:
            await transport._connection()  # type: ignore[attr-defined]
        conn = transport._conn  # type: ignore[attr-defined]
        await early.close()
        assert early.take(server.name) is None
        return conn

    conn = asyncio.run(opened_then_closed(wait=True))
    assert conn is not None and conn.is_closed()  # type: ignore[attr-defined]
    assert asyncio.run(opened_then_closed(wait=False)) is None  # cancelled before it connected: nothing left
