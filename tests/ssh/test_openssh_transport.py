"""`ssh_client: openssh`: the system OpenSSH client against real sshd servers on 127.0.0.1.

The same promises as the asyncssh transport (tests/ssh/test_ssh.py), kept by another client: one
exec per host per run, argv quoted, host keys checked (unknown refused unless accept-new,
changed always refused), readable connection errors, connection set-up retried and nothing
else. The real `patchkit` executable runs with HOME pointing at the test's own dir, so
~/.ssh/config and ~/.ssh/known_hosts are the test's, never the user's.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fixtures.make_drafter import make_drafter
from patchkit.host.agent.client import BOOTSTRAP
from patchkit.host.transport.ssh_common import CONNECT_ATTEMPTS
from tests.helpers import Result
from tests.sshd import (  # noqa: F401 - pytest fixtures
    require,
    SSHD,
    Fleet,
    Testbed,
    banner_user,
    closed_port,
    silent_port,
    fleet,
    login_users,
    sha256,
    sshd_root,
    testbed,
)
from tests.ssh.test_deploy import assert_deployed, deploy_recipe, home_python
from tests.ssh.test_ssh import (_wait_for, alias_config, argv_as_received_twice, check_become, check_life_cycle,
                            check_login_shell_banner, needs_system_python, patched)

pytestmark = [pytest.mark.timeout(120)]


@pytest.fixture(autouse=True)
def _openssh_client() -> None:
    require(shutil.which("ssh") is not None, "the OpenSSH client `ssh` is missing: `make test` installs openssh-client")

OPENSSH = {"ssh_client": "openssh"}


def isolated_ssh(folder: Path, config: Path) -> Path:
    """An `ssh` that reads only `config`, and records each call's argv (one file per call).

    OpenSSH finds ~/.ssh through the passwd entry, not $HOME: without -F the tests would read
    the real user's ~/.ssh/config and known_hosts.
    """
    calls = folder / "ssh-calls"
    calls.mkdir(parents=True, exist_ok=True)
    config.parent.mkdir(parents=True, exist_ok=True)
    with open(config, "a") as f:  # last: the hosts' own blocks come first, and the first value wins
        f.write(f"\nHost *\n  UserKnownHostsFile {config.parent / 'known_hosts'}\n")
    spy = folder / "spy-bin" / "ssh"
    spy.parent.mkdir(exist_ok=True)
    spy.write_text(f'#!/bin/sh\nf=$(mktemp "{calls}/call.XXXXXX")\nprintf \'%s\\n\' "$@" > "$f"\n'
                   f'exec {shutil.which("ssh")} -F {config} "$@"\n')
    spy.chmod(0o755)
    return spy


def recorded_calls(spy: str | Path) -> list[list[str]]:
    """The argv of every call the isolated `ssh` at `spy` recorded, oldest first."""
    calls = Path(spy).parent.parent / "ssh-calls"
    return [p.read_text().splitlines() for p in sorted(calls.glob("call.*"), key=lambda p: p.stat().st_mtime_ns)]


class OpenSSHBed:
    """A testbed whose patchkit runs reach hosts through the isolated `ssh`."""

    def __init__(self, tb: Testbed) -> None:
        self.tb = tb
        self.ssh = isolated_ssh(tb.root, tb.home / ".ssh" / "config")
        self.calls = tb.root / "ssh-calls"

    def run(self, *args: str, **env: str) -> Result:
        path = f"{self.ssh.parent}:{os.environ['PATH']}"
        return self.tb.run(*args, env=self.tb.env(PATH=path, **env))

    def sessions(self) -> list[list[str]]:
        """The recorded `ssh` calls that connect (not `ssh -G`, which only reads the config)."""
        argvs = [p.read_text().splitlines() for p in sorted(self.calls.glob("call.*"))]
        return [argv for argv in argvs if "-G" not in argv]


def add_hosts(tb: Testbed, servers: list[SSHD], known: bool = True) -> dict[str, Any]:
    envs = {s.name: tb.add(s.name, s) for s in servers}
    if known:
        tb.fleet.write_known_hosts(tb.known_hosts, servers)
    return envs


# ---------------------------------------------------------------------- runs through it


def test_apply_reapply_status_rollback_one_exec_per_host(testbed: Testbed) -> None:
    tb = testbed
    servers = tb.fleet.servers[:3]
    envs = add_hosts(tb, servers)
    ob = OpenSSHBed(tb)
    check_life_cycle(ob.run, str(tb.recipe()), str(tb.inventory(defaults=OPENSSH)), envs)

    # five runs, one `ssh` per host each, host keys checked, the remote command one argument
    argvs = ob.sessions()
    assert sorted(argv[argv.index("-p") + 1] for argv in argvs) == sorted(5 * [str(s.port) for s in servers])
    for argv in argvs:
        assert "StrictHostKeyChecking=yes" in argv and f"UserKnownHostsFile={tb.known_hosts}" in argv, argv
        assert argv[-3:-1] == ["--", "127.0.0.1"] and shlex.split(argv[-1])[1:3] == ["-c", BOOTSTRAP], argv
    assert {shlex.split(argv[-1])[0] for argv in argvs} == {str(e.python) for e in envs.values()}
    nonces = [shlex.split(argv[-1])[3] for argv in argvs]  # the agent's start mark: fresh for every start
    assert all(re.fullmatch(r"[0-9a-f]{16}", n) for n in nonces) and len(set(nonces)) == len(nonces), nonces


def test_per_host_choice_overrides_the_default(testbed: Testbed) -> None:
    tb = testbed
    embedded, system = tb.fleet.servers[3:5]
    add_hosts(tb, [embedded, system])
    inventory = tb.inventory(defaults=OPENSSH, **{embedded.name.replace("-", "_"): {"ssh_client": "asyncssh"}})
    ob = OpenSSHBed(tb)
    result = ob.run("apply", str(tb.recipe()), "-i", str(inventory), "--json")
    assert result.returncode == 0, result
    assert {h["status"] for h in result.hosts().values()} == {"changed"}, result
    assert [argv[argv.index("-p") + 1] for argv in ob.sessions()] == [str(system.port)]  # asyncssh: the other

    bad = tb.inventory(defaults={"ssh_client": "putty"})
    refused = ob.run("apply", str(tb.recipe()), "-i", str(bad))
    assert refused.returncode == 2, refused
    assert "ssh_client" in refused.stderr, refused


def test_deploy_binary_data_one_exec_then_nothing_to_send(testbed: Testbed, tmp_path: Path) -> None:
    tb = testbed
    servers = tb.fleet.servers[:2]
    envs = add_hosts(tb, servers)
    inventory = str(tb.inventory(defaults=OPENSSH, **{
        name.replace("-", "_"): {"python": str(home_python(env))} for name, env in envs.items()}))
    src = tb.root / "artifact"
    src.mkdir()
    # OpenSSH's escape character must be off: "~." after a newline would end an interactive session
    (src / "escapes.bin").write_bytes(b"\n~.\n~?\n~C\n" * 1000 + bytes(range(256)) * 4000)
    (src / "random.bin").write_bytes(os.urandom(24 << 20))
    recipe = str(deploy_recipe(tb.root / "deploy.yaml", dest="~/models/artifact", src="./artifact", validate=False))
    ob = OpenSSHBed(tb)
    cache = str(tmp_path / "cache")
    dests = {name: e.root / "home" / "models" / "artifact" for name, e in envs.items()}
    total = sum(p.stat().st_size for p in src.iterdir())

    first = ob.run("apply", recipe, "-i", inventory, "--json", PATCHKIT_CACHE_DIR=cache)
    assert first.returncode == 0, first
    for name, dest in dests.items():
        host = first.hosts()[name]
        assert host["status"] == "changed" and host["exec_requests"] == 1, first
        assert host["steps"][0]["details"]["bytes_sent"] == total
        assert_deployed(src, dest)

    again = ob.run("apply", recipe, "-i", inventory, "--json", PATCHKIT_CACHE_DIR=cache)
    assert again.returncode == 0, again
    for host in again.hosts().values():
        assert host["steps"][0]["status"] == "ok", again
        assert host["steps"][0]["details"].get("bytes_sent", 0) == 0

    undo = ob.run("rollback", recipe, "-i", inventory, "--json", PATCHKIT_CACHE_DIR=cache)
    assert undo.returncode == 0, undo
    assert not any(dest.exists() for dest in dests.values())


def test_drafter_deploy_validated_on_the_host(testbed: Testbed, tmp_path: Path) -> None:
    tb = testbed
    server = tb.fleet.servers[5]
    env = add_hosts(tb, [server])[server.name]
    python = {"python": str(home_python(env))}
    inventory = str(tb.inventory(defaults=OPENSSH, **{server.name.replace("-", "_"): python}))
    src = make_drafter(tb.root / "drafter", "valid-sharded")
    recipe = str(deploy_recipe(tb.root / "drafter.yaml", dest="~/models/drafter"))
    result = OpenSSHBed(tb).run("apply", recipe, "-i", inventory, "--json", PATCHKIT_CACHE_DIR=str(tmp_path / "c"))
    assert result.returncode == 0, result
    assert result.hosts()[server.name]["exec_requests"] == 1
    assert_deployed(src, env.root / "home" / "models" / "drafter")


def test_ssh_config_aliases_proxyjump_and_inventory_wins(testbed: Testbed) -> None:
    tb = testbed
    a, b, jump, behind = tb.fleet.servers[:4]
    closed = closed_port()
    (tb.home / ".ssh" / "config").write_text(
        alias_config(tb, closed)
        + f"\nHost behind-down\n  HostName 127.0.0.1\n  Port {behind.port}\n  ProxyJump alias-down\n")
    envs = {"host-a": tb.add("host-a", a), "host-b": tb.add("host-b", b), "host-c": tb.add("host-c", behind)}
    tb.add("host-d", None)
    tb.add("host-e", None)
    tb.fleet.write_known_hosts(tb.known_hosts, [a, b, behind])
    tb.fleet.write_known_hosts(tb.home / ".ssh" / "known_hosts", [jump])  # the jump host: OpenSSH's default file
    no_login = {"port": None, "user": None, "identity_file": None}
    inventory = tb.inventory(
        defaults=OPENSSH,
        host_a={**no_login, "address": "alias-a"},
        host_b={"address": "alias-b", "port": b.port, "user": "root", "identity_file": None},
        host_c={**no_login, "address": "behind"},
        host_d={**no_login, "address": "alias-down"},
        host_e={**no_login, "address": "behind-down"},
    )
    jump_log_before = len(jump.log)
    ob = OpenSSHBed(tb)  # after ~/.ssh/config is written

    result = ob.run("apply", str(tb.recipe()), "-i", str(inventory), "--json")
    assert result.returncode == 1, result
    message = result.hosts()["host-d"]["message"]
    assert message == f"host-d (127.0.0.1:{closed}): connection refused", result  # the address ssh -G resolved
    assert result.hosts()["host-e"]["message"] == (f"host-e (127.0.0.1:{behind.port}): connection refused by "
                                                   f"127.0.0.1:{closed} (a ProxyJump or ProxyCommand hop)"), result
    for name, env in envs.items():
        assert result.hosts()[name]["status"] == "changed", result
        assert result.hosts()[name]["exec_requests"] == 1
        assert patched(env.speculative)
    assert "Accepted publickey for root" in jump.log[jump_log_before:]  # host-c really went through the jump host


# ---------------------------------------------------------------------- failures and host keys


def test_connection_refused_fails_that_host_alone_quickly(testbed: Testbed) -> None:
    tb = testbed
    up = tb.fleet.servers[0]
    add_hosts(tb, [up])
    down = tb.add("gpu-down", None)  # a loopback port nobody listens on
    inventory = tb.inventory(defaults=OPENSSH)
    port = json.loads(inventory.read_text())["hosts"]["gpu-down"]["port"]
    ob = OpenSSHBed(tb)

    result = ob.run("apply", str(tb.recipe()), "-i", str(inventory), "--json")
    assert result.returncode == 1, result
    assert result.hosts()[up.name]["status"] == "changed", result
    failed = result.hosts()["gpu-down"]
    assert failed["status"] == "failed"
    assert failed["message"] == f"gpu-down (127.0.0.1:{port}): connection refused", result
    assert not patched(down.speculative)
    # a bounded number of attempts, not forever: counted `ssh` runs, not timed (the backoff
    # between them is counted in tests/unit/test_connect_retry.py)
    tries = [argv for argv in ob.sessions() if "-p" in argv and argv[argv.index("-p") + 1] == str(port)]
    assert len(tries) == CONNECT_ATTEMPTS, tries


def test_unknown_host_key_refused_then_accepted_with_flag(testbed: Testbed) -> None:
    tb = testbed
    servers = tb.fleet.servers[:2]
    envs = add_hosts(tb, servers, known=False)
    tb.known_hosts.write_text("")
    inventory, recipe = str(tb.inventory(defaults=OPENSSH)), str(tb.recipe())
    before = {s.name: s.ssh_connections() for s in servers}
    ob = OpenSSHBed(tb)

    refused = ob.run("apply", recipe, "-i", inventory, "--json")
    assert refused.returncode == 1, refused
    for server in servers:
        message = refused.hosts()[server.name]["message"]
        assert message.startswith(f"{server.name} (127.0.0.1:{server.port}): host key unknown: no entry for "
                                  f"[127.0.0.1]:{server.port} in {tb.known_hosts}"), message
        assert f"ssh-keyscan -p {server.port} 127.0.0.1 >> {tb.known_hosts}" in message, message
        assert "--accept-new-host-keys" in message
        assert not patched(envs[server.name].speculative)
        assert server.ssh_connections() == before[server.name] + 1  # never retried
    assert tb.known_hosts.read_text() == ""

    accepted = ob.run("apply", recipe, "-i", inventory, "--json", "--accept-new-host-keys")
    assert accepted.returncode == 0, accepted
    assert {h["status"] for h in accepted.hosts().values()} == {"changed"}
    for server in servers:  # recorded in the inventory's known_hosts (hashed or not: ssh_config decides)
        found = subprocess.run(["ssh-keygen", "-F", f"[127.0.0.1]:{server.port}", "-f", str(tb.known_hosts)],
                               check=False, capture_output=True, text=True)
        assert found.returncode == 0 and server.host_public_key in found.stdout, found

    strict = ob.run("status", recipe, "-i", inventory, "--json")  # no flag needed any more
    assert strict.returncode == 0, strict


def test_changed_host_key_is_refused_even_with_accept_new(testbed: Testbed) -> None:
    tb = testbed
    good, victim = tb.fleet.servers[0], tb.fleet.servers[1]
    add_hosts(tb, [good, victim], known=False)
    impostor = tb.fleet.servers[2].host_public_key  # what a reinstalled host (or a MITM) looks like
    tb.known_hosts.write_text(good.known_hosts_line() + f"[127.0.0.1]:{victim.port} {impostor}\n")
    known_before = tb.known_hosts.read_text()
    inventory, recipe = str(tb.inventory(defaults=OPENSSH)), str(tb.recipe())
    ob = OpenSSHBed(tb)

    for extra in ([], ["--accept-new-host-keys"]):
        connections = victim.ssh_connections()
        result = ob.run("apply", recipe, "-i", inventory, "--json", *extra)
        assert result.returncode == 1, result
        assert result.hosts()[good.name]["status"] in ("changed", "ok")
        message = result.hosts()[victim.name]["message"]
        assert message.startswith(f"{victim.name} (127.0.0.1:{victim.port}): HOST KEY CHANGED"), message
        assert f"ssh-keygen -R '[127.0.0.1]:{victim.port}' -f {tb.known_hosts}" in message, message
        assert f"ssh-keyscan -p {victim.port} 127.0.0.1" in message, message
        fingerprint = subprocess.run(["ssh-keygen", "-lf", str(victim.host_keys[0]) + ".pub"], check=True,
                                     capture_output=True, text=True).stdout.split()[1]
        assert fingerprint in message, message  # the key it presented
        assert not patched(tb.hosts[victim.name].speculative)
        assert tb.known_hosts.read_text() == known_before  # never replaced
        assert victim.ssh_connections() == connections + 1  # never retried


def test_authentication_failure_is_explained_and_not_retried(testbed: Testbed) -> None:
    tb = testbed
    server = tb.fleet.servers[6]
    env = add_hosts(tb, [server])[server.name]
    inventory = tb.inventory(defaults=OPENSSH, gpu_7={"identity_file": None})  # no key in ~/.ssh, no agent
    before = server.ssh_connections()
    ob = OpenSSHBed(tb)
    result = ob.run("apply", str(tb.recipe()), "-i", str(inventory), "--json")
    assert result.returncode == 1, result
    message = result.hosts()[server.name]["message"]
    assert message.startswith(f"{server.name} (127.0.0.1:{server.port}): authentication failed as root: "
                              "Permission denied (publickey)"), message
    assert not patched(env.speculative)
    assert server.ssh_connections() == before + 1


def test_connection_cut_mid_run_fails_the_host_then_a_rerun_converges(testbed: Testbed) -> None:
    tb = testbed
    victim = tb.fleet.extra_server("openssh-victim")
    env = add_hosts(tb, [victim])["openssh-victim"]
    recipe, inventory = str(tb.recipe(nap=True)), str(tb.inventory(defaults=OPENSSH))
    ob = OpenSSHBed(tb)

    run = tb.start("apply", recipe, "-i", inventory, "--json", "-e", "nap_s=30",
                   env=tb.env(PATH=f"{ob.ssh.parent}:{os.environ['PATH']}"))
    # the journal holds the step before the host writes the file (its intent): wait for both
    _wait_for(lambda: patched(env.speculative), what="the patch on the victim")
    _wait_for(lambda: any(r["steps"] for r in env.runs()), what="the patch journaled on the victim")
    assert victim.kill_sessions()  # the network drops in the middle of the check
    out, err = run.communicate(timeout=60)
    assert run.returncode == 1, err
    host = json.loads(out)["hosts"]["openssh-victim"]
    assert host["status"] == "failed", host
    assert "connection lost" in host["message"] or "closed" in host["message"], host
    assert patched(env.speculative)

    rerun = ob.run("apply", recipe, "-i", inventory, "--json", "-e", "nap_s=0")
    assert rerun.returncode == 0, rerun
    assert [s["status"] for s in rerun.hosts()["openssh-victim"]["steps"]] == ["ok", "ok"]


def test_missing_ssh_binary_is_a_clear_host_error() -> None:
    from patchkit.base.errors import HostError
    from patchkit.host.transport.openssh import OpenSSHTransport
    from patchkit.host.transport.ssh_common import SSHTarget

    transport = OpenSSHTransport(SSHTarget(name="h", address="127.0.0.1"), ssh="/nonexistent/ssh")
    with pytest.raises(HostError, match=r"h: ssh_client: openssh needs the OpenSSH client `/nonexistent/ssh`"):
        asyncio.run(transport.spawn(["true"]))
    assert transport.exec_requests == 0


# ---------------------------------------------------------------------- become


@needs_system_python
def test_become_with_and_without_a_sudo_right(testbed: Testbed, login_users: dict[str, str]) -> None:
    check_become(testbed, login_users, OpenSSHBed(testbed).run, defaults=OPENSSH)


@needs_system_python
def test_a_login_shell_that_prints_is_skipped_and_reported(testbed: Testbed, banner_user: str) -> None:
    check_login_shell_banner(testbed, banner_user, OpenSSHBed(testbed).run, defaults=OPENSSH)


# ---------------------------------------------------------------------- the transport itself


def _spec(fleet: Fleet, server: SSHD | None, known: Path, port: int | None = None, **kw: Any):
    from patchkit.host.transport.ssh_common import SSHTarget

    return SSHTarget(name=server.name if server else "mute", address="127.0.0.1",
                     port=port or (server.port if server else None), user="root",
                     identity_file=str(fleet.client_key), known_hosts=str(known), **kw)


@pytest.fixture(scope="module")
def spy(sshd_root: Path) -> str:
    """The isolated `ssh` for the transport's own tests (no testbed, no HOME)."""
    folder = sshd_root / "openssh-transport"
    return str(isolated_ssh(folder, folder / "ssh_config"))


