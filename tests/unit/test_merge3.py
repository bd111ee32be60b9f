"""The three-way merge (edits/merge3.py) on its own: pure, no host.

The differential test holds it to `git merge-file` (the oracle only: the merge is ours) on
random triples built to be hard (few distinct lines, so diffs have many equally short
alignments): where git merges cleanly, ours gives the same bytes or refuses; where git
conflicts, ours refuses; and most clean merges are made."""

from __future__ import annotations

import difflib
import random
import subprocess
from pathlib import Path

import pytest

from patchkit.edits.merge3 import NotExact, exact, git_blob, in_place, merge
from patchkit.edits.unified_diff import parse_diff, reversed_diff
from patchkit.edits.unified_diff import split_lines as split


def unified(old: str, new: str) -> str:
    """difflib's unified diff, with the marker it leaves out after a last line without newline."""
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                   for line in difflib.unified_diff(split(old), split(new), "a/m.py", "b/m.py"))


def fix_of(base: str, fixed: str) -> tuple[list[str], list[str], list]:
    """(base lines, fixed lines, changes) through a unified diff, as a recipe's diff comes."""
    [patch] = parse_diff(unified(base, fixed)).files
    lines = split(base)
    new, changes = exact(patch, lines)
    assert "".join(new) == fixed
    return lines, new, changes


def merged(base: str, host: str, fixed: str) -> str | None:
    lines, new, changes = fix_of(base, fixed)
    out = merge(lines, split(host), new, changes)
    return None if out.lines is None else "".join(out.lines)


BASE = "".join(f"line {i}\n" for i in range(1, 21))


def test_changes_apart_are_combined_and_the_fix_on_its_own_result_is_the_same_file() -> None:
    fixed = BASE.replace("line 5\n", "line five\n")
    host = BASE.replace("line 12\n", "line twelve\n").replace("line 1\n", "# header\nline 1\n")
    assert merged(BASE, host, fixed) == host.replace("line 5\n", "line five\n")
    assert merged(BASE, fixed, fixed) == fixed  # the fix in place: the host's file as it is


def test_changes_that_touch_or_overlap_conflict_showing_all_three_sides() -> None:
    fixed = BASE.replace("line 5\n", "line five\n")
    touching = BASE.replace("line 6\n", "line six\n")  # no unchanged line between
    lines, new, changes = fix_of(BASE, fixed)
    result = merge(lines, split(touching), new, changes)
    assert result.lines is None and len(result.conflicts) == 1
    shown = result.conflicts[0].describe()
    assert "  base | line 5\n  base | line 6" in shown
    assert "  host | line 5\n  host | line six" in shown
    assert "  fix  | line five\n  fix  | line 6" in shown
    assert merged(BASE, BASE.replace("line 7\n", "line seven\n"), fixed) is not None  # one line between: apart


def test_the_same_change_on_both_sides_is_no_conflict_and_inserts_at_one_place_differ() -> None:
    fixed = BASE.replace("line 5\n", "line 5\nnew\n")
    assert merged(BASE, fixed.replace("line 15\n", "x\n"), fixed) == fixed.replace("line 15\n", "x\n")
    assert merged(BASE, BASE.replace("line 5\n", "line 5\nother\n"), fixed) is None


def test_a_change_that_could_slide_onto_the_other_sides_is_a_conflict() -> None:
    """Base: a, blank, blank, b. The host deletes one blank line (the first or the second:
    diffs may choose either); the fix changes b. Placed as the second, they touch."""
    base = "a\n\n\nb\nc\nd\n"
    host = "a\n\nb\nc\nd\n"
    assert merged(base, host, base.replace("b\n", "B\n")) is None
    assert merged(base, host, base.replace("d\n", "D\n")) == host.replace("d\n", "D\n")


def test_a_merged_file_whose_merge_again_conflicts_is_in_place() -> None:
    """The host dropped the first (blank) line; the fix adds lines after the next. Merged once,
    cleanly; merged again, the host's change and the fix's own lines may be aligned to touch
    (a conflict), yet the fix is there exactly: taken out and put back, the same file."""
    base, host, fixed = "\na\nb\nb\na\n", "a\nb\nb\na\n", "\na\na\na\n!\nb\nb\na\n"
    lines, new, changes = fix_of(base, fixed)
    done = merge(lines, split(host), new, changes).lines
    assert done is not None and "".join(done) == "a\na\na\n!\nb\nb\na\n"
    assert merge(lines, done, new, changes).lines is None
    assert in_place(lines, done, new, changes)
    assert not in_place(lines, split(host), new, changes)  # not there yet


