"""A three-way merge over lines (diff3): a fix written against a base release, merged into the
host's file. No I/O.

The fix's changes are the diff's own (each run of removed and added lines of a hunk, placed
exactly at its line numbers in the base: `exact` checks that the diff applies to the base
as written). The host's changes are a diff of the base against the host's file (Myers'
shortest edit script). The merged file is the host's file with every fix change put in
where the host left the base's lines as they were: a fix change and a host change that
overlap or touch (no unchanged base line between them) are a conflict unless both make the
same change. Two files may be aligned in several equally short ways, and another tool may
choose another, so a change is taken to cover the lines it could slide over (`_reaches`) and
the merge is made four ways (`merge`) that must agree: where any way meets a conflict, the
merge is refused, reported with the base's, the host's and the fix's lines, never resolved
by a guess. `in_place` tells a host file that holds the fix already from one that conflicts
with it. Lines are compared exactly (indentation, trailing whitespace, line endings): in
Python whitespace is meaning.
"""

from __future__ import annotations

import bisect
import hashlib
from collections import Counter
from dataclasses import dataclass, field

from patchkit.edits.unified_diff import FilePatch
from patchkit.edits.unified_diff import line_body as _body

SHOWN = 12  # lines of each side a conflict message shows
BUDGET = 64  # edits a diff searches for a shortest script before it splits the search (at lines found once)
CONTEXT = 3  # lines around a fix change that another diff of the fix may align differently


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
    why: str = ""  # not a change of both sides: two ways to merge that disagree (base empty, start -1)

    def describe(self) -> str:
        def side(label: str, lines: tuple[str, ...]) -> str:
            shown = [f"  {label} | {line.rstrip(chr(10)).rstrip(chr(13))}" for line in lines[:SHOWN]]
            more = [f"  {label} | ... ({len(lines) - SHOWN} more lines)"] if len(lines) > SHOWN else []
            return "\n".join(shown + more) if lines else f"  {label} | (no lines)"

        if self.why:
            return (f"conflict at host line {self.host_start + 1}: {self.why}\n{side('one ', self.host)}\n"
                    f"{side('two ', self.fix)}")
        where = f"base line {self.start + 1}, host line {self.host_start + 1}"
        return (f"conflict at {where}: the host's file and the fix change the same lines\n"
                f"{side('base', self.base)}\n{side('host', self.host)}\n{side('fix ', self.fix)}")


@dataclass(frozen=True)
class Merged:
    lines: list[str] | None  # None: conflicts
    conflicts: tuple[Conflict, ...]
    host_changes: list[Change] = field(default_factory=list)  # base -> host, as this merge found them


class NotExact(Exception):
    """The diff does not apply to the base exactly as written."""


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


def changes_between(old: list[str], new: list[str], backward: bool = False) -> list[Change]:
    """The runs of lines that differ between `old` and `new` (a shortest edit script, Myers'
    algorithm, after the common head and tail are set aside). `backward`: the script found
    from the files' ends (where several are as short, it may choose another)."""
    a, b = _intern(old, new)
    return _changes(a, b, backward)


def _changes(a: list[int], b: list[int], backward: bool = False) -> list[Change]:
    """changes_between over lines as numbers (equal lines, equal numbers)."""
    n, m = len(a), len(b)
    if backward:
        return [Change(n - c.end, n - c.start, m - c.new_end, m - c.new_start)
                for c in reversed(_changes(a[::-1], b[::-1]))]
    head = 0
    while head < n and head < m and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < n - head and tail < m - head and a[n - 1 - tail] == b[m - 1 - tail]:
        tail += 1
    return [Change(s + head, e + head, ns + head, ne + head)
            for s, e, ns, ne in _myers(a[head:n - tail], b[head:m - tail])]


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
    """Matched (i, j) of a common subsequence: a longest one (Myers' greedy O((N+M)D) search)
    while the edit distance stays within BUDGET; past it (a file largely rewritten: the
    search's time grows with the square of the distance), the lines found once on each side,
    in the same order, split the search into parts, each searched the same way; a part no
    such line splits is searched to twice the budget, then left unmatched."""
    out: list[tuple[int, int]] = []
    _lcs(a, b, 0, len(a), 0, len(b), out)
    return out


