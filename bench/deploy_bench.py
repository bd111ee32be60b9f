#!/usr/bin/env python3
"""Deploy a ~2 GB artifact over loopback SSH: `patchkit apply` (deploy step) vs `scp -r` vs `rsync -a`.

    .venv/bin/python bench/deploy_bench.py                 # 3 runs each, aes128-gcm, report on stdout
    .venv/bin/python bench/deploy_bench.py --runs 5 --cipher chacha20-poly1305@openssh.com
    .venv/bin/python bench/deploy_bench.py --profile       # + one py-spy'd patchkit deploy (control + agent)

One real OpenSSH server on 127.0.0.1 (bench/fleet.py's Host: own ed25519 host key, an
authorized client key, root login, known_hosts written, so nothing is trusted blindly).
The artifact is 3 random shards + a small config.json (random bytes: incompressible),
written once and cached under ${PATCHKIT_CACHE_DIR:-~/.cache/patchkit}/bench/artifact.

Contenders, each copying the artifact folder to its own destination on the "host":
  patchkit  `patchkit apply deploy.yaml --json -i inventory.yaml` (one deploy step, no validator)
  scp       `scp -r -F ssh_config SRC host:DEST`   (OpenSSH >= 9 speaks SFTP underneath)
  rsync     `rsync -a -e 'ssh -F ssh_config' SRC/ host:DEST/`
The same cipher everywhere (--cipher; default aes128-gcm@openssh.com), compression off
everywhere: OpenSSH via its -F config (Ciphers, Compression no), patchkit's asyncssh via
~/.ssh/config (it reads it; HOME points at a bench home). The negotiated cipher of each
side is checked and printed (asyncssh: through patchkit's own SSHTransport; OpenSSH: ssh -v).

Fresh runs: destination (and, for patchkit, the host's journal) wiped, then `sync`, then
timed from spawn to exit; the order of the contenders rotates per round. The control
side's source hash cache is warm for the timed patchkit runs (one extra cold run is
reported separately: it includes hashing the source once). No-op runs: the same command
again with everything in place (patchkit: all hashes from the host's journal cache).

CPU per run: the client command (its rusage, with reaped children: scp/rsync's ssh), the
host side (the sshd listener's reaped children: sshd sessions + agent / sftp-server /
rsync), split per process name by sampling /proc every 50 ms.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

from fixtures.project_cli import patchkit_argv  # noqa: E402
from fleet import Host, keygen
from measure import machine_busy, wait_for_quiet

MIB = 1 << 20
TICK = os.sysconf("SC_CLK_TCK")
DEFAULT_CIPHER = "aes128-gcm@openssh.com"


def log(message: str) -> None:
    print(f"[deploy-bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def cache_dir() -> Path:
    configured = os.environ.get("PATCHKIT_CACHE_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "patchkit"


# ---------------------------------------------------------------------- waiting for a quiet machine


def running_fleet_benches() -> list[str]:
    """pids of bench/run_bench.py at work; not those queued behind `flock LOCK ...` (they wait for us)."""
    pids = subprocess.run(["pgrep", "-f", "bench/run_bench.py"], capture_output=True, text=True,
                          check=False).stdout.split()
    running = []
    for pid in pids:
        try:
            argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        if os.path.basename(argv0) != b"flock":
            running.append(pid)
    return running


def wait_idle(max_wait: float, load_below: float = 1.5, poll: float = 20.0) -> tuple[float, bool]:
    """Until no bench/run_bench.py runs and the 1-minute load is below `load_below` (or max_wait)."""
    t0 = time.monotonic()
    while True:
        other = running_fleet_benches()
        load = os.getloadavg()[0]
        if not other and load < load_below:
            return time.monotonic() - t0, True
        if time.monotonic() - t0 > max_wait:
            log(f"still busy after {max_wait:.0f}s (run_bench pids {other}, load {load:.2f}): measuring anyway")
            return time.monotonic() - t0, False
        log(f"waiting: run_bench pids {other or '-'}, load1 {load:.2f}")
        time.sleep(poll)


# ---------------------------------------------------------------------- the artifact


def artifact(shards: int, shard_mib: int) -> tuple[Path, dict[str, str], int]:
    """The cached artifact folder, its files' sha256 and its total size (made once)."""
    root = cache_dir() / "bench"
    folder = root / "artifact"
    stamp = root / "artifact.json"
    names = [f"model-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)]
    layout = {"shards": names, "shard_bytes": shard_mib * MIB}
    try:
        meta = json.loads(stamp.read_text())
        if meta["layout"] == layout and all((folder / n).stat().st_size == meta["sizes"][n] for n in meta["sha256"]) \
                and sorted(p.name for p in folder.iterdir()) == sorted(meta["sha256"]):
            return folder, meta["sha256"], sum(meta["sizes"].values())
    except (OSError, ValueError, KeyError):
        pass
    log(f"writing the artifact: {shards} x {shard_mib} MiB of random bytes + config.json into {folder}")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    rng = random.Random(20240601)
    hashes, sizes = {}, {}
    for name in names:
        h = hashlib.sha256()
        with open(folder / name, "wb") as f:
            for _ in range(shard_mib):
                chunk = rng.randbytes(MIB)
                f.write(chunk)
                h.update(chunk)
        hashes[name], sizes[name] = h.hexdigest(), shard_mib * MIB
    config = json.dumps({"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 7168, "bench": True},
                        indent=1).encode() + b"\n"
    (folder / "config.json").write_bytes(config)
    hashes["config.json"], sizes["config.json"] = hashlib.sha256(config).hexdigest(), len(config)
    stamp.write_text(json.dumps({"layout": layout, "sha256": hashes, "sizes": sizes}, indent=1))
    return folder, hashes, sum(sizes.values())


def incompressible(folder: Path) -> float:
    """Worst zlib ratio over a 4 MiB sample of each shard (1.0 = no gain for compression)."""
    worst = 1.0
    for path in folder.iterdir():
        if path.stat().st_size < 4 * MIB:
            continue
        with open(path, "rb") as f:
            f.seek(path.stat().st_size // 2)
            sample = f.read(4 * MIB)
        if sample.count(0) == len(sample):
            raise RuntimeError(f"{path} is zeros")
        worst = min(worst, len(zlib.compress(sample, 6)) / len(sample))
    return worst


# ---------------------------------------------------------------------- CPU accounting


def _stat(pid: int | str) -> tuple[str, int, float, float] | None:
    """comm, ppid, own cpu s, reaped children's cpu s."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return None
    comm = data[data.index("(") + 1:data.rindex(")")]
    fields = data[data.rindex(")") + 2:].split()
    return comm, int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK, (int(fields[13]) + int(fields[14])) / TICK


class HostSampler:
    """Samples the CPU of every process under the sshd listener (by name) while a run goes on."""

    def __init__(self, listener: int, interval: float = 0.05) -> None:
        self.listener, self.interval = listener, interval
        self.last: dict[int, tuple[str, float]] = {}
        self.pids_by_comm: dict[str, set[int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def descendants(self) -> dict[int, tuple[str, float]]:
        info = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                st = _stat(entry)
                if st:
                    info[int(entry)] = st
        out, frontier = {}, {self.listener}
        while frontier:
            nxt = {pid for pid, st in info.items() if st[1] in frontier and pid not in out}
            for pid in nxt:
                out[pid] = (info[pid][0], info[pid][2])
            frontier = nxt
        return out

    def _loop(self) -> None:
        while not self._stop.is_set():
            for pid, (comm, cpu) in self.descendants().items():
                self.last[pid] = (comm, cpu)
                self.pids_by_comm.setdefault(comm, set()).add(pid)
            self._stop.wait(self.interval)

    def start(self) -> HostSampler:
        self._thread.start()
        return self

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        out: dict[str, float] = {}
        for comm, cpu in self.last.values():
            key = "agent(python)" if comm.startswith("python") else comm
            out[key] = round(out.get(key, 0.0) + cpu, 2)
        return out


def enable_sftp(host: Host) -> None:
    """fleet.py's sshd_config has no SFTP subsystem, which scp (SFTP protocol since OpenSSH 9.0)
    needs: add it and have the listener re-read its config (SIGHUP re-execs it, same pid)."""
    config = host.root / "sshd_config"
    sftp = next((p for p in ("/usr/lib/openssh/sftp-server", "/usr/libexec/openssh/sftp-server",
                             "/usr/libexec/sftp-server") if os.path.exists(p)), None)
    if sftp is None:
        raise RuntimeError("no sftp-server found (apt-get install -y openssh-sftp-server)")
    config.write_text(config.read_text() + f"Subsystem sftp {sftp}\n")
    size = host.log_size()
    os.kill(host.proc.pid, signal.SIGHUP)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # "Server listening on ..." again once it re-executed
        with open(host.log, "rb") as f:
            f.seek(size)
            if b"Server listening" in f.read():
                return
        time.sleep(0.02)
    raise RuntimeError(f"sshd did not come back after SIGHUP; log:\n{host.log.read_text()[-2000:]}")


def listener_reaped(listener: int) -> float:
    st = _stat(listener)
    return st[3] if st else 0.0


# ---------------------------------------------------------------------- runs


@dataclass
class Run:
    tool: str
    mode: str  # fresh | noop | fresh-cold
    seconds: float
    mb_s: float | None
    client_cpu: float
    host_cpu: float
    host_split: dict[str, float]
    machine_cpu: float
    sync_after_s: float | None = None
    other_cpu: float = 0.0  # machine-wide busy CPU that is neither the client nor the host side
    quiet_wait_s: float = 0.0
    note: str = ""


def stop_and_clean(host: Host, bench: "Bench", tools: list[str]) -> None:
    """After a bench: the host's sshd stopped, every tool's 2 GB destination removed."""
    host.stop()
    for tool in tools:
        shutil.rmtree(bench.dest(tool), ignore_errors=True)


@dataclass
class Bench:
    work: Path
    src: Path
    hashes: dict[str, str]
    total: int
    host: Host
    cipher: str
    patchkit: list[str]
    runs: list[Run] = field(default_factory=list)
    discarded: list[Run] = field(default_factory=list)
    quiet_max_s: float = 60.0  # before each run: wait up to this long for < 0.3 busy cores
    noisy_limit: float = 0.6  # other CPU per second of run above this: the run is redone (once)
    retries: int = 1
    settle_s: float = 3.0  # after the wipe: a scratch file of the artifact's size written, deleted, then this wait
    patchkit_cipher_configured: bool = True  # False: no Ciphers in patchkit's ~/.ssh/config (its own default)

    # paths ---------------------------------------------------------------
    @property
    def home(self) -> Path:
        return self.work / "home"

    @property
    def client_key(self) -> Path:
        return self.work / "client" / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.work / "known_hosts"

    @property
    def ssh_config(self) -> Path:
        return self.work / "ssh_config"

    @property
    def control_cache(self) -> Path:
        return self.work / "control-cache"

    @property
    def state(self) -> Path:
        return self.host.root / "state"

    def dest(self, tool: str) -> Path:
        return self.host.root / "dest" / tool / "artifact"

    # set-up --------------------------------------------------------------
    def write_configs(self) -> None:
        self.known_hosts.write_text(f"[127.0.0.1]:{self.host.port} {self.host.host_public_key()}\n")
        # OpenSSH (scp, rsync's ssh): everything from this file, nothing from ~/.ssh
        self.ssh_config.write_text(
            "Host bench\n"
            "  HostName 127.0.0.1\n"
            f"  Port {self.host.port}\n"
            "  User root\n"
            f"  IdentityFile {self.client_key}\n"
            "  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {self.known_hosts}\n"
            "  StrictHostKeyChecking yes\n"
            "  BatchMode yes\n"
            f"  Ciphers {self.cipher}\n"
            "  Compression no\n"
            "  ControlMaster no\n"
            "  ControlPath none\n")
        # patchkit: asyncssh reads ~/.ssh/config (HOME is this bench home for patchkit's runs)
        (self.home / ".ssh").mkdir(parents=True, exist_ok=True)
        ciphers = f"  Ciphers {self.cipher}\n" if self.patchkit_cipher_configured else ""
        (self.home / ".ssh" / "config").write_text(f"Host 127.0.0.1\n{ciphers}  Compression no\n")
        host = {"address": "127.0.0.1", "port": self.host.port, "user": "root",
                "identity_file": str(self.client_key), "known_hosts": str(self.known_hosts),
                "python": "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable,
                "state_dir": str(self.state)}
        (self.work / "inventory.yaml").write_text(json.dumps({"hosts": {"bench": host}}, indent=1))
        recipe = {"name": "deploy_bench", "steps": [{"name": "artifact",
                                                     "deploy": {"src": str(self.src), "dest": str(self.dest("patchkit"))}}]}
        (self.work / "deploy.yaml").write_text(json.dumps(recipe, indent=1))

    def env(self, patchkit: bool) -> dict[str, str]:
        drop = ("SSH_AUTH_SOCK", "SSH_AGENT_PID", "PYTHONDONTWRITEBYTECODE")
        env = {k: v for k, v in os.environ.items() if k not in drop}
        if patchkit:
            env["HOME"] = str(self.home)
            env["PATCHKIT_CACHE_DIR"] = str(self.control_cache)
        return env

    def argv(self, tool: str) -> list[str]:
        if tool == "patchkit":
            return [*self.patchkit, "apply", str(self.work / "deploy.yaml"), "--json",
                    "-i", str(self.work / "inventory.yaml")]
        dest = self.dest(tool)
        if tool == "scp":
            return ["scp", "-q", "-r", "-p", "-F", str(self.ssh_config), str(self.src), f"bench:{dest}"]
        if tool == "rsync":
            return ["rsync", "-a", "-e", f"ssh -F {shlex.quote(str(self.ssh_config))}",
                    f"{self.src}/", f"bench:{dest}/"]
        raise ValueError(tool)

    def negotiated_ciphers(self) -> dict[str, str]:
        out = {}
        probe = subprocess.run(["ssh", "-v", "-F", str(self.ssh_config), "bench", "true"], capture_output=True,
                               text=True, timeout=30, check=False)
        found = re.search(r"kex: client->server cipher: (\S+) MAC: (\S+) compression: (\S+)", probe.stderr)
        out["openssh"] = " ".join(found.groups()) if found else f"? (ssh -v exit {probe.returncode})"
        # patchkit's own transport, with the same HOME (so the same ~/.ssh/config) as its runs
        code = (
            "import asyncio,json,sys\n"
            "from patchkit.fleet.inventory import Inventory\n"
            "import patchkit.host.transport.schemes\n"
            "from patchkit.host.transport.ssh import SSHTransport\n"
            "from patchkit.host.transport.ssh_common import SSHTarget\n"
            "from patchkit.base.yamlsource import load_yaml\n"
            "async def main():\n"
            "    spec = Inventory.model_validate(json.load(open(sys.argv[1]))).resolved()['bench']\n"
            "    t = SSHTransport(SSHTarget.from_host(spec))\n"
            "    conn = await t._connection()\n"
            "    print(conn.get_extra_info('send_cipher'), conn.get_extra_info('send_mac'),\n"
            "          conn.get_extra_info('send_compression'))\n"
            "    streams = await t.spawn(['cat'])\n"
            "    chan = getattr(streams.proc, '_chan', None)  # asyncssh internals, for the report only\n"
            "    print('max packet', getattr(chan, '_send_pktsize', '?'), 'window', getattr(chan, '_send_window', '?'))\n"
            "    await streams.close()\n"
            "    await t.close()\n"
            "asyncio.run(main())\n")
        python = Path(self.patchkit[0]).parent / "python"
        python = python if python.exists() else Path(sys.executable)
        probe = subprocess.run([str(python), "-c", code, str(self.work / "inventory.yaml")], capture_output=True,
                               text=True, timeout=60, env=self.env(True), check=False)
        lines = probe.stdout.strip().splitlines()
        out["asyncssh"] = lines[0] if lines else f"? {probe.stderr.strip()[-300:]}"
        out["asyncssh_channel"] = lines[1] if len(lines) > 1 else "?"
        return out

    # one run -------------------------------------------------------------
    def wipe(self, tool: str) -> None:
        shutil.rmtree(self.dest(tool), ignore_errors=True)
        self.dest(tool).parent.mkdir(parents=True, exist_ok=True)
        if tool == "patchkit":
            shutil.rmtree(self.state, ignore_errors=True)
        os.sync()
        self.settle_memory()

    def settle_memory(self) -> None:
        """Every contender's fresh run starts with the host's memory in one state.

        This machine is a VM with free page reporting: memory freed in the guest goes back to the
        hypervisor about 2 s later, and the first write to such a page faults it back in, which
        the writer pays inside its copy into the page cache (bench/DEPLOY.md). How many of a
        run's pages are new then depends on what the run before it freed, and when. So: allocate
        and free an artifact-sized file's pages here, and wait until they have been reported
        back, whatever ran before. Off with settle_s = 0."""
        if self.settle_s <= 0:
            return
        scratch = self.host.root / "settle-scratch.bin"
        block = b"\0" * (8 << 20)
        with open(scratch, "wb") as f:
            for _ in range(0, self.total, len(block)):
                f.write(block)
            f.flush()
            os.fsync(f.fileno())
        scratch.unlink()
        time.sleep(self.settle_s)

    def run(self, tool: str, mode: str, argv: list[str] | None = None, env: dict[str, str] | None = None) -> tuple[Run, str]:
        argv = argv or self.argv(tool)
        out_path, err_path = self.work / "last.out", self.work / "last.err"
        quiet_wait = wait_for_quiet(self.quiet_max_s, threshold=0.3, window=0.5)
        sampler = HostSampler(self.host.proc.pid).start()
        reaped0, busy0 = listener_reaped(self.host.proc.pid), machine_busy()
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            t0 = time.perf_counter()
            proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                    env=env or self.env(tool == "patchkit"))
            _, status, usage = os.wait4(proc.pid, 0)
            seconds = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        deadline = time.monotonic() + 5  # the host side's session processes end after the client
        while sampler.descendants() and time.monotonic() < deadline:
            time.sleep(0.02)
        split = sampler.stop()
        host_cpu = listener_reaped(self.host.proc.pid) - reaped0
        machine = machine_busy() - busy0
        stdout = out_path.read_text(errors="replace")
        if proc.returncode != 0:
            raise RuntimeError(f"{tool} {mode} failed (exit {proc.returncode}): {' '.join(argv)}\n"
                               f"{stdout[-3000:]}\n{err_path.read_text(errors='replace')[-3000:]}")
        sync_s = None
        if tool != "patchkit" and mode == "fresh":
            t1 = time.perf_counter()
            os.sync()  # patchkit fsyncs every file before its rename; scp/rsync leave that to the kernel
            sync_s = time.perf_counter() - t1
        moved = self.total if mode.startswith("fresh") else None
        run = Run(tool, mode, round(seconds, 3), round(moved / seconds / 1e6, 1) if moved else None,
                  round(usage.ru_utime + usage.ru_stime, 2), round(host_cpu, 2), split, round(machine, 2),
                  round(sync_s, 3) if sync_s is not None else None,
                  round(machine - usage.ru_utime - usage.ru_stime - host_cpu, 2), round(quiet_wait, 1))
        self.runs.append(run)
        log(f"{tool:8s} {mode:10s} {seconds:7.2f}s" + (f"  {run.mb_s:7.1f} MB/s" if run.mb_s else "")
            + f"  cpu client {run.client_cpu:.2f}s host {run.host_cpu:.2f}s {split}"
            + (f"  (+sync {sync_s:.2f}s)" if sync_s is not None else "") + f"  other {run.other_cpu:.2f}s")
        return run, stdout

    def timed(self, tool: str, mode: str) -> tuple[Run, str]:
        """A fresh run (destination wiped first) or a no-op run; redone once if the machine was busy."""
        for attempt in range(self.retries + 1):
            if mode == "fresh":
                self.wipe(tool)
            run, out = self.run(tool, mode)
            if run.other_cpu / run.seconds <= self.noisy_limit or attempt == self.retries:
                if attempt:
                    run.note = "redone: the first attempt was noisy"
                return run, out
            self.runs.remove(run)
            run.note = "discarded: other work on the machine"
            self.discarded.append(run)
            log(f"{tool} {mode}: {run.other_cpu:.1f} CPU-s of other work during the run: discarded, redoing")
        raise AssertionError("unreachable")

    def check_patchkit(self, stdout: str, mode: str) -> None:
        doc, _ = json.JSONDecoder().raw_decode(stdout[stdout.index("{"):])  # py-spy's lines around it
        step = doc["hosts"]["bench"]["steps"][0]
        want = ("changed", self.total) if mode.startswith("fresh") else ("ok", None)
        sent = (step.get("details") or {}).get("bytes_sent")
        if step["status"] != want[0] or (want[1] is not None and sent != want[1]):
            raise RuntimeError(f"patchkit {mode}: unexpected step result {json.dumps(step)[:2000]}")

    def verify(self, tool: str, full: bool) -> None:
        dest = self.dest(tool)
        got = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())
        if got != sorted(self.hashes):
            raise RuntimeError(f"{tool}: {dest} holds {got}, expected {sorted(self.hashes)}")
        for rel, digest in self.hashes.items():
            path = dest / rel
            if path.stat().st_size != (self.src / rel).stat().st_size:
                raise RuntimeError(f"{tool}: {path} has the wrong size")
            if full:
                h = hashlib.sha256()
                with open(path, "rb") as f:
                    for chunk in iter(lambda: f.read(4 * MIB), b""):
                        h.update(chunk)
                if h.hexdigest() != digest:
                    raise RuntimeError(f"{tool}: {path} has the wrong content")


# ---------------------------------------------------------------------- profiling (optional)


def ensure_pyspy() -> Path:
    env = cache_dir() / "bench" / "pyspy-venv"
    exe = env / "bin" / "py-spy"
    if not exe.exists():
        log(f"installing py-spy into {env}")
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(env)], check=True)
        subprocess.run([str(env / "bin" / "python"), "-m", "pip", "install", "-q", "py-spy"], check=True)
    return exe


def summarize_raw(path: Path, top: int = 14) -> dict[str, list[tuple[str, float]]]:
    """py-spy --format raw (collapsed stacks): share of samples per leaf function and inclusive."""
    leaf: dict[str, int] = {}
    incl: dict[str, int] = {}
    total = 0
    if not path.exists():
        return {"self": [], "inclusive": []}
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [re.sub(r" \((?:.*/)?([^/:]+)(?::\d+)?\)$", r" (\1)", f) for f in stack.split(";")]
        leaf[frames[-1]] = leaf.get(frames[-1], 0) + n
        for f in set(frames):
            incl[f] = incl.get(f, 0) + n
    share = lambda d: [(k, round(100 * v / total, 1)) for k, v in sorted(d.items(), key=lambda kv: -kv[1])[:top]]
    return {"samples": total, "self": share(leaf), "inclusive": share(incl)}  # type: ignore[dict-item]


def profile_run(bench: Bench) -> dict:
    pyspy = ensure_pyspy()
    bench.wipe("patchkit")
    control_raw, agent_raw = bench.work / "pyspy-control.txt", bench.work / "pyspy-agent.txt"
    for p in (control_raw, agent_raw):
        p.unlink(missing_ok=True)
    agent_proc: list[subprocess.Popen] = []
    stop = threading.Event()

    def attach_agent() -> None:
        sampler = HostSampler(bench.host.proc.pid)
        while not stop.is_set():
            for pid, (comm, _) in sampler.descendants().items():
                if comm.startswith("python"):
                    agent_proc.append(subprocess.Popen(
                        [str(pyspy), "record", "-p", str(pid), "-r", "250", "-f", "raw", "-o", str(agent_raw)],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                    return
            time.sleep(0.01)

    attacher = threading.Thread(target=attach_agent, daemon=True)
    attacher.start()
    argv = [str(pyspy), "record", "-r", "250", "-f", "raw", "-o", str(control_raw), "--", *bench.argv("patchkit")]
    run, stdout = bench.run("patchkit", "fresh-pyspy", argv=argv)
    stop.set()
    attacher.join()
    for p in agent_proc:
        p.wait(30)
    bench.runs.remove(run)
    bench.check_patchkit(stdout, "fresh")
    return {"seconds": run.seconds, "client_cpu": run.client_cpu, "host_split": run.host_split,
            "control": summarize_raw(control_raw), "agent": summarize_raw(agent_raw)}


# ---------------------------------------------------------------------- where the time goes (optional)

RAW_STREAM = """\
import asyncio, json, sys, time
from pathlib import Path
from patchkit.fleet.inventory import Inventory
import patchkit.host.transport.schemes  # the schemes the inventory reads hosts with
from patchkit.host.transport.ssh import SSHTransport
from patchkit.host.transport.ssh_common import SSHTarget
CHUNK = 1 << 20  # as patchkit.host.agent.client.STREAM_CHUNK
async def main(inventory, command, files):
    t = SSHTransport(SSHTarget.from_host(Inventory.model_validate(json.load(open(inventory))).resolved()["bench"]))
    streams = await t.spawn(["sh", "-c", command])
    t0 = time.perf_counter()
    for name in files:  # the loop of AgentClient._stream: read 1 MiB, write, drain
        with open(name, "rb") as f:
            while chunk := f.read(CHUNK):
                streams.stdin.write(chunk)
                await streams.stdin.drain()
    streams.proc.stdin.write_eof()
    await streams.proc.wait_closed()
    print(time.perf_counter() - t0)
    await t.close()
asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
"""

# what the agent does with the bytes, minus hashing and fsync (1 MiB reads from stdin, writes)
AGENT_LIKE = ("python3 -c 'import sys\nr=sys.stdin.buffer\nf=open(sys.argv[1],\"wb\")\n"
              "while 1:\n c=r.read(1<<20)\n if not c: break\n f.write(c)' {dest}")


def breakdown(bench: Bench) -> dict[str, float]:
    """Each piece of a patchkit deploy alone, once each: transport ceilings and host-side work."""
    out: dict[str, float] = {}
    shards = sorted(str(p) for p in bench.src.iterdir())
    python = Path(bench.patchkit[0]).parent / "python"
    python = python if python.exists() else Path(sys.executable)
    sink = bench.host.root / "dest" / "raw.bin"
    sink.parent.mkdir(parents=True, exist_ok=True)
    for label, command in (("asyncssh_to_devnull", "cat > /dev/null"),
                           ("asyncssh_to_python_file", AGENT_LIKE.format(dest=shlex.quote(str(sink))))):
        sink.unlink(missing_ok=True)
        os.sync()
        t0 = time.perf_counter()
        proc = subprocess.run([str(python), "-c", RAW_STREAM, str(bench.work / "inventory.yaml"), command, *shards],
                              capture_output=True, text=True, env=bench.env(True), timeout=600, check=False)
        if proc.returncode:
            raise RuntimeError(f"raw asyncssh stream failed: {proc.stderr[-2000:]}")
        out[label + "_s"] = round(time.perf_counter() - t0, 2)
        out[label + "_stream_only_s"] = round(float(proc.stdout.split()[-1]), 2)
        log(f"breakdown: {label} {out[label + '_s']:.2f}s ({out[label + '_stream_only_s']:.2f}s after connect)")
    sink.unlink(missing_ok=True)
    for label, command in (("openssh_to_devnull", "cat > /dev/null"),):
        t0 = time.perf_counter()
        cat = subprocess.Popen(["cat", *shards], stdout=subprocess.PIPE)
        subprocess.run(["ssh", "-F", str(bench.ssh_config), "bench", command], stdin=cat.stdout, check=True)
        cat.wait()
        out[label + "_s"] = round(time.perf_counter() - t0, 2)
        log(f"breakdown: {label} {out[label + '_s']:.2f}s")
    # host-side work after the bytes arrived, per the agent's op_receive_file: fsync, then re-read + sha256
    big = max(bench.src.iterdir(), key=lambda p: p.stat().st_size)
    target = bench.host.root / "dest" / "fsync-probe.bin"
    os.sync()
    shutil.copyfile(big, target)
    t0 = time.perf_counter()
    fd = os.open(target, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    out["fsync_one_shard_s"] = round(time.perf_counter() - t0, 2)
    h = hashlib.sha256()
    t0 = time.perf_counter()
    with open(target, "rb") as f:
        for chunk in iter(lambda: f.read(MIB), b""):
            h.update(chunk)
    out["sha256_one_shard_s"] = round(time.perf_counter() - t0, 2)
    target.unlink()
    out["files"] = len(shards)
    out["shard_mb"] = round(big.stat().st_size / 1e6, 1)
    log(f"breakdown: per {out['shard_mb']} MB shard: fsync {out['fsync_one_shard_s']}s, "
        f"re-read + sha256 {out['sha256_one_shard_s']}s")
    return out


# the patchkit CLI in-process, with timestamps around AgentClient._stream (bytes going out),
# AgentClient._send (a request going out) and AgentClient._reply (its answer read); nothing in
# patchkit is changed
TIMELINE = """\
import json, sys, time
from patchkit.host.agent import client as c
T0 = time.perf_counter()
EVENTS = []
SENT = {}
_stream, _send, _reply = c.AgentClient._stream, c.AgentClient._send, c.AgentClient._reply
async def stream(self, local, offset, length):
    t = time.perf_counter()
    try:
        return await _stream(self, local, offset, length)
    finally:
        EVENTS.append(["stream", local.name, length, t - T0, time.perf_counter() - T0])
async def send(self, op, args, payload, *rest):
    t = time.perf_counter()
    pending = await _send(self, op, args, payload, *rest)
    SENT[pending.request_id] = (op, payload[2] if payload else 0, t - T0)
    return pending
async def reply(self, request_id, op, timeout):
    try:
        return await _reply(self, request_id, op, timeout)
    finally:
        op, length, t = SENT.get(request_id, (op, 0, None))  # None: sent inside another _send (agent files)
        EVENTS.append(["op", op, length, t, time.perf_counter() - T0])
c.AgentClient._stream, c.AgentClient._send, c.AgentClient._reply = stream, send, reply
from patchkit.cli.main import main
try:
    code = main(sys.argv[1:])
finally:
    sys.stderr.write("TIMELINE " + json.dumps({"events": EVENTS, "end": time.perf_counter() - T0}) + "\\n")
sys.exit(code)
"""


def timeline(bench: Bench) -> dict:
    """One more fresh patchkit deploy, timed per request: streaming vs waiting for the host.

    Files are streamed back to back and their answers read after the last one, so the wait
    for the host is the time from the end of the last stream to the last file's answer."""
    python = Path(bench.patchkit[0]).parent / "python"
    python = python if python.exists() else Path(sys.executable)
    bench.wipe("patchkit")
    argv = [str(python), "-c", TIMELINE, *bench.argv("patchkit")[len(bench.patchkit):]]
    run, stdout = bench.run("patchkit", "fresh-timeline", argv=argv)
    bench.runs.remove(run)
    bench.check_patchkit(stdout, "fresh")
    err = (bench.work / "last.err").read_text()
    data = json.loads(err[err.rindex("TIMELINE ") + len("TIMELINE "):].splitlines()[0])
    streams = [e for e in data["events"] if e[0] == "stream"]
    answers = [e for e in data["events"] if e[0] == "op" and e[1] == "receive_file"]
    # other requests, pipelined: when each went out and when its answer was read (None: sent along
    # with another request)
    ops = [(e[1], None if e[3] is None else round(e[3], 3), round(e[4], 3))
           for e in data["events"] if e[0] == "op" and e[1] != "receive_file"]
    files = [{"file": name, "mb": round(length / 1e6, 1), "stream_s": round(end - start, 2),
              "mb_s_while_streaming": round(length / 1e6 / max(end - start, 1e-9), 0)}
             for _, name, length, start, end in streams]
    stream_s = sum(e[4] - e[3] for e in streams)
    last_stream = max((e[4] for e in streams), default=0.0)
    last_answer = max((e[4] for e in answers), default=last_stream)
    first = min((e[3] for e in data["events"] if e[3] is not None), default=0.0)
    out = {"wall_s": run.seconds, "in_process_end_s": round(data["end"], 2),
           "before_first_request_s": round(first, 2), "streaming_s": round(stream_s, 2),
           "first_to_last_byte_s": round(last_stream - min((e[3] for e in streams), default=0.0), 2),
           "waiting_for_host_after_data_s": round(last_answer - last_stream, 2), "files": files,
           "ops_sent_answered_s": ops}
    log(f"timeline: {json.dumps(out)}")
    return out


# ---------------------------------------------------------------------- report


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def report(bench: Bench, meta: dict) -> str:
    def rows(tool: str, mode: str) -> list[Run]:
        return [r for r in bench.runs if r.tool == tool and r.mode == mode]

    scp_mb = median([r.mb_s for r in rows("scp", "fresh")])
    lines = [
        (f"artifact: {len(bench.hashes)} files, {bench.total / 1e9:.3f} GB ({bench.total / MIB:.0f} MiB), random "
         f"bytes (zlib ratio {meta['zlib_ratio']:.3f}); cipher: asyncssh `{meta['ciphers']['asyncssh']}` "
         f"({meta.get('patchkit_cipher', 'configured')}), "
         f"OpenSSH `{meta['ciphers']['openssh']}`; asyncssh channel to sshd: {meta['ciphers'].get('asyncssh_channel')}; "
         f"{meta['runs']} runs each, medians; MB = 10^6 bytes"),
        "",
        "| tool | fresh deploy s (median) | runs s | MB/s | vs scp | client CPU s | host CPU s (split) | no-op s (median) |",
        "|---|---:|---|---:|---:|---:|---|---:|",
    ]
    for tool in ("patchkit", "scp", "rsync"):
        fresh, noop = rows(tool, "fresh"), rows(tool, "noop")
        if not fresh:
            continue
        mb = median([r.mb_s for r in fresh])
        split = {}
        for r in fresh:
            for k, v in r.host_split.items():
                split.setdefault(k, []).append(v)
        split_s = ", ".join(f"{k} {median(v):.1f}" for k, v in sorted(split.items(), key=lambda kv: -median(kv[1])))
        noop_s = f"{median([r.seconds for r in noop]):.2f}" if noop else "n/a (copies again)"
        lines.append(
            f"| {tool} | {median([r.seconds for r in fresh]):.2f} | {' / '.join(f'{r.seconds:.2f}' for r in fresh)} "
            f"| {mb:.0f} | {100 * mb / scp_mb:.0f}% | {median([r.client_cpu for r in fresh]):.1f} "
            f"| {median([r.host_cpu for r in fresh]):.1f} ({split_s}) | {noop_s} |")
    cold = rows("patchkit", "fresh-cold")
    if cold:
        lines.append("")
        lines.append(f"patchkit first deploy with a cold control-side hash cache (it hashes the source once too): "
                     f"{cold[0].seconds:.2f} s ({cold[0].mb_s:.0f} MB/s)")
    syncs = {t: median([r.sync_after_s for r in rows(t, "fresh") if r.sync_after_s is not None]) for t in ("scp", "rsync")}
    lines.append("`sync` right after scp / rsync (their data not yet on disk; patchkit fsyncs each file before "
                 "its rename, inside its time): "
                 + ", ".join(f"{t} +{v:.2f} s" for t, v in syncs.items() if not math.isnan(v)))
    noops = {t: [r.seconds for r in rows(t, "noop")] for t in ("patchkit", "rsync")}
    lines.append("no-op runs: " + "; ".join(f"{t} " + " / ".join(f"{s:.2f}" for s in v) for t, v in noops.items()))
    other = {t: median([r.other_cpu / r.seconds for r in rows(t, "fresh")]) for t in ("patchkit", "scp", "rsync")}
    lines.append("other work during fresh runs (machine busy CPU minus client and host side, in cores, median): "
                 + ", ".join(f"{t} {v:.2f}" for t, v in other.items())
                 + f"; runs redone because of other work: {len(bench.discarded)}")
    if not meta["quiet"]:
        lines.append(f"NOTE: the machine was not quiet when measuring started (waited {meta['waited_s']:.0f}s).")
    return "\n".join(lines)


# ---------------------------------------------------------------------- main




def fresh_host(work: Path, key_comment: str) -> Host:
    """An empty work dir with a client key, and the (not yet started) sshd host that trusts it."""
    shutil.rmtree(work, ignore_errors=True)
    (work / "client").mkdir(parents=True)
    work.chmod(0o755)
    keygen(work / "client" / "id_ed25519", key_comment)
    shutil.copyfile(work / "client" / "id_ed25519.pub", work / "authorized_keys")
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    return Host("deploy-host", work / "host", work / "authorized_keys")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3, help="timed fresh and no-op runs per tool (default 3)")
    p.add_argument("--cipher", default=DEFAULT_CIPHER, help=f"the one cipher all sides use (default {DEFAULT_CIPHER})")
    p.add_argument("--patchkit-default-cipher", action="store_true",
                   help="no Ciphers in patchkit's ~/.ssh/config: patchkit picks (it must pick --cipher)")
    p.add_argument("--shards", type=int, default=3)
    p.add_argument("--shard-mib", type=int, default=682, help="MiB per shard (default 682: ~2 GiB in all)")
    p.add_argument("--workdir", default="/tmp/patchkit-deploy-bench", help="keys, sshd, destinations (wiped first)")
    p.add_argument("--patchkit", help="patchkit command (default: the console script next to this python / .venv)")
    p.add_argument("--tools", default="patchkit,scp,rsync")
    p.add_argument("--max-wait", type=float, default=900, help="wait at most this long for a quiet machine")
    p.add_argument("--no-wait", action="store_true")
    p.add_argument("--quiet-wait", type=float, default=60,
                   help="before each run, wait up to this long for the machine to be idle (default 60 s)")
    p.add_argument("--settle-s", type=float, default=3.0,
                   help="before each fresh run: write and delete an artifact-sized scratch file, then wait this "
                        "long (free page reporting; 0: off, as before 2026-12-02)")
    p.add_argument("--noisy-limit", type=float, default=0.6,
                   help="redo a run (once) when other work used more than this many cores on average (default 0.6)")
    p.add_argument("--no-cold", action="store_true", help="skip the cold-cache patchkit run")
    p.add_argument("--profile", action="store_true", help="one more patchkit deploy under py-spy (control + agent)")
    p.add_argument("--breakdown", action="store_true",
                   help="also time the pieces alone: raw asyncssh / OpenSSH streams, fsync, sha256 of a shard")
    p.add_argument("--timeline", action="store_true",
                   help="one more patchkit deploy with timestamps per request (streaming vs host-side work)")
    p.add_argument("--json-out", help="write all runs as JSON here")
    args = p.parse_args()
    # stopped by SIGTERM or SIGINT (even when started in the background, where SIGINT is ignored):
    # unwind, so the finally below stops sshd
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tools = [t for t in args.tools.split(",") if t]
    for exe in ("sshd", "scp", "ssh", "ssh-keygen") + (("rsync",) if "rsync" in tools else ()):
        if not shutil.which(exe) and not (exe == "sshd" and os.path.exists("/usr/sbin/sshd")):
            sys.exit(f"{exe} not found (apt-get install -y openssh-server openssh-client rsync)")

    src, hashes, total = artifact(args.shards, args.shard_mib)
    ratio = incompressible(src)
    work = Path(args.workdir)
    host = fresh_host(work, "patchkit-deploy-bench")
    bench = Bench(work, src, hashes, total, host, args.cipher, patchkit_argv(args.patchkit),
                  quiet_max_s=args.quiet_wait, noisy_limit=args.noisy_limit, settle_s=args.settle_s,
                  patchkit_cipher_configured=not args.patchkit_default_cipher)
    waited, quiet = (0.0, True) if args.no_wait else wait_idle(args.max_wait)
    host.start()
    try:
        enable_sftp(host)
        bench.write_configs()
        ciphers = bench.negotiated_ciphers()
        log(f"negotiated: {ciphers}")
        for side in ("openssh", "asyncssh"):
            text = ciphers[side]
            if args.cipher not in text:
                raise RuntimeError(f"{side} did not negotiate {args.cipher}: {text}")
        t_start = time.monotonic()
        if "patchkit" in tools and not args.no_cold:
            bench.wipe("patchkit")
            shutil.rmtree(bench.control_cache, ignore_errors=True)
            _, out = bench.run("patchkit", "fresh-cold")
            bench.check_patchkit(out, "fresh")
        for i in range(args.runs if tools else 0):
            order = tools[i % len(tools):] + tools[:i % len(tools)]
            for tool in order:
                _, out = bench.timed(tool, "fresh")
                if tool == "patchkit":
                    bench.check_patchkit(out, "fresh")
                bench.verify(tool, full=(i == 0))
        for tool in ("patchkit", "rsync"):
            if tool in tools:
                for _ in range(args.runs):
                    _, out = bench.timed(tool, "noop")
                    if tool == "patchkit":
                        bench.check_patchkit(out, "noop")
        profile = profile_run(bench) if args.profile and "patchkit" in tools else None
        pieces = breakdown(bench) if args.breakdown else None
        times = timeline(bench) if args.timeline and "patchkit" in tools else None
        meta = {"runs": args.runs, "cipher": args.cipher, "ciphers": ciphers, "zlib_ratio": ratio,
                "patchkit_cipher": "configured" if bench.patchkit_cipher_configured else "patchkit's default",
                "waited_s": waited, "quiet": quiet, "total_bytes": total, "files": len(hashes),
                "measure_s": round(time.monotonic() - t_start, 1), "load_at_start": os.getloadavg(),
                "nproc": os.cpu_count(), "openssh": subprocess.run(["ssh", "-V"], capture_output=True, text=True,
                                                                  check=False).stderr.strip()}
        if bench.runs:
            print(report(bench, meta))
        if profile:
            print(f"\npy-spy, one extra fresh patchkit deploy (not in the table): {profile['seconds']:.2f} s under "
                  f"py-spy, client CPU {profile['client_cpu']:.1f} s, host {profile['host_split']}")
            for side in ("control", "agent"):
                for kind in ("self", "inclusive"):
                    print(f"  {side} {kind} (% of {profile[side].get('samples', 0)} samples): "
                          + "; ".join(f"{name} {pct}" for name, pct in profile[side][kind]))
        if times:
            print("\npatchkit timeline (one extra fresh deploy, not in the table): " + json.dumps(times))
        if pieces:
            print("\npieces alone (once each): " + ", ".join(f"{k} {v}" for k, v in pieces.items()))
        if args.json_out:
            Path(args.json_out).write_text(json.dumps({"meta": meta, "runs": [asdict(r) for r in bench.runs],
                                                       "discarded": [asdict(r) for r in bench.discarded],
                                                       "profile": profile, "breakdown": pieces, "timeline": times}, indent=1))
    finally:
        stop_and_clean(host, bench, tools)


if __name__ == "__main__":
    main()