REVERSE = [sys.executable, "-c", "import sys; print(sys.stdin.readline().strip()[::-1], flush=True)"]


async def _reverse(transport, text: str = "hello") -> bytes:
    streams = await transport.spawn(REVERSE)
    try:
        streams.stdin.write(text.encode() + b"\n")
        await streams.stdin.drain()
        return await streams.stdout.readline()
    finally:
        await streams.close()


def test_transport_quoted_argv_one_process_per_spawn(fleet: Fleet, sshd_root: Path, spy: str) -> None:
    from patchkit.host.transport.openssh import OpenSSHTransport

    server = fleet.servers[0]
    known = sshd_root / "openssh_known_hosts"
    fleet.write_known_hosts(known, [server])
    nasty = ["a b", "'; touch /tmp/pwned-by-patchkit-openssh; '", "$(id)", "`id`", "*", "\\n", "é", "", "-o", "--"]

    async def go() -> tuple[list[list[str]], int]:
        transport = OpenSSHTransport(_spec(fleet, server, known), ssh=spy)
        try:
            return await argv_as_received_twice(transport, nasty), transport.exec_requests
        finally:
            await transport.close()

    outs, execs = asyncio.run(go())
    assert outs == [nasty, nasty]
    assert execs == 2
    assert not Path("/tmp/pwned-by-patchkit-openssh").exists()