def _lcs(a: list[int], b: list[int], lo_a: int, hi_a: int, lo_b: int, hi_b: int, out: list[tuple[int, int]]) -> None:
    """_lcs_pairs of a[lo_a:hi_a] and b[lo_b:hi_b], appended to `out` in order."""
    while lo_a < hi_a and lo_b < hi_b and a[lo_a] == b[lo_b]:
        out.append((lo_a, lo_b))
        lo_a, lo_b = lo_a + 1, lo_b + 1
    tail = 0
    while hi_a - tail > lo_a and hi_b - tail > lo_b and a[hi_a - 1 - tail] == b[hi_b - 1 - tail]:
        tail += 1
    hi_a, hi_b = hi_a - tail, hi_b - tail
    if lo_a < hi_a and lo_b < hi_b:
        part_a, part_b = a[lo_a:hi_a], b[lo_b:hi_b]
        found = _greedy(part_a, part_b, BUDGET)
        anchors = _unique_in_order(part_a, part_b) if found is None else []
        if found is None and not anchors:
            # no line to split at: a longer search, then, past it, the part counts as changed as a
            # whole (a merge then refuses a fix change inside it: never a guess, and bounded time)
            found = _greedy(part_a, part_b, 2 * BUDGET) or []
        if found is not None:
            out.extend((lo_a + i, lo_b + j) for i, j in found)
        else:
            pa, pb = lo_a, lo_b
            for i, j in anchors:
                i, j = lo_a + i, lo_b + j
                if i > pa and j > pb:  # most anchors follow one another: nothing between them
                    _lcs(a, b, pa, i, pb, j, out)
                out.append((i, j))
                pa, pb = i + 1, j + 1
            if hi_a > pa and hi_b > pb:
                _lcs(a, b, pa, hi_a, pb, hi_b, out)
    out.extend((hi_a + k, hi_b + k) for k in range(tail))


def _unique_in_order(a: list[int], b: list[int]) -> list[tuple[int, int]]:
    """The longest run, in order on both sides, of lines each side holds exactly once."""
    seen_a, seen_b = Counter(a), Counter(b)
    where_b = {y: j for j, y in enumerate(b) if seen_b[y] == 1}
    pairs = [(i, where_b[x]) for i, x in enumerate(a) if seen_a[x] == 1 and x in where_b]
    tails: list[int] = []  # patience sorting: the smallest j ending an increasing run of each length
    ends: list[int] = []  # index into pairs of that run's end
    back = [-1] * len(pairs)
    for k, (_, j) in enumerate(pairs):
        at = bisect.bisect_left(tails, j)
        back[k] = ends[at - 1] if at else -1
        if at == len(tails):
            tails.append(j)
            ends.append(k)
        else:
            tails[at], ends[at] = j, k
    out = []
    k = ends[-1] if ends else -1
    while k >= 0:
        out.append(pairs[k])
        k = back[k]
    out.reverse()
    return out


def _greedy(a: list[int], b: list[int], budget: int) -> list[tuple[int, int]] | None:
    """Myers' greedy search for a shortest edit script; None past `budget` edits. `v[mid + k]`
    is the furthest x reached on diagonal k; the trace keeps, per step d, the diagonals
    -(d+1)..d+1 it started from (what the way back reads)."""
    n, m = len(a), len(b)
    if n == 0 or m == 0:
        return []
    limit = min(n + m, budget)
    mid = limit + 1
    v = [0] * (2 * limit + 3)
    trace: list[list[int]] = []
    for d in range(limit + 1):
        trace.append(v[mid - d - 1:mid + d + 2])
        for k in range(-d, d + 1, 2):
            if k == -d or (k != d and v[mid + k - 1] < v[mid + k + 1]):
                x = v[mid + k + 1]
            else:
                x = v[mid + k - 1] + 1
            y = x - k
            while x < n and y < m and a[x] == b[y]:
                x += 1
                y += 1
            v[mid + k] = x
            if x >= n and y >= m:
                return _backtrack(trace, n, m)
    return None


