"""A three-way merge over lines (diff3): a fix written against a base release, merged into the
host's file. No I/O.

The fix's changes are the diff's own (each run of removed and added lines of a hunk, placed
exactly at its line numbers in the base: `exact` checks that the diff applies to the base
as written). The host's changes are a diff of the base against the host's file. The merged
file is the host's file with every fix change put in where the host left the base's lines
as they were: a fix change and a host change that overlap or touch (no unchanged base line
between them) are a conflict unless both make the same change; a conflict is reported with
the base's, the host's and the fix's lines, never resolved by a guess. Lines are compared
exactly (indentation, trailing whitespace, line endings): in Python whitespace is meaning.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from patchkit.edits.unified_diff import FilePatch

SHOWN = 12  # lines of each side a conflict message shows


@dataclass(frozen=True)
class Change:
    """Base lines [start, end) replaced by lines [new_start, new_end) of the other side."""

    start: int
    end: int
    new_start: int
    new_end: int


@dataclass(frozen=True)
class Conflict:
    start: int  # 0-based, in the base
    base: tuple[str, ...]
    host: tuple[str, ...]
    fix: tuple[str, ...]
    host_start: int  # 0-based, in the host's file

    def describe(self) -> str:
        def side(label: str, lines: tuple[str, ...]) -> str:
            shown = [f"  {label} | {line.rstrip(chr(10)).rstrip(chr(13))}" for line in lines[:SHOWN]]
            more = [f"  {label} | ... ({len(lines) - SHOWN} more lines)"] if len(lines) > SHOWN else []
            return "\n".join(shown + more) if lines else f"  {label} | (no lines)"

        where = f"base line {self.start + 1}, host line {self.host_start + 1}"
        return (f"conflict at {where}: the host's file and the fix change the same lines\n"
                f"{side('base', self.base)}\n{side('host', self.host)}\n{side('fix ', self.fix)}")


@dataclass(frozen=True)
class Merged:
    lines: list[str] | None  # None: conflicts
    conflicts: tuple[Conflict, ...]


class NotExact(Exception):
    """The diff does not apply to the base exactly as written."""


def split(text: str) -> list[str]:
    """Lines with their endings; only \\n ends a line."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _body(line: str) -> str:
    return line[:-2] if line.endswith("\r\n") else line.removesuffix("\n")


def exact(patch: FilePatch, base: list[str]) -> tuple[list[str], list[Change]]:
    """The base with the diff applied at its hunks' line numbers exactly, and the diff's changes
    (in base positions); NotExact naming the first line that differs. Added lines take the
    base's line ending, context lines keep the base's bytes."""
    eol = next(("\r\n" if line.endswith("\r\n") else "\n" for line in base if line.endswith("\n")), "\n")
    out: list[str] = []
    changes: list[Change] = []
    at = 0
    for hunk in patch.hunks:
        start = hunk.old_start - 1 if hunk.old_len else hunk.old_start
        if start < at or start > len(base):
            raise NotExact(f"hunk {hunk.number} ({hunk.header}) starts at line {hunk.old_start}, "
                           f"{'before the previous hunk ends' if start < at else 'after the end of the file'}")
        out.extend(base[at:start])
        b = start
        run: tuple[int, int] | None = None  # (base start, out start) of the change being read
        for line in hunk.lines:
            if line.tag == " " and run is not None:
                changes.append(Change(run[0], b, run[1], len(out)))
                run = None
            elif line.tag != " " and run is None:
                run = (b, len(out))
            if line.tag == "+":
                out.append(line.text + (eol if line.newline else ""))
                continue
            here = base[b] if b < len(base) else None
            if here is None or _body(here) != line.text or here.endswith("\n") != line.newline:
                shown = "the end of the file" if here is None else repr(_body(here)[:80])
                raise NotExact(f"hunk {hunk.number} ({hunk.header}): base line {b + 1} is {shown}, "
                               f"the diff has {line.text[:80]!r}")
            if line.tag == " ":
                out.append(here)
            b += 1
        if run is not None:
            changes.append(Change(run[0], b, run[1], len(out)))
        at = b
    out.extend(base[at:])
    return out, changes


def _intern(*sides: list[str]) -> list[list[int]]:
    ids: dict[str, int] = {}
    return [[ids.setdefault(line, len(ids)) for line in side] for side in sides]


def changes_between(old: list[str], new: list[str]) -> list[Change]:
    """The runs of lines that differ between `old` and `new` (a shortest edit script, Myers'
    algorithm, after the common head and tail are set aside)."""
    a, b = _intern(old, new)
    head = 0
    while head < len(a) and head < len(b) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < len(a) - head and tail < len(b) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    out = [Change(s + head, e + head, ns + head, ne + head)
           for s, e, ns, ne in _myers(a[head:len(a) - tail], b[head:len(b) - tail])]
    return out