def test_transport_retries_connection_setup_and_replays_what_was_written(fleet: Fleet, sshd_root: Path,
                                                                         spy: str) -> None:
    from patchkit.base.errors import HostError
    from patchkit.host.transport.openssh import OpenSSHTransport
    from patchkit.host.transport.ssh_common import HostKeyRefused

    flaky = fleet.extra_server("openssh-flaky")
    known = sshd_root / "openssh_retry_known_hosts"
    fleet.write_known_hosts(known, [flaky])
    flaky.stop()

    async def comes_back() -> tuple[bytes, int]:
        transport = OpenSSHTransport(_spec(fleet, flaky, known), ssh=spy)
        asyncio.get_running_loop().call_later(0.1, flaky.start)  # refused first, up on a retry
        try:
            return await _reverse(transport), transport.exec_requests
        finally:
            await transport.close()

    assert asyncio.run(comes_back()) == (b"olleh\n", 1)  # the line written before the retry reached the host

    # a host key problem is final: exactly one connection, no retry
    empty = sshd_root / "openssh_empty_known_hosts"
    empty.write_text("")
    before = flaky.ssh_connections()

    async def unknown_key() -> bytes:
        transport = OpenSSHTransport(_spec(fleet, flaky, empty), ssh=spy)
        try:
            return await _reverse(transport)
        finally:
            await transport.close()

    with pytest.raises(HostKeyRefused, match="host key unknown"):
        asyncio.run(unknown_key())
    assert flaky.ssh_connections() == before + 1

    # a server that accepts TCP and never speaks SSH: ConnectTimeout per attempt, then a clear error.
    # Counted, not timed: exactly 2 `ssh` runs to it, each with ConnectTimeout=1, and ssh hung up on
    # each connection (the server never closes one: only the timeout can end it).
    with silent_port() as silent:
        async def hangs() -> bytes:
            transport = OpenSSHTransport(_spec(fleet, None, known, port=silent.port, connect_timeout=1, attempts=2),
                                         ssh=spy)
            try:
                return await _reverse(transport)
            finally:
                await transport.close()

        with pytest.raises(HostError,
                           match=rf"mute \(127.0.0.1:{silent.port}\): no SSH connection within 1s \(2 attempts\)"):
            asyncio.run(hangs())
        runs = [argv for argv in recorded_calls(spy) if "-G" not in argv and str(silent.port) in argv]
        assert len(runs) == 2 and all("ConnectTimeout=1" in argv for argv in runs), runs
        assert silent.hung_up() == [True, True]