def _backtrack(trace: list[list[int]], n: int, m: int) -> list[tuple[int, int]]:
    pairs: list[tuple[int, int]] = []
    x, y = n, m
    for d in range(len(trace) - 1, -1, -1):
        v, at = trace[d], d + 1  # v[at + k]: diagonal k before step d
        k = x - y
        if d == 0:
            while x > 0 and y > 0:
                x, y = x - 1, y - 1
                pairs.append((x, y))
            break
        prev_k = k + 1 if k == -d or (k != d and v[at + k - 1] < v[at + k + 1]) else k - 1
        prev_x = v[at + prev_k]
        prev_y = prev_x - prev_k
        while x > prev_x and y > prev_y:
            x, y = x - 1, y - 1
            pairs.append((x, y))
        x, y = prev_x, prev_y
    pairs.reverse()
    return pairs


def _slid(ranges: list[tuple[int, int]], lines: list[str]) -> list[tuple[int, int]]:
    """Per run of changed lines [s, e) of `lines` (sorted, apart): the lines it may cover when
    slid up or down over repeated lines, joining the runs it meets on the way (as diffs shift
    a change to put it at one place or another): the first and the last line it can reach."""
    out = []
    for idx, (start, end) in enumerate(ranges):
        if start == end:
            out.append((start, end))
            continue
        s, e, k = start, end, idx
        while True:  # down
            while k + 1 < len(ranges) and ranges[k + 1][0] <= e:
                e, k = max(e, ranges[k + 1][1]), k + 1
            if e < len(lines) and lines[s] == lines[e]:
                s, e = s + 1, e + 1
            else:
                break
        high = e
        s, e, k = start, end, idx
        while True:  # up
            while k > 0 and ranges[k - 1][1] >= s:
                s, k = min(s, ranges[k - 1][0]), k - 1
            if s > 0 and lines[s - 1] == lines[e - 1]:
                s, e = s - 1, e - 1
            else:
                break
        out.append((s, high))
    return out


def _reaches(changes: list[Change], base: list[str], other: list[str]) -> list[tuple[int, int]]:
    """The base lines each change may be said to cover: its own, and those it could slide over
    (a run of repeated lines, blank ones above all, lets a diff put the same change a few
    lines up or down, joined with a change nearby; another diff of the same files may choose
    another place). Changes of the two sides are told apart only when no such choice makes
    them meet."""
    taken = _slid([(c.start, c.end) for c in changes], base)
    put = _slid([(c.new_start, c.new_end) for c in changes], other)
    ends = [c.new_end for c in changes]

    def to_base(j: int, high: bool) -> int:
        """A position between lines of `other` as the base's (inside a change: its first base
        line, or for `high` its last)."""
        after = bisect.bisect_right(ends, j)  # the first change ending after j
        if after < len(changes) and changes[after].new_start < j:
            return changes[after].end if high else changes[after].start
        if after == 0:
            return j
        return j - (changes[after - 1].new_end - changes[after - 1].end)

    out = []
    for change, (t_lo, t_hi), (p_lo, p_hi) in zip(changes, taken, put):
        lo, hi = change.start, change.end
        if change.end > change.start:
            lo, hi = min(lo, t_lo), max(hi, t_hi)
        if change.new_end > change.new_start:
            lo, hi = min(lo, to_base(p_lo, False)), max(hi, to_base(p_hi, True))
        out.append((lo, hi))
    return out


