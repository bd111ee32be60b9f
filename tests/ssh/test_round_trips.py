"""Round trips of a run over real sshd (tests/sshd.py), counted per write.

sshd opens a session's window only once its command runs, so anything written on stdin
leaves one round trip after the exec request: the agent's start and first reads ride in the
exec's command line instead, and the apply's last records, the prune and `end` share the
round trip of the agent's exit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.agent.test_light_start import rounds_of
from tests.sshd import Testbed, fleet, sshd_root, testbed  # noqa: F401 - pytest fixtures

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("helper", ["1", "0"], ids=["ssh-helper", "in-process"])
def test_an_apply_over_ssh_starts_in_the_exec_and_takes_three_rounds(testbed: Testbed, tmp_path: Path,
                                                                    helper: str) -> None:
    """`agent_start: command`: the start and the first reads ride in the exec's command line,
    whether SSH runs in the helper process (host/transport/sshhelper.py) or in the CLI's."""
    server = testbed.fleet.servers[0]
    testbed.add(server.name, server)
    testbed.fleet.write_known_hosts(testbed.known_hosts, [server])
    inventory = testbed.inventory(**{server.name.replace("-", "_"): {"agent_start": "command"}})
    argv = ["apply", str(testbed.recipe()), "-i", str(inventory), "--json"]
    env = testbed.env(PATCHKIT_CACHE_DIR=str(tmp_path / "cache"), PATCHKIT_SSH_HELPER=helper)

    fresh, proc = rounds_of(tmp_path, argv, transport="ssh", env=env)
    assert proc.returncode == 0, proc.stderr
    host = json.loads(proc.stdout)["hosts"][server.name]
    assert host["status"] == "changed" and host["exec_requests"] == 1, host
    assert fresh[0] == ["command line", "hello", "lock", "journal_list", "locate"], fresh
    assert len(fresh) == 3 and fresh[2][-1] == "end", fresh

    noop, proc = rounds_of(tmp_path, argv, transport="ssh", env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["hosts"][server.name]["status"] == "ok"
    assert len(noop) == 2 and noop[1][-1] == "end", noop


def test_by_default_the_agent_starts_on_stdin_and_its_command_line_carries_no_source(
        testbed: Testbed, tmp_path: Path) -> None:
    """The default (`agent_start: stdin`): nothing but the short bootstrap and the nonce in argv
    (what `ps` and a host's audit log show), the source and first requests in one stdin write."""
    server = testbed.fleet.servers[0]
    testbed.add(server.name, server)
    testbed.fleet.write_known_hosts(testbed.known_hosts, [server])
    argv = ["apply", str(testbed.recipe()), "-i", str(testbed.inventory()), "--json"]
    env = testbed.env(PATCHKIT_CACHE_DIR=str(tmp_path / "cache"))

    fresh, proc = rounds_of(tmp_path, argv, transport="ssh", env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["hosts"][server.name]["status"] == "changed"
    assert "command line" not in fresh[0], fresh
    assert fresh[0][:5] == ["stdin", "hello", "lock", "journal_list", "locate"], fresh
    assert len(fresh) == 3 and fresh[2][-1] == "end", fresh


def test_a_server_that_opens_no_session_is_reported_as_such(testbed: Testbed) -> None:
    """MaxSessions 0: sshd authenticates, then refuses the session channel; the start is held
    back until then, and the host's message is still the transport's own."""
    server = testbed.fleet.extra_server("nosessions")
    server.stop()
    try:
        server.start(max_sessions=0)
        testbed.add(server.name, server)
        testbed.fleet.write_known_hosts(testbed.known_hosts, [server])
        result = testbed.run("apply", str(testbed.recipe()), "-i", str(testbed.inventory()), "--json")
        assert result.returncode != 0, result
        host = result.hosts()[server.name]
        assert host["status"] == "failed", host
        assert host["message"] == f"{server.name} (127.0.0.1:{server.port}): cannot open a session: open failed", host
    finally:
        server.stop()
