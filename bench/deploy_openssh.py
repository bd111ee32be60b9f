#!/usr/bin/env python3
"""The 2 GB deploy of bench/deploy_bench.py through `ssh_client: openssh`, next to scp and asyncssh.

    flock /tmp/patchkit-bench.lock .venv/bin/python bench/deploy_openssh.py [--runs 3]

Same host, artifact, cipher and rules as deploy_bench.py (imported, not changed): one real
sshd on 127.0.0.1, 3 random shards + config.json (~2.1 GB), aes128-gcm@openssh.com on every
side, compression off, destination and host journal wiped before each fresh run, `sync`,
wait for a quiet machine, timed from spawn to exit, tool order rotating per round, the
control-side hash cache warm (one untimed warm-up run per patchkit contender).

Contenders:
  patchkit-openssh  the deploy recipe with `ssh_client: openssh` in the inventory. OpenSSH
                    reads ~/.ssh of the passwd entry, not $HOME, so the cipher comes from an
                    `ssh` wrapper first in PATH that adds `-F <bench config>` (Ciphers,
                    Compression no); everything else is patchkit's own command line.
  patchkit          the same with asyncssh (the default client), as deploy_bench.py runs it
  scp               `scp -q -r -p -F ssh_config SRC bench:DEST`, as deploy_bench.py runs it

Latest figures (0f372b2, hasher thread + splice): patchkit-openssh 64-65% of scp, see
bench/DEPLOY.md. First measured on a quiet machine (2 vCPU EPYC, OpenSSH 9.2p1, patchkit 08f7ceb +
the OpenSSH transport), 2.145 GB, medians of 3: patchkit-openssh 7.94 s (270 MB/s, 55% of scp), patchkit
with asyncssh 9.96 s (215 MB/s, 44%), scp 4.36 s (492 MB/s; its data still needed `sync`,
+2.4 s, which patchkit's fsyncs include). Client CPU 4.3 s vs 6.4 s with asyncssh; the host
agent (3.3 CPU-s) now bounds the deploy, not the channel.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from deploy_bench import (  # noqa: E402 - after the path set-up, as deploy_bench does
    DEFAULT_CIPHER,
    Bench,
    Run,
    artifact,
    enable_sftp,
    fresh_host,
    log,
    median,
    stop_and_clean,
)
from fixtures.project_cli import patchkit_argv  # noqa: E402 - deploy_bench puts the repo on sys.path

OSSH = "patchkit-openssh"
BEFORE = "patchkit-before"  # --before CMD: another patchkit build, asyncssh, in the same rounds


class OpenSSHBench(Bench):
    @property
    def ossh_state(self) -> Path:
        return self.host.root / "state-openssh"

    @property
    def ossh_bin(self) -> Path:
        return self.work / "openssh-bin"

    def write_openssh(self) -> None:
        config = self.work / "ssh_config_openssh"
        config.write_text(f"Host *\n  Ciphers {self.cipher}\n  Compression no\n")
        self.ossh_bin.mkdir(exist_ok=True)
        wrapper = self.ossh_bin / "ssh"
        wrapper.write_text(f'#!/bin/sh\nexec {shutil.which("ssh")} -F {config} "$@"\n')
        wrapper.chmod(0o755)
        inventory = json.loads((self.work / "inventory.yaml").read_text())
        inventory["hosts"]["bench"].update(ssh_client="openssh", state_dir=str(self.ossh_state))
        (self.work / "inventory-openssh.yaml").write_text(json.dumps(inventory, indent=1))
        recipe = json.loads((self.work / "deploy.yaml").read_text())
        recipe["steps"][0]["deploy"]["dest"] = str(self.dest(OSSH))
        (self.work / "deploy-openssh.yaml").write_text(json.dumps(recipe, indent=1))

    def openssh_cipher(self) -> str:
        """What patchkit's own ssh command line negotiates through the wrapper."""
        import patchkit.host.transport.schemes  # noqa: F401 - the schemes the inventory reads hosts with
        from patchkit.fleet.inventory import Inventory
        from patchkit.host.transport.openssh import OpenSSHTransport
        from patchkit.host.transport.ssh_common import SSHTarget

        spec = Inventory.model_validate_json((self.work / "inventory-openssh.yaml").read_text()).resolved()["bench"]
        argv = OpenSSHTransport(SSHTarget.from_host(spec), ssh=str(self.ossh_bin / "ssh")).command(["true"])
        probe = subprocess.run([argv[0], "-v", *argv[1:]], capture_output=True, text=True, timeout=30, check=False)
        found = re.search(r"kex: client->server cipher: (\S+) MAC: (\S+) compression: (\S+)", probe.stderr)
        return " ".join(found.groups()) if found else f"? (exit {probe.returncode})"

    before: list[str] = []

    @property
    def before_state(self) -> Path:
        return self.host.root / "state-before"

    def write_before(self) -> None:
        inventory = json.loads((self.work / "inventory.yaml").read_text())
        inventory["hosts"]["bench"].update(state_dir=str(self.before_state))
        (self.work / "inventory-before.yaml").write_text(json.dumps(inventory, indent=1))
        recipe = json.loads((self.work / "deploy.yaml").read_text())
        recipe["steps"][0]["deploy"]["dest"] = str(self.dest(BEFORE))
        (self.work / "deploy-before.yaml").write_text(json.dumps(recipe, indent=1))

    def argv(self, tool: str) -> list[str]:
        if tool == BEFORE:
            return [*self.before, "apply", str(self.work / "deploy-before.yaml"), "--json",
                    "-i", str(self.work / "inventory-before.yaml")]
        if tool == OSSH:
            return [*self.patchkit, "apply", str(self.work / "deploy-openssh.yaml"), "--json",
                    "-i", str(self.work / "inventory-openssh.yaml")]
        return super().argv(tool)

    def wipe(self, tool: str) -> None:
        if tool == BEFORE:
            shutil.rmtree(self.before_state, ignore_errors=True)
        if tool == OSSH:
            shutil.rmtree(self.ossh_state, ignore_errors=True)
        super().wipe(tool)

    def run(self, tool: str, mode: str, argv: list[str] | None = None,
            env: dict[str, str] | None = None) -> tuple[Run, str]:
        if tool == BEFORE and env is None:
            env = self.env(True)
        if tool == OSSH and env is None:
            env = self.env(True)
            env["PATH"] = f"{self.ossh_bin}:{env['PATH']}"
        return super().run(tool, mode, argv, env)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--cipher", default=DEFAULT_CIPHER)
    p.add_argument("--tools", default=f"{OSSH},scp,patchkit")
    p.add_argument("--workdir", default="/tmp/patchkit-deploy-openssh")
    p.add_argument("--quiet-wait", type=float, default=30)
    p.add_argument("--json-out")
    p.add_argument("--settle-s", type=float, default=3.0,
                   help="before each fresh run: write and delete an artifact-sized scratch file, then wait this "
                        "long (deploy_bench.Bench.settle_memory; 0: off, as before 2026-12-02)")
    p.add_argument("--before", help=f"another patchkit command line, run as the contender {BEFORE} (asyncssh) "
                                    "in the same rounds: before/after ratios from one run")
    p.add_argument("--shard-mib", type=int, default=682, help="MiB per shard, 3 shards (default 682: ~2 GiB in all)")
    p.add_argument("--noop-runs", type=int, default=0, help="no-op redeploys per patchkit contender, after the fresh runs")
    args = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tools = [t for t in args.tools.split(",") if t] + ([BEFORE] if args.before else [])

    src, hashes, total = artifact(3, args.shard_mib)
    work = Path(args.workdir)
    host = fresh_host(work, "patchkit-deploy-openssh")
    bench = OpenSSHBench(work, src, hashes, total, host, args.cipher, patchkit_argv(), quiet_max_s=args.quiet_wait,
                         settle_s=args.settle_s)
    host.start()
    try:
        enable_sftp(host)
        bench.write_configs()
        bench.write_openssh()
        if args.before:
            import shlex

            bench.before = shlex.split(args.before)
            bench.write_before()
        ciphers = {**bench.negotiated_ciphers(), "patchkit-openssh": bench.openssh_cipher()}
        log(f"negotiated: {ciphers}")
        for side in ("openssh", "asyncssh", "patchkit-openssh"):
            if args.cipher not in ciphers[side]:
                raise RuntimeError(f"{side} did not negotiate {args.cipher}: {ciphers[side]}")
        for tool in tools:  # warm the control-side hash cache (and the page cache) once, untimed
            if tool.startswith("patchkit"):
                bench.wipe(tool)
                bench.run(tool, "warm-up")
        for i in range(args.runs):
            for tool in tools[i % len(tools):] + tools[:i % len(tools)]:
                _, out = bench.timed(tool, "fresh")
                if tool.startswith("patchkit"):
                    bench.check_patchkit(out, "fresh")
                bench.verify(tool, full=(i == 0))
        for tool in [t for t in tools if t.startswith("patchkit")]:  # everything in place: nothing to send
            for _ in range(args.noop_runs):
                _, out = bench.timed(tool, "noop")
                bench.check_patchkit(out, "noop")
        scp = median([r.seconds for r in bench.runs if r.tool == "scp" and r.mode == "fresh"])
        print(f"{total / 1e9:.3f} GB, {args.runs} fresh runs each, medians; ciphers: {ciphers}")
        print("| tool | median s | runs s | MB/s | vs scp | client CPU s | host CPU s |")
        print("|---|---:|---|---:|---:|---:|---:|")
        for tool in tools:
            fresh = [r for r in bench.runs if r.tool == tool and r.mode == "fresh"]
            seconds = median([r.seconds for r in fresh])
            print(f"| {tool} | {seconds:.2f} | {' / '.join(f'{r.seconds:.2f}' for r in fresh)} "
                  f"| {total / seconds / 1e6:.0f} | {100 * scp / seconds:.0f}% "
                  f"| {median([r.client_cpu for r in fresh]):.1f} | {median([r.host_cpu for r in fresh]):.1f} |")
        for tool in tools:
            noop = [r.seconds for r in bench.runs if r.tool == tool and r.mode == "noop"]
            if noop:
                print(f"no-op redeploy, {tool}: median {median(noop):.2f} s ({' / '.join(f'{s:.2f}' for s in noop)})")
        if args.json_out:
            Path(args.json_out).write_text(json.dumps({"ciphers": ciphers, "runs": [r.__dict__ for r in bench.runs]},
                                                      indent=1))
    finally:
        stop_and_clean(host, bench, tools)


if __name__ == "__main__":
    main()