def test_transport_command_line() -> None:
    """Host keys always checked, no shell quoting left to chance, paths as ssh_config values."""
    from dataclasses import replace

    from patchkit.host.transport.openssh import OpenSSHTransport
    from patchkit.host.transport.ssh_common import SSHTarget

    spec = SSHTarget(name="h", address="-oProxyCommand=evil", port=2222, user="u", identity_file="/k/100%/id",
                     known_hosts="/a dir/known_hosts")
    argv = OpenSSHTransport(spec).command(["python3", "-c", "print('hi there')"])
    assert argv[0] == "ssh" and argv[-3:] == ["--", "-oProxyCommand=evil", "python3 -c 'print('\"'\"'hi there'\"'\"')'"]
    joined = " ".join(argv)
    assert "StrictHostKeyChecking=yes" in joined and "BatchMode=yes" in joined and "-T" in argv
    assert "UserKnownHostsFile=\"/a dir/known_hosts\"" in argv and "/k/100%%/id" in argv
    assert "StrictHostKeyChecking=accept-new" in OpenSSHTransport(
        replace(spec, accept_new_host_keys=True)).command(["true"])
    assert not any("UserKnownHostsFile" in a for a in OpenSSHTransport(
        replace(spec, known_hosts=None)).command(["true"]))  # OpenSSH's own default, or the config's
