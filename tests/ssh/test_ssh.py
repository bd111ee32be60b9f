"""The SSH transport against real OpenSSH servers on 127.0.0.1 (tests/sshd.py).

The real `patchkit` executable runs in a subprocess with HOME pointing at a temp dir, so
~/.ssh/config and ~/.ssh/known_hosts are the test's own, never the user's.
"""

from __future__ import annotations

import asyncio
import functools
import json
import pwd
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from tests.helpers import Result
from tests.sshd import (  # noqa: F401 - pytest fixtures
    require,
    Fleet,
    BANNER_LINES,
    Testbed,
    banner_user,
    closed_port,
    silent_port,
    fleet,
    login_users,
    sha256,
    ssh_agent,
    sshd_root,
    testbed,
    testbed8,
)

pytestmark = pytest.mark.timeout(120)

KIMI = '"kimi_k2",'


def patched(path) -> bool:
    return KIMI in path.read_text()


def check_life_cycle(run: Callable[..., Result], recipe: str, inventory: str, envs: dict[str, Any]) -> list[Result]:
    """apply (one exec per host) -> re-apply ok -> status applied -> rollback -> status pending,
    on every host of `envs`. `run` is how patchkit is started (asyncssh and OpenSSH tests).
    Returns the five runs' results."""
    originals = {name: sha256(env.speculative) for name, env in envs.items()}

    first = run("apply", recipe, "-i", inventory, "--json")
    assert first.returncode == 0, first
    hosts = first.hosts()
    assert set(hosts) == set(envs)
    for name, env in envs.items():
        assert hosts[name]["status"] == "changed", first
        assert hosts[name]["exec_requests"] == 1, first  # the whole run: one exec per host
        assert patched(env.speculative)
        assert len(env.runs()) == 1

    again = run("apply", recipe, "-i", inventory, "--json")
    assert again.returncode == 0, again
    assert {h["status"] for h in again.hosts().values()} == {"ok"}, again
    assert {h["exec_requests"] for h in again.hosts().values()} == {1}

    status = run("status", recipe, "-i", inventory, "--json")
    assert status.returncode == 0, status
    for host in status.hosts().values():
        assert [s["status"] for s in host["steps"]] == ["applied"], status
        assert host["exec_requests"] == 1

    undo = run("rollback", recipe, "-i", inventory, "--json")
    assert undo.returncode == 0, undo
    assert {h["status"] for h in undo.hosts().values()} == {"changed"}, undo
    for name, env in envs.items():
        assert sha256(env.speculative) == originals[name]

    pending = run("status", recipe, "-i", inventory, "--json")
    assert pending.returncode == 3, pending
    assert {s["status"] for h in pending.hosts().values() for s in h["steps"]} == {"pending"}
    return [first, again, status, undo, pending]


def test_fleet_apply_reapply_status_rollback(testbed8: Testbed) -> None:
    tb = testbed8
    check_life_cycle(tb.run, str(tb.recipe()), str(tb.inventory()), tb.hosts)


# ---------------------------------------------------------------------- failures and host keys


def test_one_host_down_fails_alone(testbed: Testbed) -> None:
    tb = testbed
    for server in tb.fleet.servers[:3]:
        tb.add(server.name, server)
    down = tb.add("gpu-down", None)  # a loopback port nobody listens on
    tb.fleet.write_known_hosts(tb.known_hosts, tb.fleet.servers[:3])
    inventory = tb.inventory()
    port = json.loads(inventory.read_text())["hosts"]["gpu-down"]["port"]

    result = tb.run("apply", str(tb.recipe()), "-i", str(inventory), "--json")
    assert result.returncode == 1, result
    hosts = result.hosts()
    assert hosts["gpu-down"]["status"] == "failed"
    assert hosts["gpu-down"]["message"] == f"gpu-down (127.0.0.1:{port}): connection refused", result
    assert not patched(down.speculative)
    for server in tb.fleet.servers[:3]:
        assert hosts[server.name]["status"] == "changed", result
        assert patched(tb.hosts[server.name].speculative)
    # Retried a few times with a short backoff, not forever: tests/unit/test_connect_retry.py counts it.

    human = tb.run("apply", str(tb.recipe()), "-i", str(inventory))
    assert human.returncode == 1
    assert "connection refused" in human.stdout + human.stderr