def merge(base: list[str], host: list[str], fix: list[str], fix_changes: list[Change]) -> Merged:
    """The host's file with the fix's changes (base -> fix) put in; conflicts where they meet
    the host's own changes (base -> host): where they overlap or touch, as placed or as they
    could be placed (`_reaches`), unless both sides make the same change there. Two files can
    be aligned in several equally short ways, and another tool may choose another: the merge
    is made with the host's changes found from the start and from the end of the files, and
    with the fix's changes as the diff has them and as found here (from either end); it
    stands only when every way gives the same file (else it is refused as a conflict: never a guess)."""
    a, h, f = _intern(base, host, fix)
    first = _merge(base, host, fix, _changes(a, h), fix_changes)
    if first.lines is None:
        return first
    for host_changes, changes in ((_changes(a, h, backward=True), fix_changes),
                                  (first.host_changes, _near(a, f, fix_changes, False)),
                                  (first.host_changes, _near(a, f, fix_changes, True))):
        other = _merge(base, host, fix, host_changes, changes)
        if other.lines is None:
            return other
        if other.lines != first.lines:
            at = next((k for k, (x, y) in enumerate(zip(first.lines, other.lines)) if x != y),
                      min(len(first.lines), len(other.lines)))
            return Merged(None, (Conflict(-1, (), tuple(first.lines[at:at + SHOWN]), tuple(other.lines[at:at + SHOWN]),
                                          at, "the fix's changes fit the host's file in two ways, giving other lines "
                                              "from here"),))
    return first


def _near(a: list[int], f: list[int], fix_changes: list[Change], backward: bool) -> list[Change]:
    """The fix's changes as a diff here finds them: the fix differs from the base only at its
    changes, so only the base around each (CONTEXT lines either side) is compared with the
    fix's lines there."""
    windows: list[list[Change]] = []
    for change in fix_changes:
        if windows and change.start - CONTEXT <= windows[-1][-1].end + CONTEXT:
            windows[-1].append(change)
        else:
            windows.append([change])
    out: list[Change] = []
    for group in windows:
        lo, hi = max(0, group[0].start - CONTEXT), min(len(a), group[-1].end + CONTEXT)
        new_lo = group[0].new_start - (group[0].start - lo)
        new_hi = group[-1].new_end + (hi - group[-1].end)
        out.extend(Change(lo + c.start, lo + c.end, new_lo + c.new_start, new_lo + c.new_end)
                   for c in _changes(a[lo:hi], f[new_lo:new_hi], backward))
    return out


def in_place(base: list[str], host: list[str], fix: list[str], fix_changes: list[Change]) -> bool:
    """Does the host's file hold the fix exactly, where a merge of the fix into it conflicts (the
    host's own changes sit close to the fix's)? So when the fix taken out of it (the inverse
    merged) and put back in gives the host's file byte for byte."""
    held = set(host)
    if not all(line in held for c in fix_changes for line in fix[c.new_start:c.new_end]):
        return False  # a line the fix puts in is nowhere in the file
    inverse = [Change(c.new_start, c.new_end, c.start, c.end) for c in fix_changes]
    without = merge(fix, host, base, inverse)
    if without.lines is None or without.lines == host:
        return False
    return merge(base, without.lines, fix, fix_changes).lines == host


def _merge(base: list[str], host: list[str], fix: list[str], host_changes: list[Change],
           fix_changes: list[Change]) -> Merged:
    host_reach = _reaches(host_changes, base, host)
    fix_reach = _reaches(fix_changes, base, fix)
    out: list[str] = []
    conflicts: list[Conflict] = []
    i = j = 0
    copied = 0  # host lines before this are in `out`
    shift = 0  # host index minus base index, after the host changes passed so far
    while j < len(fix_changes):
        while i < len(host_changes) and host_reach[i][1] < fix_reach[j][0]:
            shift = host_changes[i].new_end - host_changes[i].end
            i += 1
        fs, hs = [fix_changes[j]], []
        reach = fix_reach[j][1]
        j += 1
        while True:  # a chunk: changes of either side that overlap or touch, transitively
            if i < len(host_changes) and host_reach[i][0] <= reach:
                hs.append(host_changes[i])
                reach = max(reach, host_reach[i][1])
                i += 1
            elif j < len(fix_changes) and fix_reach[j][0] <= reach:
                fs.append(fix_changes[j])
                reach = max(reach, fix_reach[j][1])
                j += 1
            else:
                break
        lo = min(c.start for c in (fs[0], *hs[:1]))
        hi = max(c.end for c in (fs[-1], *hs[-1:]))
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
        return Merged(None, tuple(conflicts), host_changes)
    out.extend(host[copied:])
    return Merged(out, (), host_changes)


def git_blob(data: bytes) -> str:
    """The id git gives a file's content (the `index` line of a git diff names two)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()