def test_a_split_insertion_that_a_diff_can_join_next_to_the_fix_is_a_conflict() -> None:
    """The host inserts `}` and `a` among the closing braces; one diff finds two inserts a line
    apart, another (git's) one insert `a`, `}` right before the `b` the fix deletes."""
    base = "}\nreturn x\nreturn x\nc\nb\n    pass\nb\n}\n\n}\n}\nb\n"
    host = "b\n!\nreturn x\nreturn x\nc\nb\n    pass\nb\n}\n\n}\n}\na\n}\nb\n"
    assert merged(base, host, base.removesuffix("b\n")) is None


def test_whitespace_is_compared_exactly() -> None:
    fixed = BASE.replace("line 5\n", "line five\n")
    assert merged(BASE, BASE.replace("line 5\n", "line 5 \n"), fixed) is None  # a trailing space is a change
    assert merged(BASE, BASE.replace("line 5\n", "    line 5\n"), fixed) is None  # so is indentation
    no_eol = BASE[:-1]  # the last line without its newline
    assert merged(no_eol, no_eol.replace("line 2\n", "two\n"), no_eol + "\nline 21") == \
        no_eol.replace("line 2\n", "two\n") + "\nline 21"


def test_exact_means_at_the_hunks_line_numbers() -> None:
    [patch] = parse_diff(unified(BASE, BASE.replace("line 5\n", "five\n"))).files
    shifted = split("extra\n" + BASE)  # the lines are there, one further down
    with pytest.raises(NotExact, match="hunk 1 .*base line 2 is 'line 1', the diff has 'line 2'"):
        exact(patch, shifted)


def test_git_index_lines_are_read_and_swapped_by_reverse() -> None:
    diff = ("diff --git a/m.py b/m.py\nindex 1234567..89abcde 100644\n--- a/m.py\n+++ b/m.py\n"
            "@@ -1 +1 @@\n-x\n+y\n")
    [patch] = parse_diff(diff).files
    assert patch.index == ("1234567", "89abcde")
    assert reversed_diff(parse_diff(diff)).files[0].index == ("89abcde", "1234567")
    assert git_blob(b"x\n") == "587be6b4c3f93f93c489c0111bba5596147a26cb"  # `git hash-object` of "x\n"


def git_merge_file(tmp: Path, host: str, base: str, fixed: str) -> str | None:
    for name, text in (("host", host), ("base", base), ("fix", fixed)):
        (tmp / name).write_text(text)
    out = subprocess.run(["git", "merge-file", "-p", "--quiet", "host", "base", "fix"], cwd=tmp,
                         capture_output=True, text=True, check=False)
    assert 0 <= out.returncode < 128, out.stderr
    return out.stdout if out.returncode == 0 else None


def edited(rng: random.Random, lines: list[str], words: list[str]) -> list[str]:
    out = list(lines)
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(out) + 1)
        kind = rng.random()
        if kind < 0.35 and at < len(out):
            del out[at:at + rng.randint(1, 3)]
        elif kind < 0.7:
            out[at:at] = [rng.choice(words) for _ in range(rng.randint(1, 3))]
        elif at < len(out):
            out[at] = rng.choice(words) + "!\n"
    return out


def test_never_other_bytes_than_git_merge_file_and_every_conflict_refused(tmp_path: Path) -> None:
    rng = random.Random(44)
    words = [f"{w}\n" for w in ("a", "b", "c", "", "    pass", "return x", "}")]  # repeats: many alignments
    clean = same = 0
    wrong: list[str] = []
    for case in range(400):
        base_lines = [rng.choice(words) for _ in range(rng.randint(8, 30))]
        base = "".join(base_lines)
        fixed = "".join(edited(rng, base_lines, words))
        host = "".join(edited(rng, base_lines, words))
        if fixed == base:
            continue
        want = git_merge_file(tmp_path, host, base, fixed)
        got = merged(base, host, fixed)
        if want is not None:
            clean += 1
            same += got == want
        if got is not None and got != want:
            wrong.append(f"case {case}: git {'conflicts' if want is None else 'gives other bytes'}\n"
                         f"base {base!r}\nhost {host!r}\nfix {fixed!r}")
    assert wrong == [], "\n\n".join(wrong[:3])
    assert clean > 100 and same / clean > 0.8, (same, clean)
