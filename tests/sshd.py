"""A fleet of real OpenSSH servers on 127.0.0.1, for the SSH transport's tests.

Each "host" is its own `sshd -D` process on a free loopback port, with its own host key,
`UsePAM no`, `StrictModes no`, and an AuthorizedKeysFile holding one generated client key.
What makes a host a *host* for patchkit is in the inventory: its own interpreter (a
pip-less venv whose .pth reaches a private copy of the toyllm fixture package) and its own
state dir. So the sshd processes live for the whole session, and every test builds fresh
host environments on them.

Use from a test module (conftest.py is not ours):

    from tests.sshd import fleet, testbed, testbed8  # noqa: F401  (pytest fixtures)

Everything lives under one world-readable temp dir (non-root test users must traverse it)
that is removed, and every sshd / ssh-agent we started killed, at the end of the session.
Needs `sshd` (apt-get install -y openssh-server; .ci/run does) and root for the tests that
log in as other users.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import venv
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import PATCHKIT, Result

REPO = Path(__file__).resolve().parent.parent
TOYLLM = REPO / "fixtures" / "pkgs" / "toyllm"
SPECULATIVE = "toyllm/config/speculative.py"
SSHD_BIN = shutil.which("sshd") or "/usr/sbin/sshd"
HAVE_SSHD = os.path.isfile(SSHD_BIN) and os.access(SSHD_BIN, os.X_OK)
IS_ROOT = os.geteuid() == 0

# The recipe the fleet tests apply: the kimi_eagle3 whitelist patch aimed at toyllm,
# optionally followed by a check that sleeps (keeps the host lock / the session busy).
RECIPE = """\
name: ssh_fleet
description: the EAGLE-3 whitelist patch on toyllm, over SSH
vars: {{nap_s: 0}}
steps:
  - name: eagle3-whitelist
    patch:
      package: toyllm
      versions: ">=0.10.1,<0.22"
      modules: [toyllm.config.speculative, toyllm.config]
      edit:
        list_insert:
          names: [eagle3_target_supported, aux_hidden_states_supported]
          within: SpeculativeConfig._verify_args
          values: ["kimi_k2", "deepseek_v3"]
          after: "afmoe"
    verify:
      import: [toyllm.config.speculative]
{nap}"""
NAP_STEP = """\
  - name: nap
    check:
      python: |
        import time
        time.sleep(float("{{ nap_s }}"))
"""


def patchkit_executable() -> list[str]:
    """The console script beside the test interpreter (fixtures/project_cli.py): never via PATH."""
    return [PATCHKIT]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def closed_port() -> int:
    """A loopback port nobody listens on (connection refused)."""
    return free_port()


class SilentServer:
    """A loopback port that accepts TCP connections and never speaks SSH (a hung server).

    The kernel completes each connection; nothing here ever reads or answers until
    `hung_up()`, so a client can only end one by giving up on its own (its connect timeout).
    """

    def __init__(self, listener: socket.socket) -> None:
        self._listener = listener
        self.port: int = listener.getsockname()[1]

    def hung_up(self) -> list[bool]:
        """One entry per connection made so far, in order: True if its client has closed it.

        Called after the client gave up, each closed connection reads to its end at once; the
        30 s limit only keeps a client that never gave up from hanging the test.
        """
        self._listener.setblocking(False)
        closed = []
        while True:
            try:
                conn, _ = self._listener.accept()
            except BlockingIOError:
                return closed
            with conn:
                conn.settimeout(30)
                try:
                    while conn.recv(4096):  # the client's SSH banner, then its end
                        pass
                    closed.append(True)
                except ConnectionResetError:
                    closed.append(True)
                except TimeoutError:
                    closed.append(False)


@contextlib.contextmanager
def silent_port() -> Iterator[SilentServer]:
    """A SilentServer on a free loopback port, for the block."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield SilentServer(listener)