def _myers(a: list[int], b: list[int]) -> list[tuple[int, int, int, int]]:
    """Changed runs (a_start, a_end, b_start, b_end) of a shortest edit script of a to b."""
    n, m = len(a), len(b)
    if n == 0 or m == 0:
        return [(0, n, 0, m)] if n or m else []
    # Lines found on one side only are changes whatever the alignment: set aside, the search
    # runs over the lines both sides hold (what makes a diff of two releases of a file fast).
    in_b, in_a = set(b), set(a)
    keep_a = [i for i, x in enumerate(a) if x in in_b]
    keep_b = [j for j, y in enumerate(b) if y in in_a]
    ra, rb = [a[i] for i in keep_a], [b[j] for j in keep_b]
    matched = _lcs_pairs(ra, rb)
    pairs = [(keep_a[i], keep_b[j]) for i, j in matched]
    out = []
    pa = pb = 0
    for i, j in pairs + [(n, m)]:
        if i > pa or j > pb:
            out.append((pa, i, pb, j))
        pa, pb = i + 1, j + 1
    return out


def _lcs_pairs(a: list[int], b: list[int]) -> list[tuple[int, int]]:
    """Matched (i, j) of a longest common subsequence, by Myers' greedy O((N+M)D) search."""
    n, m = len(a), len(b)
    if n == 0 or m == 0:
        return []
    limit = n + m
    v = {1: 0}
    trace: list[dict[int, int]] = []
    for d in range(limit + 1):
        trace.append(v.copy())
        for k in range(-d, d + 1, 2):
            if k == -d or (k != d and v[k - 1] < v[k + 1]):
                x = v[k + 1]
            else:
                x = v[k - 1] + 1
            y = x - k
            while x < n and y < m and a[x] == b[y]:
                x += 1
                y += 1
            v[k] = x
            if x >= n and y >= m:
                return _backtrack(trace, a, b, n, m)
    raise AssertionError("unreachable: an edit script of at most n + m steps exists")


def _backtrack(trace: list[dict[int, int]], a: list[int], b: list[int], n: int, m: int) -> list[tuple[int, int]]:
    pairs: list[tuple[int, int]] = []
    x, y = n, m
    for d in range(len(trace) - 1, -1, -1):
        v = trace[d]
        k = x - y
        if d == 0:
            while x > 0 and y > 0:
                x, y = x - 1, y - 1
                pairs.append((x, y))
            break
        prev_k = k + 1 if k == -d or (k != d and v[k - 1] < v[k + 1]) else k - 1
        prev_x = v[prev_k]
        prev_y = prev_x - prev_k
        while x > prev_x and y > prev_y:
            x, y = x - 1, y - 1
            pairs.append((x, y))
        x, y = prev_x, prev_y
    pairs.reverse()
    return pairs


def merge(base: list[str], host: list[str], fix: list[str], fix_changes: list[Change]) -> Merged:
    """The host's file with the fix's changes (base -> fix) put in; conflicts where they meet
    the host's own changes (base -> host)."""
    host_changes = changes_between(base, host)
    out: list[str] = []
    conflicts: list[Conflict] = []
    i = j = 0
    copied = 0  # host lines before this are in `out`
    shift = 0  # host index minus base index, after the host changes passed so far
    while j < len(fix_changes):
        while i < len(host_changes) and host_changes[i].end < fix_changes[j].start:
            shift = host_changes[i].new_end - host_changes[i].end
            i += 1
        fs, hs = [fix_changes[j]], []
        lo, hi = fs[0].start, fs[0].end
        j += 1
        while True:  # a chunk: changes of either side that overlap or touch, transitively
            if i < len(host_changes) and host_changes[i].start <= hi:
                hs.append(host_changes[i])
                lo, hi = min(lo, hs[-1].start), max(hi, hs[-1].end)
                i += 1
            elif j < len(fix_changes) and fix_changes[j].start <= hi:
                fs.append(fix_changes[j])
                hi = max(hi, fs[-1].end)
                j += 1
            else:
                break
        host_lo = hs[0].new_start - (hs[0].start - lo) if hs else lo + shift
        host_hi = hs[-1].new_end + (hi - hs[-1].end) if hs else hi + shift
        fix_side = fix[fs[0].new_start - (fs[0].start - lo):fs[-1].new_end + (hi - fs[-1].end)]
        host_side = host[host_lo:host_hi]
        out.extend(host[copied:host_lo])
        if hs and host_side != fix_side:
            conflicts.append(Conflict(lo, tuple(base[lo:hi]), tuple(host_side), tuple(fix_side), host_lo))
        out.extend(fix_side)
        copied = host_hi
        if hs:
            shift = hs[-1].new_end - hs[-1].end
    if conflicts:
        return Merged(None, tuple(conflicts))
    out.extend(host[copied:])
    return Merged(out, ())


def git_blob(data: bytes) -> str:
    """The id git gives a file's content (the `index` line of a git diff names two)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()
