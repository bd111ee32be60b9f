#!/usr/bin/env python3
"""Where a patchkit command's start goes: import time by package, and the command's CPU.

    .venv/bin/python bench/startup_cost.py -n 9 --build main="env PYTHONPATH=/tmp/pk-main .venv/bin/python -P" \\
        --build new="env PYTHONPATH=/tmp/pk-new .venv/bin/python -P" -- plan bench/bench_eagle3.yaml -i INV --json

`--before CMD` runs CMD (untimed, a shell command) before every run: e.g. a reset of the
hosts, so that every `apply` is a fresh one.

Runs `BUILD -X importtime -m patchkit ARGS` n times per build, alternating builds (so both
see the same machine), and prints per build: the median CPU of the whole command (user+sys
of the process and its children, from getrusage: steadier than wall on a shared machine),
its wall time, and the median import time (-X importtime's self times, summed) by package:
third-party packages by their top-level name, patchkit by module (patchkit.recipe.model, ...),
the standard library as "stdlib". The import figures are wall time inside the process.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shlex
import statistics
import subprocess
import sys
import time
from collections import defaultdict

LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")
THIRD_PARTY = ("pydantic", "pydantic_core", "annotated_types", "typing_extensions", "typing_inspection", "yaml",
               "asyncssh", "cryptography", "libcst", "packaging", "tenacity", "structlog", "rich", "bcrypt",
               "nacl", "_cffi_backend", "idna", "jinja2", "markupsafe")


def group_of(module: str) -> str:
    top = module.split(".")[0]
    if top == "patchkit":
        return ".".join(module.split(".")[:2])
    if top in ("pydantic_core", "annotated_types", "typing_extensions", "typing_inspection"):
        return "pydantic"  # what importing pydantic brings
    if top in THIRD_PARTY:
        return top
    if top.startswith("__editable__"):
        return "editable-install finder"
    return "asyncio" if top == "asyncio" else "stdlib"


def once(build: list[str], args: list[str], before: str | None = None) -> tuple[float, float, dict[str, float]]:
    if before:
        subprocess.run(before, shell=True, check=True)  # noqa: S602 - the bench operator's own command line
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([*build, "-X", "importtime", "-m", "patchkit", *args], capture_output=True, text=True,
                          env=env, check=False)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    groups: dict[str, float] = defaultdict(float)
    for line in proc.stderr.splitlines():
        m = LINE.match(line)
        if m:
            groups[group_of(m.group(4))] += int(m.group(1)) / 1000.0
    cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
    return cpu, wall, groups


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("-n", type=int, default=7)
    p.add_argument("--build", action="append", required=True, metavar="NAME=CMD",
                   help="a python command line that imports the patchkit to measure")
    p.add_argument("--before", metavar="CMD", help="shell command run (untimed) before every run, e.g. a host reset")
    p.add_argument("args", nargs=argparse.REMAINDER, help="-- then the patchkit arguments")
    a = p.parse_args()
    args = a.args[1:] if a.args[:1] == ["--"] else a.args
    builds = {name: shlex.split(cmd) for name, cmd in (b.split("=", 1) for b in a.build)}
    runs: dict[str, list[tuple[float, float, dict[str, float]]]] = {name: [] for name in builds}
    for _ in range(a.n):
        for name, build in builds.items():
            runs[name].append(once(build, args, a.before))
    names = list(builds)
    print(f"patchkit {' '.join(args)}  (median of {a.n}, builds alternated)")
    print(f"{'':34}" + "".join(f"{n:>12}" for n in names))
    print(f"{'CPU of the command, ms':34}" + "".join(f"{1000 * statistics.median(r[0] for r in runs[n]):12.0f}"
                                                   for n in names))
    print(f"{'wall of the command, ms':34}" + "".join(f"{1000 * statistics.median(r[1] for r in runs[n]):12.0f}"
                                                    for n in names))
    totals = {n: statistics.median(sum(r[2].values()) for r in runs[n]) for n in names}
    print(f"{'imports, all, ms':34}" + "".join(f"{totals[n]:12.1f}" for n in names))
    keys = sorted({k for n in names for r in runs[n] for k in r[2]},
                  key=lambda k: -max(statistics.median(r[2].get(k, 0.0) for r in runs[n]) for n in names))
    for k in keys:
        values = [statistics.median(r[2].get(k, 0.0) for r in runs[n]) for n in names]
        if max(values) >= 1.0:
            print(f"{'  ' + k:34}" + "".join(f"{v:12.1f}" for v in values))


if __name__ == "__main__":
    sys.exit(main())