def _descendants(pid: int) -> list[int]:
    """Processes below pid (children first found by /proc ppid links)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _kill(pids: list[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def require(present: bool, reason: str) -> None:
    """A dependency `make test` installs is missing: fail with the reason, never skip."""
    if not present:
        pytest.fail(f"set-up incomplete: {reason}", pytrace=False)


# ---------------------------------------------------------------------- one sshd


@dataclass
class SSHD:
    """One OpenSSH server on 127.0.0.1:port with its own host key."""

    name: str
    root: Path
    authorized_keys: Path
    port: int = 0
    proc: subprocess.Popen | None = None
    key_types: tuple[str, ...] = ("ed25519",)
    host_keys: list[Path] = field(init=False)
    _probes_at_start: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.host_keys = [self.root / f"ssh_host_{kind}_key" for kind in self.key_types]
        for kind, path in zip(self.key_types, self.host_keys):
            if not path.exists():
                _keygen(path, f"{self.name}-hostkey", kind)

    def public_key(self, kind: str = "ed25519") -> str:
        """`ssh-ed25519 AAAA...` (no comment)."""
        kind, blob = Path(str(self.root / f"ssh_host_{kind}_key") + ".pub").read_text().split()[:2]
        return f"{kind} {blob}"

    @property
    def host_public_key(self) -> str:
        return self.public_key(self.key_types[0])

    def known_hosts_line(self) -> str:
        return f"[127.0.0.1]:{self.port} {self.host_public_key}\n"

    def start(self, port: int | None = None, max_sessions: int = 32) -> SSHD:
        """Start on `port` (default: the last one, else a free one); waits until it accepts.
        `max_sessions` 0: it authenticates, then refuses every session channel."""
        for _ in range(5):
            self.port = port or self.port or free_port()
            self._probes_at_start = self.log.count("kex_exchange_identification") if (self.root / "sshd.log").exists() else 0
            config = self.root / "sshd_config"
            config.write_text(
                f"Port {self.port}\n"
                "ListenAddress 127.0.0.1\n"
                + "".join(f"HostKey {key}\n" for key in self.host_keys) +
                f"PidFile {self.root / 'sshd.pid'}\n"
                f"AuthorizedKeysFile {self.authorized_keys}\n"
                "UsePAM no\n"
                "StrictModes no\n"
                "PermitRootLogin prohibit-password\n"
                "PubkeyAuthentication yes\n"
                "PasswordAuthentication no\n"
                "KbdInteractiveAuthentication no\n"
                "AllowTcpForwarding yes\n"
                "UseDNS no\n"
                "PrintMotd no\n"
                "PrintLastLog no\n"
                "MaxStartups 100:30:200\n"
                f"MaxSessions {max_sessions}\n"
                "LogLevel VERBOSE\n"
            )
            with open(self.root / "sshd.log", "ab") as log:
                self.proc = subprocess.Popen([SSHD_BIN, "-D", "-e", "-f", str(config)], stdout=log, stderr=log,
                                             stdin=subprocess.DEVNULL)
            _STARTED.append(self)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break  # port taken meanwhile, or a config error: see sshd.log
                try:
                    socket.create_connection(("127.0.0.1", self.port), 0.5).close()
                except OSError:
                    time.sleep(0.02)
                    continue
                self._await_probe_logged()
                return self
            self.stop()
            if port:
                break
            self.port = 0
        raise RuntimeError(f"sshd {self.name} did not start; log:\n{(self.root / 'sshd.log').read_text()[-2000:]}")

    @property
    def log(self) -> str:
        return (self.root / "sshd.log").read_text(errors="replace")

    def ssh_connections(self) -> int:
        """Connections that spoke SSH (readiness probes close before the identification string)."""
        log = self.log
        return log.count("Connection from 127.0.0.1") - log.count("kex_exchange_identification")

    def _await_probe_logged(self) -> None:
        """Until sshd has logged the readiness probe to its end, so counts taken later are stable."""
        deadline = time.monotonic() + 2
        while self.log.count("kex_exchange_identification") <= self._probes_at_start and time.monotonic() < deadline:
            time.sleep(0.01)

    def stop(self) -> None:
        """Kill the listener and every session under it (a host going down hard)."""
        if self.proc is None:
            return
        below = _descendants(self.proc.pid)
        _kill([self.proc.pid])
        _kill(below)
        self.proc.wait()
        self.proc = None

    def kill_sessions(self) -> list[int]:
        """Kill only the running sessions (the network drops; the server stays up)."""
        if self.proc is None:
            return []
        below = _descendants(self.proc.pid)
        _kill(below)
        return below

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


_STARTED: list[SSHD] = []
_CLEANUPS: list[Any] = []


def _stop_everything() -> None:
    for server in _STARTED:
        try:
            server.stop()
        except Exception:  # noqa: BLE001, S110 - best effort at exit
            pass
    _STARTED.clear()
    while _CLEANUPS:
        try:
            _CLEANUPS.pop()()
        except Exception:  # noqa: BLE001, S110 - best effort at exit
            pass


atexit.register(_stop_everything)


def _keygen(path: Path, comment: str, kind: str = "ed25519") -> None:
    size = ["-b", "2048"] if kind == "rsa" else []
    subprocess.run(["ssh-keygen", "-q", "-t", kind, *size, "-N", "", "-C", comment, "-f", str(path)],
                   check=True, stdin=subprocess.DEVNULL)


# ---------------------------------------------------------------------- the fleet


@dataclass
class Fleet:
    """N sshd hosts sharing one client key (session-wide)."""

    root: Path
    client_key: Path
    authorized_keys: Path
    servers: list[SSHD]

    def __getitem__(self, i: int) -> SSHD:
        return self.servers[i]

    def extra_server(self, name: str, key_types: tuple[str, ...] = ("ed25519",)) -> SSHD:
        """Another sshd with its own host keys (for tests that stop or re-key a host)."""
        server = SSHD(name, self.root / "servers" / name, self.authorized_keys, key_types=key_types).start()
        self.servers.append(server)
        return server

    def write_known_hosts(self, path: Path, servers: list[SSHD] | None = None) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(s.known_hosts_line() for s in (servers if servers is not None else self.servers)))
        return path


def _make_fleet(root: Path, n: int) -> Fleet:
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation dir
    client_key = root / "client" / "id_ed25519"
    client_key.parent.mkdir(parents=True)
    _keygen(client_key, "patchkit-tests")
    authorized_keys = root / "authorized_keys"
    shutil.copyfile(str(client_key) + ".pub", authorized_keys)
    authorized_keys.chmod(0o644)  # sshd reads it as the logging-in user
    servers = [SSHD(f"gpu-{i + 1}", root / "servers" / f"gpu-{i + 1}", authorized_keys).start() for i in range(n)]
    return Fleet(root, client_key, authorized_keys, servers)


@pytest.fixture(scope="session")
def sshd_root() -> Iterator[Path]:
    """One world-traversable temp dir for the session (pytest's tmp dirs are 0700)."""
    require(HAVE_SSHD, f"{SSHD_BIN} is missing: `make test` installs openssh-server (scripts/install-system-deps.sh)")
    root = Path(tempfile.mkdtemp(prefix="patchkit-sshd-"))
    root.chmod(0o755)
    yield root
    _stop_everything()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def fleet(sshd_root: Path) -> Fleet:
    """8 running sshd hosts (gpu-1 .. gpu-8) and the client key that logs into all of them."""
    return _make_fleet(sshd_root / "fleet", 8)


# ---------------------------------------------------------------------- host environments


def make_python(root: Path, package_dir: Path, base_python: str | None = None) -> Path:
    """A pip-less venv whose .pth reaches package_dir (cheap: no interpreter start in-process)."""
    target = root / "venv"
    if base_python:
        subprocess.run([base_python, "-m", "venv", "--without-pip", str(target)], check=True)
    else:
        venv.EnvBuilder(with_pip=False, symlinks=True).create(target)
    site = next((target / "lib").glob("python3*/site-packages"))
    (site / "patchkit_fixture.pth").write_text(f"{package_dir}\n")
    return target / "bin" / "python"


@dataclass
class HostEnv:
    """What one inventory host points at: an interpreter, its toyllm copy, a state dir."""

    name: str
    server: SSHD | None
    root: Path
    python: Path
    pkgs: Path
    state: Path

    @property
    def speculative(self) -> Path:
        return self.pkgs / SPECULATIVE

    def runs(self, recipe: str = "ssh_fleet") -> list[dict[str, Any]]:
        folder = self.state / "runs" / recipe
        return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []


def make_hostenv(root: Path, name: str, server: SSHD | None, base_python: str | None = None,
                 owner: str | None = None) -> HostEnv:
    """A fresh host environment under root/name; `owner` chowns the package copy and state dir."""
    home = root / name
    pkgs = home / "pkgs"
    shutil.copytree(TOYLLM, pkgs, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    python = make_python(home, pkgs, base_python)
    state = home / "state"
    if owner:
        state.mkdir()
        pw = pwd.getpwnam(owner)
        for path in [pkgs, state, *pkgs.rglob("*")]:
            os.chown(path, pw.pw_uid, pw.pw_gid)
    return HostEnv(name, server, home, python, pkgs, state)


@dataclass
class Testbed:
    """One test's hosts on the fleet, with the inventory and CLI around them."""

    __test__ = False  # not a test class

    fleet: Fleet
    root: Path
    home: Path  # HOME for patchkit: ~/.ssh/config and ~/.ssh/known_hosts live here
    hosts: dict[str, HostEnv] = field(default_factory=dict)

    @property
    def known_hosts(self) -> Path:
        return self.root / "known_hosts"

    def add(self, name: str, server: SSHD | None, **kwargs: Any) -> HostEnv:
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)
        env = make_hostenv(self.root / "hosts", name, server, **kwargs)
        self.hosts[name] = env
        return env

    def recipe(self, nap: bool = False) -> Path:
        path = self.root / ("ssh_fleet_nap.yaml" if nap else "ssh_fleet.yaml")
        path.write_text(RECIPE.format(nap=NAP_STEP if nap else ""))
        return path

    def inventory(self, groups: dict[str, list[str]] | None = None, known_hosts: Path | None = None,
                  defaults: dict[str, Any] | None = None, **per_host: dict[str, Any]) -> Path:
        """hosts: address 127.0.0.1, port, root, the client key, their python and state dir.

        per_host[name] entries override (or, with value None, drop) fields of that host.
        """
        hosts: dict[str, Any] = {}
        for name, env in self.hosts.items():
            entry: dict[str, Any] = {
                "address": "127.0.0.1",
                "port": env.server.port if env.server else closed_port(),
                "user": "root",
                "identity_file": str(self.fleet.client_key),
                "known_hosts": str(known_hosts or self.known_hosts),
                "python": str(env.python),
                "state_dir": str(env.state),
            }
            for key, value in per_host.get(name.replace("-", "_"), {}).items():
                if value is None:
                    entry.pop(key, None)
                else:
                    entry[key] = value
            hosts[name] = entry
        doc: dict[str, Any] = {"hosts": hosts}
        if groups:
            doc["groups"] = groups
        if defaults:
            doc["defaults"] = defaults
        path = self.root / "inventory.yaml"
        path.write_text(json.dumps(doc, indent=1))  # JSON is YAML
        return path

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("SSH_AUTH_SOCK", "SSH_AGENT_PID")}
        env["HOME"] = str(self.home)
        env.update(extra)
        return env

    def run(self, *args: str, timeout: float = 90, env: dict[str, str] | None = None) -> Result:
        argv = [*patchkit_executable(), *args]
        proc = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=timeout, env=env or self.env())
        return Result(list(args), proc.returncode, proc.stdout, proc.stderr)

    def start(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        return subprocess.Popen([*patchkit_executable(), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env or self.env())


@pytest.fixture
def testbed(fleet: Fleet) -> Testbed:
    """An empty test setup on the fleet: add hosts, write an inventory, run patchkit."""
    root = Path(tempfile.mkdtemp(prefix="t-", dir=fleet.root))
    root.chmod(0o755)
    home = root / "home"
    (home / ".ssh").mkdir(parents=True)
    return Testbed(fleet, root, home)


@pytest.fixture
def testbed8(testbed: Testbed) -> Testbed:
    """All 8 fleet hosts, each with a fresh toyllm copy, venv and state dir; known_hosts written."""
    for server in testbed.fleet.servers[:8]:
        testbed.add(server.name, server)
    testbed.fleet.write_known_hosts(testbed.known_hosts, testbed.fleet.servers[:8])
    return testbed


# ---------------------------------------------------------------------- users and agents


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)


def _login_users(*logins: str) -> None:
    """Create these login users (bash, a home), removed with their homes at the end of the session."""
    if not IS_ROOT:
        # The one skip we keep: a developer may run the suite as a normal user, who cannot
        # create accounts. Our machines and CI run as root, where this never skips.
        pytest.skip("creating login users needs root")
    require(shutil.which("useradd") is not None, "useradd is missing (Debian's passwd package)")
    for login in logins:
        try:
            pwd.getpwnam(login)
        except KeyError:
            _run("useradd", "--create-home", "--shell", "/bin/bash", login)
        # UsePAM no: sshd refuses accounts whose password field starts with "!" (locked).
        _run("usermod", "-p", "*", login)

    def remove() -> None:
        for login in logins:
            subprocess.run(["userdel", "--remove", login], check=False, stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    _CLEANUPS.append(remove)


@pytest.fixture(scope="session")
def login_users(sshd_root: Path) -> dict[str, str]:
    """Two non-root login users: `sudoer` (passwordless sudo) and `plain` (no sudo right).

    Created with useradd, removed (with their homes and the sudoers file) at the end.
    """
    users = {"sudoer": "pk-test-sudoer", "plain": "pk-test-plain"}
    _login_users(*users.values())
    sudoers = Path("/etc/sudoers.d/patchkit-tests")
    if Path("/etc/sudoers.d").is_dir():
        sudoers.write_text(f"{users['sudoer']} ALL=(root) NOPASSWD: ALL\n")
        sudoers.chmod(0o440)
    _CLEANUPS.append(lambda: sudoers.unlink(missing_ok=True))
    return users


# What a chatty GPU box's ~/.bashrc does: Debian's bash reads it for `ssh host cmd` too, so
# it runs before the agent (stdout and stderr) and, through the EXIT trap, after it. The second
# line looks like the agent's first reply; the third has no final newline, so the agent's
# start mark lands on its line.
BANNER_BASHRC = r"""# patchkit tests: a login shell that prints
echo "Welcome to $(hostname): GPU box of the patchkit tests"
echo '{"id": 1, "ok": true}'
printf 'a banner without a final newline: '
echo "banner on stderr" >&2
trap 'echo "bye from the EXIT trap"; echo "{\"id\": 1, \"ok\": true, \"result\": {}}"; echo "bye on stderr" >&2' EXIT
"""
BANNER_LINES = ["Welcome to ", '{"id": 1, "ok": true}', "a banner without a final newline: "]


@pytest.fixture(scope="session")
def banner_user(sshd_root: Path) -> str:
    """A login user whose ~/.bashrc prints BANNER_BASHRC's banners (removed at the end)."""
    login = "pk-test-banner"
    _login_users(login)
    home = Path(pwd.getpwnam(login).pw_dir)
    (home / ".bashrc").write_text(BANNER_BASHRC)
    return login


@pytest.fixture
def ssh_agent(testbed: Testbed) -> Iterator[str]:
    """A private ssh-agent holding the fleet's client key; yields its socket path."""
    sock = testbed.root / "agent.sock"
    proc = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 5
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        subprocess.run(["ssh-add", "-q", str(testbed.fleet.client_key)], check=True,
                       env={**os.environ, "SSH_AUTH_SOCK": str(sock)}, capture_output=True)
        yield str(sock)
    finally:
        proc.kill()
        proc.wait()