def test_changed_host_key_is_refused_even_with_accept_new(testbed: Testbed) -> None:
    tb = testbed
    good, victim = tb.fleet.servers[0], tb.fleet.servers[1]
    tb.add(good.name, good)
    env = tb.add(victim.name, victim)
    # the victim's entry holds another host's key: what a reinstalled host (or a MITM) looks like
    impostor = tb.fleet.servers[2].host_public_key
    tb.known_hosts.write_text(good.known_hosts_line() + f"[127.0.0.1]:{victim.port} {impostor}\n")
    before = tb.known_hosts.read_text()
    inventory, recipe = str(tb.inventory()), str(tb.recipe())

    for extra in ([], ["--accept-new-host-keys"]):
        result = tb.run("apply", recipe, "-i", inventory, "--json", *extra)
        assert result.returncode == 1, result
        hosts = result.hosts()
        assert hosts[good.name]["status"] in ("changed", "ok")
        message = hosts[victim.name]["message"]
        assert hosts[victim.name]["status"] == "failed"
        assert "HOST KEY CHANGED" in message and f"[127.0.0.1]:{victim.port}" in message, message
        assert "ssh-keygen -R" in message and "ssh-keyscan" in message, message
        assert "SHA256:" in message  # the fingerprint it presented
        assert not patched(env.speculative)
        assert tb.known_hosts.read_text() == before  # never replaced


def test_unknown_host_key_refused_then_accepted_with_flag(testbed: Testbed) -> None:
    tb = testbed
    servers = tb.fleet.servers[:2]
    envs = [tb.add(s.name, s) for s in servers]
    tb.known_hosts.write_text("")
    inventory, recipe = str(tb.inventory()), str(tb.recipe())

    refused = tb.run("apply", recipe, "-i", inventory, "--json")
    assert refused.returncode == 1, refused
    for server, env in zip(servers, envs):
        message = refused.hosts()[server.name]["message"]
        assert "host key unknown" in message, message
        assert f"ssh-keyscan -p {server.port} 127.0.0.1 >> {tb.known_hosts}" in message, message
        assert "--accept-new-host-keys" in message
        assert not patched(env.speculative)
    assert tb.known_hosts.read_text() == ""

    accepted = tb.run("apply", recipe, "-i", inventory, "--json", "--accept-new-host-keys")
    assert accepted.returncode == 0, accepted
    assert {h["status"] for h in accepted.hosts().values()} == {"changed"}
    recorded = sorted(tb.known_hosts.read_text().splitlines())
    assert recorded == sorted(s.known_hosts_line().strip() for s in servers)
    # OpenSSH itself reads what we recorded
    for server in servers:
        found = subprocess.run(["ssh-keygen", "-F", f"[127.0.0.1]:{server.port}", "-f", str(tb.known_hosts)],
                               check=False, capture_output=True, text=True)
        assert found.returncode == 0 and server.host_public_key in found.stdout

    strict = tb.run("status", recipe, "-i", inventory, "--json")  # no flag needed any more
    assert strict.returncode == 0, strict


def test_keyscan_command_from_the_message_works(testbed: Testbed) -> None:
    tb = testbed
    server = tb.fleet.servers[0]
    env = tb.add(server.name, server)
    inventory, recipe = str(tb.inventory()), str(tb.recipe())
    refused = tb.run("apply", recipe, "-i", inventory, "--json")
    message = refused.hosts()[server.name]["message"]
    command = message.split("add it with `", 1)[1].split("`", 1)[0]
    subprocess.run(command, shell=True, check=True, capture_output=True)
    result = tb.run("apply", recipe, "-i", inventory, "--json")
    assert result.returncode == 0, result
    assert patched(env.speculative)


# ---------------------------------------------------------------------- inventory: -l, ssh config, agent


def test_limit_with_groups(testbed8: Testbed) -> None:
    tb = testbed8
    inventory = tb.inventory(groups={"kimi": ["gpu-1", "gpu-2"], "rack-a": ["kimi", "gpu-4"]})
    result = tb.run("apply", str(tb.recipe()), "-i", str(inventory), "-l", "rack-a,gpu-6", "--json")
    assert result.returncode == 0, result
    chosen = {"gpu-1", "gpu-2", "gpu-4", "gpu-6"}
    assert set(result.hosts()) == chosen
    for name, env in tb.hosts.items():
        assert patched(env.speculative) == (name in chosen), name

    unknown = tb.run("apply", str(tb.recipe()), "-i", str(inventory), "-l", "nope")
    assert unknown.returncode == 2
    assert "nope" in unknown.stderr


def alias_config(tb: Testbed, closed: int) -> str:
    """~/.ssh/config for the alias tests: alias-a, alias-b (the inventory must win over its
    wrong port and user), jump, behind (through jump) and alias-down (a closed port)."""
    a, b, jump, behind = tb.fleet.servers[:4]
    key = tb.fleet.client_key
    return (
        f"Host alias-a\n  HostName 127.0.0.1\n  Port {a.port}\n  User root\n  IdentityFile {key}\n\n"
        f"Host alias-b\n  HostName 127.0.0.1\n  Port 9\n  User nobody\n  IdentityFile {key}\n\n"
        f"Host jump\n  HostName 127.0.0.1\n  Port {jump.port}\n  User root\n  IdentityFile {key}\n\n"
        f"Host behind\n  HostName 127.0.0.1\n  Port {behind.port}\n  User root\n  IdentityFile {key}\n"
        f"  ProxyJump jump\n\n"
        f"Host alias-down\n  HostName 127.0.0.1\n  Port {closed}\n"
    )


def test_ssh_config_aliases_and_proxyjump(testbed: Testbed) -> None:
    tb = testbed
    a, b, jump, behind = tb.fleet.servers[:4]
    closed = closed_port()
    (tb.home / ".ssh" / "config").write_text(alias_config(tb, closed))
    envs = {"host-a": tb.add("host-a", a), "host-b": tb.add("host-b", b), "host-c": tb.add("host-c", behind)}
    tb.add("host-d", None)
    tb.fleet.write_known_hosts(tb.known_hosts, [a, b, behind])
    tb.fleet.write_known_hosts(tb.home / ".ssh" / "known_hosts", [jump])  # the jump host: default file
    no_login = {"port": None, "user": None, "identity_file": None}
    inventory = tb.inventory(
        host_a={**no_login, "address": "alias-a"},
        host_b={"address": "alias-b", "port": b.port, "user": "root", "identity_file": None},
        host_c={**no_login, "address": "behind"},
        host_d={**no_login, "address": "alias-down"},
    )
    jump_log = jump.root / "sshd.log"
    jump_log_before = jump_log.read_text()

    result = tb.run("apply", str(tb.recipe()), "-i", str(inventory), "--json")
    assert result.returncode == 1, result
    # messages name the address the config resolved the alias to
    assert result.hosts()["host-d"]["message"] == f"host-d (127.0.0.1:{closed}): connection refused", result
    for name, env in envs.items():
        assert result.hosts()[name]["status"] == "changed", result
        assert result.hosts()[name]["exec_requests"] == 1
        assert patched(env.speculative)
    # host-c really went through the jump host
    new_jump_lines = jump_log.read_text()[len(jump_log_before):]
    assert "Accepted publickey for root" in new_jump_lines, new_jump_lines


def test_ssh_agent_keys_are_used(testbed: Testbed, ssh_agent: str) -> None:
    tb = testbed
    server = tb.fleet.servers[0]
    env = tb.add(server.name, server)
    tb.fleet.write_known_hosts(tb.known_hosts, [server])
    inventory, recipe = str(tb.inventory(gpu_1={"identity_file": None})), str(tb.recipe())

    without = tb.run("apply", recipe, "-i", inventory, "--json")  # no key in ~/.ssh, no agent
    assert without.returncode == 1, without
    assert "authentication failed as root" in without.hosts()[server.name]["message"], without
    assert not patched(env.speculative)

    with_agent = tb.run("apply", recipe, "-i", inventory, "--json", env=tb.env(SSH_AUTH_SOCK=ssh_agent))
    assert with_agent.returncode == 0, with_agent
    assert patched(env.speculative)


# ---------------------------------------------------------------------- host lock, crashes


def _wait_for(predicate, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_two_concurrent_runs_on_one_host_are_serialized(testbed: Testbed) -> None:
    tb = testbed
    server = tb.fleet.servers[0]
    env = tb.add(server.name, server)
    tb.fleet.write_known_hosts(tb.known_hosts, [server])
    recipe, inventory = str(tb.recipe(nap=True)), str(tb.inventory())
    lock = env.state / "lock"

    first = tb.start("apply", recipe, "-i", inventory, "--json", "-e", "nap_s=4")
    _wait_for(lambda: lock.exists() and lock.stat().st_size > 0, what="the first run's lock")
    second = tb.start("apply", recipe, "-i", inventory, "--json", "-e", "nap_s=0")
    impatient = tb.run("apply", recipe, "-i", inventory, "--json", "-e", "nap_s=0", "--lock-timeout", "0.3")
    out1, err1 = first.communicate(timeout=60)
    out2, err2 = second.communicate(timeout=60)
    assert first.returncode == 0, err1
    assert second.returncode == 0, err2

    assert impatient.returncode == 1, impatient
    message = json.dumps(impatient.hosts()[server.name])
    assert "another patchkit run holds the lock" in message, impatient

    one, two = json.loads(out1)["hosts"][server.name], json.loads(out2)["hosts"][server.name]
    assert [s["status"] for s in one["steps"]] == ["changed", "ok"]
    assert [s["status"] for s in two["steps"]] == ["ok", "ok"]  # it waited, then found the patch in place
    runs = {r["steps"][0]["status"]: r for r in env.runs()}
    assert runs["ok"]["started"] >= runs["changed"]["finished"]  # no interleaving


def test_sshd_killed_mid_run_then_rerun_converges(testbed: Testbed) -> None:
    tb = testbed
    victim = tb.fleet.extra_server("victim")
    other = tb.fleet.servers[0]
    env = tb.add("victim", victim)
    tb.add(other.name, other)
    tb.fleet.write_known_hosts(tb.known_hosts, [victim, other])
    recipe, inventory = str(tb.recipe(nap=True)), str(tb.inventory())
    original = sha256(env.speculative)

    run = tb.start("apply", recipe, "-i", inventory, "--json", "-e", "nap_s=3")
    _wait_for(lambda: patched(env.speculative), what="the patch on the victim")
    _wait_for(lambda: any(r["steps"] for r in env.runs()), what="the journal record")
    victim.stop()  # the host goes down hard: sshd, the session, the agent, its check
    out, err = run.communicate(timeout=60)
    assert run.returncode == 1, err
    hosts = json.loads(out)["hosts"]
    assert hosts["victim"]["status"] == "failed"
    assert "connection lost" in hosts["victim"]["message"] or "exited" in hosts["victim"]["message"], hosts
    assert hosts[other.name]["status"] == "changed"

    # the file is whole (patched, importable) and journaled with a backup of the original
    assert patched(env.speculative)
    compile(env.speculative.read_text(), str(env.speculative), "exec")
    step = next(s for r in env.runs() for s in r["steps"] if s["name"] == "eagle3-whitelist")
    assert step["status"] == "changed" and step["sha256_before"] == original
    assert sha256(env.speculative) == step["sha256_after"]

    victim.start()  # back on the same port, same host key
    rerun = tb.run("apply", recipe, "-i", inventory, "--json", "-e", "nap_s=0")
    assert rerun.returncode == 0, rerun
    assert [s["status"] for s in rerun.hosts()["victim"]["steps"]] == ["ok", "ok"]
    undo = tb.run("rollback", recipe, "-i", inventory, "-l", "victim", "--json")
    assert undo.returncode == 0, undo
    assert sha256(env.speculative) == original


# ---------------------------------------------------------------------- non-root users, become


SYSTEM_PYTHON = "/usr/bin/python3"  # root's pyenv lives in /root (0700): other users cannot run it


def needs_system_python(test: Callable[..., None]) -> Callable[..., None]:
    """The test runs its hosts on Debian's python3, which other users can run; missing, it fails."""
    @functools.wraps(test)
    def checked(*args: Any, **kwargs: Any) -> None:
        require(Path(SYSTEM_PYTHON).exists(), f"{SYSTEM_PYTHON} (an interpreter other users can run) is missing")
        test(*args, **kwargs)
    return checked


@needs_system_python
def test_non_root_user_without_sudo(testbed: Testbed, login_users: dict[str, str]) -> None:
    tb = testbed
    plain = login_users["plain"]
    servers = tb.fleet.servers[4:6]
    own = tb.add("own-env", servers[0], base_python=SYSTEM_PYTHON, owner=plain)
    denied = tb.add("root-env", servers[1], base_python=SYSTEM_PYTHON)
    tb.fleet.write_known_hosts(tb.known_hosts, servers)
    inventory = tb.inventory(
        own_env={"user": plain},  # the user owns its environment: no sudo needed
        root_env={"user": plain, "state_dir": None},  # root's files, no become: the OS refuses
    )
    result = tb.run("apply", str(tb.recipe()), "-i", str(inventory), "--json")
    assert result.returncode == 1, result
    hosts = result.hosts()

    assert hosts["own-env"]["status"] == "changed", result
    assert patched(own.speculative)
    assert own.speculative.stat().st_uid == pwd.getpwnam(plain).pw_uid  # owner kept
    assert own.runs()

    assert hosts["root-env"]["status"] == "failed", result
    # Refused before any write: the agent could not keep root as the owner of a file it replaced.
    assert "belongs to uid 0, not to this user" in json.dumps(hosts["root-env"]), result
    assert not patched(denied.speculative)
    journal = Path(pwd.getpwnam(plain).pw_dir) / ".local/state/patchkit"  # the default state dir, the user's
    assert journal.is_dir() and journal.stat().st_uid == pwd.getpwnam(plain).pw_uid


def check_become(tb: Testbed, login_users: dict[str, str], run: Callable[..., Result],
                 defaults: dict[str, Any] | None = None) -> None:
    """become: true through `sudo -n`: a user with the sudo right patches a root-owned env in the
    same one exec; a user without it fails with sudo's message and what to do. `run` is how
    patchkit is started (the asyncssh and OpenSSH tests share this)."""
    require(shutil.which("sudo") is not None, "sudo is missing: `make test` installs it (scripts/install-system-deps.sh)")
    sudoer, plain = login_users["sudoer"], login_users["plain"]
    servers = tb.fleet.servers[6:8]
    become = tb.add("become", servers[0], base_python=SYSTEM_PYTHON)
    no_right = tb.add("become-no-sudo", servers[1], base_python=SYSTEM_PYTHON)
    tb.fleet.write_known_hosts(tb.known_hosts, servers)
    inventory = tb.inventory(
        defaults=defaults,
        become={"user": sudoer, "become": True},
        become_no_sudo={"user": plain, "become": True},
    )
    result = run("apply", str(tb.recipe()), "-i", str(inventory), "--json")
    assert result.returncode == 1, result
    hosts = result.hosts()

    assert hosts["become"]["status"] == "changed", result
    assert hosts["become"]["exec_requests"] == 1  # sudo is in the same exec, not another one
    assert patched(become.speculative)
    assert become.speculative.stat().st_uid == 0
    assert become.runs() and become.runs()[0]["steps"][0]["status"] == "changed"

    message = hosts["become-no-sudo"]["message"]
    assert hosts["become-no-sudo"]["status"] == "failed"
    assert "sudo: a password is required" in message and "become: true" in message, message
    assert not patched(no_right.speculative)


@needs_system_python
def test_become_with_and_without_a_sudo_right(testbed: Testbed, login_users: dict[str, str]) -> None:
    check_become(testbed, login_users, testbed.run)


def check_login_shell_banner(tb: Testbed, user: str, run: Callable[..., Result],
                             defaults: dict[str, Any] | None = None) -> None:
    """Two hosts whose login shell prints (tests/sshd.py BANNER_BASHRC: banners on stdout and
    stderr before the agent, one that looks like a reply, an EXIT trap printing after it): the
    whole life cycle works, nothing of it is parsed, and every run reports it as skipped, in
    the log (naming the host) and in each host's warnings. The asyncssh and OpenSSH tests share this."""
    servers = tb.fleet.servers[2:4]
    envs = {s.name: tb.add(s.name, s, base_python=SYSTEM_PYTHON, owner=user) for s in servers}
    tb.fleet.write_known_hosts(tb.known_hosts, servers)
    inventory = tb.inventory(defaults=defaults, **{s.name.replace("-", "_"): {"user": user} for s in servers})

    for result in check_life_cycle(run, str(tb.recipe()), str(inventory), envs):
        for name, host in result.hosts().items():
            warnings = host["warnings"]
            before = [w for w in warnings if "on stdout before the agent started" in w]
            after = [w for w in warnings if "on stdout after the agent's last reply" in w]
            stderr = [w for w in warnings if "on stderr" in w]
            assert len(before) == len(after) == len(stderr) == 1 and len(warnings) == 3, (name, warnings)
            assert "skipped 3 line(s)" in before[0] and "Welcome to " in before[0], before
            for line in BANNER_LINES[1:]:
                assert repr(line) in before[0], before  # the reply look-alike and the mark's line mate, skipped
            assert "'bye from the EXIT trap'" in after[0] and '\'{"id": 1, "ok": true, "result": {}}\'' in after[0], after
            assert "'banner on stderr'" in stderr[0] and "'bye on stderr'" in stderr[0], stderr
            logged = [line for line in result.stderr.splitlines() if "agent.output_skipped" in line and f"host={name}" in line]
            assert len(logged) == 3 and "Welcome to " in logged[0], result


@needs_system_python
def test_a_login_shell_that_prints_is_skipped_and_reported(testbed: Testbed, banner_user: str) -> None:
    check_login_shell_banner(testbed, banner_user, testbed.run)


# ---------------------------------------------------------------------- the transport itself


async def argv_as_received_twice(transport: Any, args: list[str]) -> list[list[str]]:
    """Spawn, twice, a process on the host that prints the arguments it got (as JSON)."""
    outs = []
    for _ in range(2):
        streams = await transport.spawn(
            [sys.executable, "-c", "import sys, json; print(json.dumps(sys.argv[1:]))", *args])
        outs.append(json.loads(await streams.stdout.readline()))
        await streams.close()
    return outs


def test_transport_one_connection_quoted_argv(fleet: Fleet, sshd_root) -> None:
    from patchkit.host.transport.ssh import SSHTransport
    from patchkit.host.transport.ssh_common import SSHTarget

    server = fleet.servers[0]
    known = sshd_root / "transport_known_hosts"
    fleet.write_known_hosts(known, [server])
    spec = SSHTarget(name="gpu-1", address="127.0.0.1", port=server.port, user="root",
                    identity_file=str(fleet.client_key), known_hosts=str(known))
    nasty = ["a b", "'; touch /tmp/pwned-by-patchkit-test; '", "$(id)", "`id`", "*", "\\n", "é", ""]

    async def go() -> tuple[list[list[str]], int, bool]:
        transport = SSHTransport(spec)
        try:
            outs = await argv_as_received_twice(transport, nasty)
            return outs, transport.exec_requests, transport._conn is not None
        finally:
            await transport.close()

    outs, execs, connected = asyncio.run(go())
    assert outs == [nasty, nasty]
    assert execs == 2 and connected
    assert not Path("/tmp/pwned-by-patchkit-test").exists()


def _spec(fleet: Fleet, server, known, **kw):
    from patchkit.host.transport.ssh_common import SSHTarget

    return SSHTarget(name=server.name, address="127.0.0.1", port=server.port, user="root",
                    identity_file=str(fleet.client_key), known_hosts=str(known), **kw)


def _connections(server) -> int:
    return server.ssh_connections()


def test_transport_retries_connection_setup_only(fleet: Fleet, sshd_root, monkeypatch: pytest.MonkeyPatch) -> None:
    from patchkit.base.errors import HostError
    from patchkit.host.transport.ssh import SSHTransport
    from patchkit.host.transport.ssh_common import HostKeyRefused

    flaky = fleet.extra_server("flaky")
    known = sshd_root / "retry_known_hosts"
    fleet.write_known_hosts(known, [flaky])
    flaky.stop()

    async def comes_back() -> int:
        transport = SSHTransport(_spec(fleet, flaky, known))
        asyncio.get_running_loop().call_later(0.1, flaky.start)  # refused first, up on the retry
        try:
            streams = await transport.spawn(["true"])
            await streams.close()
            return transport.exec_requests
        finally:
            await transport.close()

    assert asyncio.run(comes_back()) == 1

    # a host key problem is final: exactly one connection, no retry
    empty = sshd_root / "empty_known_hosts"
    empty.write_text("")
    before = _connections(flaky)

    async def unknown_key() -> None:
        transport = SSHTransport(_spec(fleet, flaky, empty))
        try:
            await transport.spawn(["true"])
        finally:
            await transport.close()

    with pytest.raises(HostKeyRefused, match="host key unknown"):
        asyncio.run(unknown_key())
    assert _connections(flaky) == before + 1

    # a server that accepts TCP and never speaks SSH: the per-attempt timeout, then a clear error.
    # Counted, not timed: asyncssh is given the 0.3 s limit on each of exactly 2 connections, and
    # the client hung up on each (the server never closes one: only the timeout can end it).
    import patchkit.host.transport.ssh as ssh_module

    real_connect = ssh_module.asyncssh.connect
    limits: list[float] = []

    async def connect(*args, options, **kwargs):
        limits.append(options.connect_timeout)
        return await real_connect(*args, options=options, **kwargs)

    monkeypatch.setattr(ssh_module.asyncssh, "connect", connect)
    with silent_port() as silent:
        async def hangs() -> None:
            from patchkit.host.transport.ssh_common import SSHTarget

            spec = SSHTarget(name="mute", address="127.0.0.1", port=silent.port, known_hosts=str(known),
                             connect_timeout=0.3, attempts=2)
            transport = SSHTransport(spec)
            try:
                await transport.spawn(["true"])
            finally:
                await transport.close()

        with pytest.raises(HostError,
                           match=rf"mute \(127.0.0.1:{silent.port}\): no SSH connection within 0.3s \(2 attempts\)"):
            asyncio.run(hangs())
        assert limits == [0.3, 0.3]
        assert silent.hung_up() == [True, True]


def test_transport_host_key_types(fleet: Fleet, sshd_root) -> None:
    """known_hosts holds one key type of several: it is used; a host re-keyed to another type is 'changed'."""
    from patchkit.host.transport.ssh import SSHTransport
    from patchkit.host.transport.ssh_common import HostKeyRefused

    dual = fleet.extra_server("dual", key_types=("ed25519", "rsa"))
    only_rsa = sshd_root / "rsa_known_hosts"
    only_rsa.write_text(f"[127.0.0.1]:{dual.port} {dual.public_key('rsa')}\n")

    async def spawn(spec) -> int:
        transport = SSHTransport(spec)
        try:
            streams = await transport.spawn(["true"])
            await streams.close()
            return transport.exec_requests
        finally:
            await transport.close()

    assert asyncio.run(spawn(_spec(fleet, dual, only_rsa))) == 1  # the server offers RSA first to us

    rekeyed = fleet.extra_server("rekeyed")  # ed25519 only, but known_hosts remembers an RSA key
    stale = sshd_root / "stale_known_hosts"
    stale.write_text(f"[127.0.0.1]:{rekeyed.port} {dual.public_key('rsa')}\n")
    before = _connections(rekeyed)
    with pytest.raises(HostKeyRefused, match="HOST KEY CHANGED: the host presented ssh-ed25519"):
        asyncio.run(spawn(_spec(fleet, rekeyed, stale)))
    assert _connections(rekeyed) == before + 1  # refused at once, not retried as a lost connection
