"""Apply the hunks of one file's diff by meaning: where their lines are, not where they were.

Every hunk is placed against the file as it is (the diff's hunks never overlap in the file
they were made from), then the hunks that apply are spliced in from the bottom up, so no
hunk sees positions an earlier one moved. For each hunk:

1. the region: git writes after the second `@@` the last `def`/`class` line *above* the
   hunk's first line (any indentation: its Python function-name driver is textual). So the
   hunk starts at or after a line of the file that opens a def/class of that name, and at
   the latest on the next `def`/`class` line at the same or an outer indentation (a hunk
   whose first line opens a def is named after the def before it). Defs whose line starts
   with the header's text are tried first, then every def of that name, and the names a
   hunk of this same diff renames it from or to (a later hunk's header may name a def by the
   name it has on the other side); a def line the diff adds or removes does not end the
   area (on one side of the diff it is not there). A header naming nothing in the file, or
   none: the whole file (the message says so); naming a def line the diff itself adds or
   removes: that def's area, then the whole file.
2. the lines, by text first: the file's lines are indexed by their words; a hunk's
   candidates come from its rarest line, and each candidate is compared line by line where
   whitespace is meaning: indentation exactly (a hunk that only re-indents is a change),
   trailing whitespace and whitespace-only lines exactly. Only a removed line may differ in
   its inner runs of spaces (it goes, so the result is still byte for byte the diff's new
   side). The hunk at its own indentation first; only when it is nowhere there, at a
   uniform other indentation (a function moved into a class), added lines re-indented to it.
3. the verdict: the places holding the pre-image (context and removed lines; not inside a
   post-image) and those holding the post-image exactly (not inside such a pre-image). One
   place in all: `applied` there, or `already`. Several: the diff's hunks are in file order,
   so a place that no increasing order of all the hunks' places passes through is out; of
   identical places left, the one exactly at the header's line number; still several:
   `ambiguous`, naming each. None: `not_found`, naming the closest region (found from the
   hunk's rarer lines, within a work budget) and how similar it is. A hunk with less context
   before its change than after is held to the file's start, less after to its end (as
   patch(1) does).

Outside the hunks the text is kept byte for byte; context lines keep the file's bytes, added
lines take the file's line ending. Nothing is parsed: the scopes messages name come from
the def lines and indentation.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from patchkit.edits.model import MODULE_SCOPE, Verdict
from patchkit.edits.unified_diff import DiffLine, FilePatch, Hunk, split_lines
from patchkit.edits.unified_diff import line_body as _body

HunkVerdict = Literal["applied", "already", "not_found", "ambiguous"]

# git's Python function-name driver (userdiff.c), as it finds the line it writes after `@@`
_DEF_LINE = re.compile(r"^([ \t]*)(?:async[ \t]+)?(def|class)[ \t]+(\w+)")
COMMON_LINE = 64  # a line found more often than this says little about where a hunk is
CLOSEST_BUDGET = 200_000  # index entries the closest-region search may visit
LINE_RATIO_LIMIT = 400
CHAR_RATIO_LIMIT = 1_500  # above this many characters a similarity is computed over lines, not characters


@dataclass(frozen=True)
class HunkOutcome:
    hunk: Hunk
    verdict: HunkVerdict
    message: str
    line: int | None = None  # 1-based, where it was found (in the text it was applied to)


@dataclass(frozen=True)
class FileOutcome:
    verdict: Verdict
    source: str | None  # the new text; None: the file does not exist (deleted, or never added)
    message: str
    hunks: tuple[HunkOutcome, ...]
    # A `not_found` that is a refusal: the file is there, but the change would meet the file's
    # own (a three-way merge's conflict); the step fails on it, naming the file.
    refused: bool = False


def norm(line: str) -> str:
    """A line by its words: what the index is keyed by (never what decides a match)."""
    return " ".join(line.split())


def _eol(lines: list[str]) -> str:
    for line in lines:
        if line.endswith("\n"):
            return "\r\n" if line.endswith("\r\n") else "\n"
    return "\n"


def _indent(text: str) -> str:
    return text[: len(text) - len(text.lstrip(" \t"))]


def _shift(indent: str, delta: int) -> str | None:
    """`indent` moved by `delta` columns; None where that cannot be said (tabs, below zero)."""
    if delta == 0:
        return indent
    if "\t" in indent or len(indent) + delta < 0:
        return None
    return " " * (len(indent) + delta)


def _fits(text: str, body: str, delta: int, loose: bool) -> bool:
    """Is the file's line `body` the hunk's line `text` moved by `delta` columns? Indentation,
    trailing and whitespace-only lines exactly; `loose` (a removed line): inner runs aside."""
    indent = _indent(text)
    want = _shift(indent, delta) if text else ""
    if want is None or not body.startswith(want):
        return False
    rest, theirs = body[len(want):], text[len(indent):]
    if rest == theirs:
        return True
    if not loose or not theirs or rest[:1] in (" ", "\t"):
        return False
    return rest.split() == theirs.split() and rest[len(rest.rstrip()):] == theirs[len(theirs.rstrip()):]


@dataclass(frozen=True)
class DefLine:
    line: int  # 0-based
    indent: int
    kind: str  # "def" or "class"
    name: str


class FileText:
    """One file's lines, indexed by their text (indentation and trailing spaces aside), with
    its def/class lines found as git finds them, and the scopes messages name found from
    those lines and indentation (no parse: a file is placed in the time it takes to read)."""

    def __init__(self, source: str) -> None:
        self.source = source
        parts = source.split("\n")
        self.lines = [part + "\n" for part in parts[:-1]]
        if parts[-1]:
            self.lines.append(parts[-1])
        else:
            parts.pop()
        self.bodies = [part.removesuffix("\r") for part in parts]
        self.index: dict[str, list[int]] = {}
        self._loose: dict[str, list[int]] | None = None
        self._inner: list[int] | None = None
        self._qualnames: list[str] = []
        self.defs: list[DefLine] = []
        index = self.index
        for i, body in enumerate(self.bodies):
            key = body.strip()
            if key in index:
                index[key].append(i)
            else:
                index[key] = [i]
            if ("def" in key or "class" in key) and key.startswith(("def", "class", "async")):
                found = _DEF_LINE.match(body)
                if found and found.group(3).isidentifier():
                    self.defs.append(DefLine(i, len(found.group(1).expandtabs()), found.group(2), found.group(3)))

    def occurrences(self, text: str, loose: bool = False) -> list[int]:
        """Where a line of this text is; `loose`: its inner runs of whitespace aside too."""
        if not loose:
            return self.index.get(text.strip(), [])
        if self._loose is None:
            self._loose = {}
            for i, body in enumerate(self.bodies):
                self._loose.setdefault(norm(body), []).append(i)
        return self._loose.get(norm(text), [])

    def scope_at(self, index: int) -> str:
        """The def/class `index` is in, by qualified name: the def lines above it that each
        stand less indented than every line between (comments and closing brackets aside)."""
        if self._inner is None:
            self._inner = self._scopes()
        inner = self._inner[index]
        return self._qualnames[inner] if inner >= 0 else MODULE_SCOPE

    def _scopes(self) -> list[int]:
        """For every line, the innermost def/class open there (an index into _qualnames), in
        one pass: a line less indented than an open def closes it."""
        at_line = {d.line: d for d in self.defs}
        stack: list[tuple[int, int]] = []  # (indent, index into _qualnames)
        inner: list[int] = []
        for i, body in enumerate(self.bodies):
            key = body.lstrip()
            if key and key[0] not in "#)]}":
                lead = body[:len(body) - len(key)]
                indent = len(lead.expandtabs()) if "\t" in lead else len(lead)
                while stack and stack[-1][0] >= indent:
                    stack.pop()
                inner.append(stack[-1][1] if stack else -1)
                found = at_line.get(i)
                if found is not None:
                    outer = self._qualnames[stack[-1][1]] + "." if stack else ""
                    self._qualnames.append(outer + found.name)
                    stack.append((indent, len(self._qualnames) - 1))
            else:
                inner.append(stack[-1][1] if stack else -1)
        return inner

    def qualname_at(self, line: int, name: str) -> str:
        outer = self.scope_at(line)
        return name if outer == MODULE_SCOPE else f"{outer}.{name}"

    def place(self, index: int) -> str:
        return f"line {index + 1} in {self.scope_at(index)}: `{self.bodies[index].strip()[:70]}`"


def _section_name(section: str) -> tuple[str, str] | None:
    """`def _verify_args(self):` -> ("def", "_verify_args"); `class A(B):` -> ("class", "A")."""
    found = _DEF_LINE.match(section)
    if found and found.group(3).isidentifier():
        return found.group(2), found.group(3)
    return None


def changed_defs(patch: FilePatch) -> set[str]:
    """The def/class lines this diff adds or removes, by their words."""
    return {norm(line.text) for hunk in patch.hunks for line in hunk.lines
            if line.tag != " " and _DEF_LINE.match(line.text)}


def renamed(patch: FilePatch) -> dict[str, set[str]]:
    """Names a def/class has on either side of this diff: within each run of removed and added
    lines, the n-th removed def line and the n-th added one of the same kind are one def."""
    names: dict[str, set[str]] = {}
    for hunk in patch.hunks:
        removed: list[tuple[str, str]] = []
        added: list[tuple[str, str]] = []
        for line in hunk.lines + (DiffLine(" ", ""),):
            if line.tag == " ":
                for (kind, old), (kind2, new) in zip(removed, added):
                    if kind == kind2 and old != new:
                        names.setdefault(old, set()).add(new)
                        names.setdefault(new, set()).add(old)
                removed, added = [], []
                continue
            named = _section_name(line.text)
            if named:
                (removed if line.tag == "-" else added).append(named)
    return names


Region = Callable[[int], bool]


def _ANYWHERE(start: int) -> bool:
    return True



class _Regions:
    """Where one hunk may start, as tiers tried in order (each a test and a name for messages)."""

    def __init__(self, hunk: Hunk, text: FileText, aliases: dict[str, set[str]], moved: set[str]) -> None:
        self.note = ""
        self.moved = moved
        self.tiers: list[tuple[Region, str]] = []
        named = _section_name(hunk.section) if hunk.section else None
        if named is None:
            self.tiers.append((_ANYWHERE, "in the file"))
            return
        kind, name = named
        wanted = {name} | aliases.get(name, set())
        matching = [d for d in text.defs if d.kind == kind and d.name in wanted]
        if not matching:
            self.note = f" (this file has no `{kind} {name}`: located by its lines alone)"
            self.tiers.append((_ANYWHERE, "in the file"))
            return
        header = norm(hunk.section)
        exact = [d for d in matching if norm(text.bodies[d.line]).startswith(header)]
        if exact:
            self.tiers.append(self._tier(exact, text))
        if len(matching) > len(exact):
            self.tiers.append(self._tier(matching, text))
        if any(line.startswith(header) for line in moved):
            # the diff itself adds or removes that def line: on one of its sides it is elsewhere
            self.tiers.append((_ANYWHERE, "in the file"))

    def _tier(self, defs: list[DefLine], text: FileText) -> tuple[Region, str]:
        spans = []
        for found in defs:
            # a def line this diff adds or removes may stand between on one side and not the other
            later = (d.line for d in text.defs if d.line > found.line and d.indent <= found.indent
                     and norm(text.bodies[d.line]) not in self.moved)
            spans.append((found.line, next(later, len(text.lines) - 1)))
        names = sorted({text.qualname_at(d.line, d.name) for d in defs})
        return (lambda start: any(first <= start <= last for first, last in spans)), "in " + " or ".join(names)


def _edges(hunk: Hunk) -> tuple[bool, bool]:
    """(at the file's start, at its end): a hunk with less context before its change than
    after it is at the start of the file, one with less after than before at its end (what
    patch(1) and git apply hold to: the diff was cut there by the file's edge)."""
    changed = [k for k, line in enumerate(hunk.lines) if line.tag != " "]
    if not changed:
        return False, False
    before, after = changed[0], len(hunk.lines) - 1 - changed[-1]
    return before < after, after < before


def _find(text: FileText, image: tuple[DiffLine, ...], region: Region, shifted: bool,
          loose: bool, edges: tuple[bool, bool] = (False, False)) -> list[tuple[int, int]]:
    """(start, delta) of every place in `region` holding `image`: at the hunk's own
    indentation, or (`shifted`) at one other indentation for all of its lines. `loose`: its
    removed lines may differ in inner runs of whitespace. `edges`: held to the file's start
    or end."""
    size = len(image)
    if size == 0 or size > len(text.lines):
        return []
    exact = [k for k in range(size) if not (loose and image[k].tag == "-")]
    if exact:  # the candidates from its rarest line compared exactly
        anchor = min(exact, key=lambda k: (not image[k].text.strip(), len(text.occurrences(image[k].text))))
        places = text.occurrences(image[anchor].text)
    else:
        anchor = min(range(size), key=lambda k: len(text.occurrences(image[k].text, loose=True)))
        places = text.occurrences(image[anchor].text, loose=True)
    first = next((k for k in range(size) if image[k].text.strip()), None)
    ends_open = not image[-1].newline
    bodies, total = text.bodies, len(text.lines)
    hits = []
    for i in places:
        start = i - anchor
        if start < 0 or start + size > total or not region(start):
            continue
        if (edges[0] and start != 0) or (edges[1] and start + size != total):
            continue
        delta = 0
        if first is not None:
            theirs, ours = _indent(image[first].text), _indent(bodies[start + first])
            if "\t" in theirs + ours and ours != theirs:
                continue  # tabs: no column arithmetic
            delta = len(ours) - len(theirs)
        if (delta != 0) != shifted:
            continue
        if not all(_fits(line.text, bodies[start + k], delta, loose and line.tag == "-")
                   for k, line in enumerate(image)):
            continue
        last, at_end = text.lines[start + size - 1], start + size == total
        if ends_open != (at_end and not last.endswith("\n")):
            continue  # the hunk says whether the file ends here without a newline
        hits.append((start, delta))
    return hits


@dataclass(frozen=True)
class _Candidate:
    start: int
    delta: int
    applies: bool  # True: the pre-image is there (apply); False: the post-image is (already)


@dataclass(frozen=True)
class _Placed:
    outcome: HunkOutcome
    start: int = -1  # where its pre-image is replaced; -1: nothing to do
    delta: int = 0
    at: int = -1  # where it was decided to be (applied or already): an anchor for its neighbours
    candidates: tuple[_Candidate, ...] = ()  # an ambiguous hunk's places
    shifted: bool = False


def _first_change(hunk: Hunk) -> int:
    """Where in the pre-image the change begins: its first removed line, or the line an
    addition follows (what a message names as the hunk's place)."""
    k = 0
    for line in hunk.lines:
        if line.tag == "-":
            return k
        if line.tag == "+":
            return max(k - 1, 0)
        k += 1
    return 0


def _label(path: str, hunk: Hunk) -> str:
    return f"{path} hunk {hunk.number} `{hunk.header}`"


def _decided(hunk: Hunk, text: FileText, one: _Candidate, note: str, why: str = "") -> _Placed:
    if one.applies:
        changed = one.start + _first_change(hunk)
        return _Placed(HunkOutcome(hunk, "applied", f"hunk {hunk.number} at line {changed + 1} in "
                                                    f"{text.scope_at(changed)}{note}{why}", changed + 1),
                       one.start, one.delta, one.start)
    return _Placed(HunkOutcome(hunk, "already", f"hunk {hunk.number} already in place at line {one.start + 1}{why}",
                               one.start + 1), at=one.start)


def _whole_file(hunk: Hunk, text: FileText, label: str) -> _Placed | None:
    """A hunk of an empty file (`@@ -0,0 +1,N @@`, or all lines removed: `+0,0`)."""
    if not hunk.pre and hunk.old_start == 0:
        if not text.lines:
            return _Placed(HunkOutcome(hunk, "applied", f"hunk {hunk.number} fills the empty file", 1), 0, 0, 0)
        if _holds(text.source, hunk.post):
            return _Placed(HunkOutcome(hunk, "already", f"hunk {hunk.number} already in place (the whole file)", 1),
                           at=0)
        return _Placed(HunkOutcome(hunk, "not_found", f"{label} fills an empty file, and this one is not empty"))
    if not hunk.post and hunk.new_start == 0 and not text.lines:
        return _Placed(HunkOutcome(hunk, "already", f"hunk {hunk.number} already in place (the file is empty)", 1),
                       at=0)
    return None


def _locate(path: str, hunk: Hunk, text: FileText, aliases: dict[str, set[str]], moved: set[str]) -> _Placed:
    label = _label(path, hunk)
    whole = _whole_file(hunk, text, label)
    if whole is not None:
        return whole
    if not hunk.pre:
        return _Placed(HunkOutcome(hunk, "not_found", (
            f"{label} has no context lines: it can only be placed by line number, which patchkit does not do "
            "(make the diff with context, e.g. diff -u or git diff)")))
    regions = _Regions(hunk, text, aliases, moved)
    pre_size, post_size = len(hunk.pre), len(hunk.post)
    edges = _edges(hunk)
    for region, where in regions.tiers:
        for shifted in (False, True):
            pre_hits = _find(text, hunk.pre, region, shifted, loose=True, edges=edges)
            post_hits = _find(text, hunk.post, region, shifted, loose=False, edges=edges)
            if not pre_hits and not post_hits:
                continue
            pending = [_Candidate(i, d, True) for i, d in pre_hits
                       if not any(j <= i and i + pre_size <= j + post_size for j, _ in post_hits)]
            # a post-image inside a pending pre-image (a hunk that only removes lines) is that place
            there = [_Candidate(j, d, False) for j, d in post_hits
                     if not any(i <= j and j + post_size <= i + pre_size for i in (c.start for c in pending))]
            if len(pending) + len(there) == 1:
                return _decided(hunk, text, (pending + there)[0], regions.note)
            return _ambiguous(hunk, label, text, pending, there, where, shifted)
    where = regions.tiers[-1][1]
    return _Placed(HunkOutcome(hunk, "not_found", (
        f"{label} starting {hunk.first_lines()}: not found {where}{regions.note}; "
        f"{_closest(text, hunk.pre, regions.tiers[-1][0], where)}")))


def _ambiguous(hunk: Hunk, label: str, text: FileText, pending: list[_Candidate], there: list[_Candidate], where: str,
               shifted: bool) -> _Placed:
    parts = []
    if pending:
        parts.append(f"its lines fit {len(pending)} place{'s' if len(pending) > 1 else ''}")
    if there:
        parts.append(f"its new lines are already at {len(there)} place{'s' if len(there) > 1 else ''}")
    places = "; ".join(f"{n}) {text.place(c.start)}{'' if c.applies else ' (already)'}"
                       for n, c in enumerate(pending + there, 1))
    return _Placed(HunkOutcome(hunk, "ambiguous", (
        f"{label} is ambiguous: {' and '.join(parts)} {where}{' (each re-indented)' if shifted else ''}: "
        f"{places}; nothing in the hunk tells them apart (give it more context lines, or a section header "
        "naming its def)")), candidates=tuple(pending + there), shifted=shifted)


def _closest(text: FileText, pre: tuple[DiffLine, ...], region: Region, where: str) -> str:
    """The region most like the pre-image, and how alike (0..1), for a not_found message.
    Bounded: starts are voted for by the hunk's lines that the file holds (lines found more
    than COMMON_LINE times vote not), within CLOSEST_BUDGET index entries; only the likeliest
    dozen are compared in full."""
    size, total = len(pre), len(text.lines)
    votes: Counter[int] = Counter()
    budget = CLOSEST_BUDGET
    order = sorted(range(size), key=lambda k: len(text.occurrences(pre[k].text)))
    for k in order:
        if not pre[k].text.strip():
            continue
        hits = text.occurrences(pre[k].text)
        if len(hits) > COMMON_LINE or budget < len(hits):
            break
        budget -= len(hits)
        for i in hits:
            start = min(max(i - k, 0), max(total - size, 0))
            if region(start):
                votes[start] += 1
    if not votes:
        if any(len(text.occurrences(line.text)) > COMMON_LINE for line in pre if line.text.strip()):
            return f"its lines are only ones found everywhere (more than {COMMON_LINE} times) {where}"
        return f"no line of the hunk is {where}"
    wanted = [norm(line.text) for line in pre]
    joined = "\n".join(wanted)
    best, best_at = -1.0, -1
    for start, _ in sorted(votes.items(), key=lambda item: (-item[1], item[0]))[:12]:
        keys = [norm(body) for body in text.bodies[start:start + size]]
        if len(joined) <= CHAR_RATIO_LIMIT:
            ratio = difflib.SequenceMatcher(None, joined, "\n".join(keys), autojunk=False).ratio()
        else:
            # lines, with difflib's junk rule: blank lines and `)` found everywhere match nothing;
            # past LINE_RATIO_LIMIT lines the lines in common, in any order (linear time)
            matcher = difflib.SequenceMatcher(None, wanted, keys)
            ratio = matcher.ratio() if size <= LINE_RATIO_LIMIT else matcher.quick_ratio()
        if ratio > best or (ratio == best and start < best_at):
            best, best_at = ratio, start
    end = min(best_at + size, total)
    message = f"closest: lines {best_at + 1}-{end} (similarity {best:.2f})"
    for offset, line in enumerate(pre):
        at = best_at + offset
        if at >= total:
            break
        if not _fits(line.text, text.bodies[at], 0, line.tag == "-"):
            found = text.bodies[at].strip()[:60]
            message += f", where line {at + 1} in {text.scope_at(at)} is `{found}` and the hunk has `{line.text.strip()[:60]}`"
            if norm(text.bodies[at]) == norm(line.text):
                message += " (they differ in whitespace only: indentation or trailing spaces are meaning)"
            break
    return message


def _post_lines(hunk: Hunk, old: list[str], eol: str, delta: int) -> list[str]:
    """The post-image to put where `old` (the matched pre-image lines) was: context lines are
    the file's own; added lines exactly as the diff has them, moved by `delta` columns (where
    the hunk was found re-indented), whitespace-only ones included."""
    out: list[str] = []
    k = 0  # position in the pre-image
    for line in hunk.lines:
        if line.tag == "-":
            k += 1
            continue
        if line.tag == " ":
            out.append(old[k])
            k += 1
            continue
        text = line.text
        indent = _indent(text)
        moved = _shift(indent, delta) if text else ""
        if moved is not None:
            text = moved + text[len(indent):]
        out.append(text + (eol if line.newline else ""))
    return out


def apply_file_patch(patch: FilePatch, path: str, source: str | None) -> FileOutcome:
    """Apply every hunk of one file's diff to `source` (None: the file does not exist)."""
    if patch.added:
        return _added(patch, path, source)
    if source is None:
        if patch.deleted:
            return FileOutcome("already", None, f"{path}: already deleted", ())
        return FileOutcome("not_found", None, f"{path}: no such file (the diff changes it)", ())
    if patch.deleted:
        return _deleted(patch, path, source)
    text = FileText(source)
    aliases, moved = renamed(patch), changed_defs(patch)
    placed = _by_order([_locate(path, hunk, text, aliases, moved) for hunk in patch.hunks], text)
    placed = _refuse_overlaps(path, placed)
    eol = _eol(text.lines)
    lines = list(text.lines)
    for one in sorted((p for p in placed if p.start >= 0), key=lambda p: p.start, reverse=True):
        size = len(one.outcome.hunk.pre)
        lines[one.start:one.start + size] = _post_lines(one.outcome.hunk, lines[one.start:one.start + size],
                                                        eol, one.delta)
    return _verdict(path, source, "".join(lines), [p.outcome for p in placed])


def _by_order(placed: list[_Placed], text: FileText) -> list[_Placed]:
    """A diff's hunks are in file order: an ambiguous hunk's place is one that some increasing
    order of every placed hunk's places passes through (found greedily from both ends); one
    such place alone decides it. Decided hunks out of that order leave the rest undecided.
    Where the same lines stand twice in that order, the one exactly at the line the hunk's
    header names (the old side's for a pre-image, the new side's for a post-image) decides;
    a line number alone never places a hunk whose lines are not there."""
    chain = [n for n, p in enumerate(placed) if p.at >= 0 or p.candidates]
    places = {n: sorted(c.start for c in placed[n].candidates) if placed[n].candidates else [placed[n].at]
              for n in chain}
    low: dict[int, int] = {}
    bound = -1
    for n in chain:  # the least place each hunk can have, its predecessors placed as low as they can
        bound = next((c for c in places[n] if c > bound), len(text.lines) + 1)
        low[n] = bound
    high: dict[int, int] = {}
    bound = len(text.lines) + 1
    for n in reversed(chain):
        bound = next((c for c in reversed(places[n]) if c < bound), -2)
        high[n] = bound
    out = list(placed)
    for n in chain:
        one = placed[n]
        if not one.candidates:
            continue
        before = max((low[m] for m in chain if m < n), default=-1)
        after = min((high[m] for m in chain if m > n), default=len(text.lines) + 1)
        hunk = one.outcome.hunk
        fits = [c for c in one.candidates if before < c.start < after]
        why = f" (of its {len(one.candidates)} places the only one in the order of the diff's hunks"
        if len(fits) > 1:  # the same lines twice: the one exactly at the line the header names
            fits = [c for c in fits if c.start == (hunk.old_start if c.applies else hunk.new_start) - 1]
            why += " exactly at the line its header names"
        if len(fits) == 1:
            out[n] = _decided(hunk, text, fits[0], "", why + f"{', re-indented' if one.shifted else ''})")
    return out


def _refuse_overlaps(path: str, placed: list[_Placed]) -> list[_Placed]:
    """Two hunks placed on the same lines (possible only where the file is not the diff's
    old side): the later one is refused, naming the other."""
    out: list[_Placed] = []
    for one in placed:
        size = len(one.outcome.hunk.pre)
        clash = next((o for o in out if o.start >= 0 and one.start >= 0 and
                      one.start < o.start + len(o.outcome.hunk.pre) and o.start < one.start + size), None)
        if clash is not None:
            one = _Placed(HunkOutcome(one.outcome.hunk, "ambiguous", (
                f"{_label(path, one.outcome.hunk)} fits lines {one.start + 1}-{one.start + size} only where hunk "
                f"{clash.outcome.hunk.number} is placed too: the file is not what the diff was made from there")))
        out.append(one)
    return out


def _verdict(path: str, source: str, new: str, outcomes: list[HunkOutcome]) -> FileOutcome:
    failed = [o for o in outcomes if o.verdict in ("not_found", "ambiguous")]
    applied = [o for o in outcomes if o.verdict == "applied"]
    already = [o for o in outcomes if o.verdict == "already"]
    count = f"{len(outcomes)} hunk{'s' if len(outcomes) != 1 else ''}"
    if failed:
        good = [o for o in outcomes if o not in failed]
        rest = f"; the other {len(good)} would apply or are in place" if good else ""
        return FileOutcome("not_found", source, "; ".join(o.message for o in failed) + rest, tuple(outcomes))
    if not applied:
        return FileOutcome("already", source, f"{path}: already in place ({count})", tuple(outcomes))
    message = f"{path}: applied " + ", ".join(o.message for o in applied)
    if already:
        message += "; already in place: hunk" + ("s " if len(already) > 1 else " ") + ", ".join(
            str(o.hunk.number) for o in already)
    return FileOutcome("changed", new, message, tuple(outcomes))


def _image_text(image: tuple[DiffLine, ...], eol: str) -> str:
    return "".join(line.text + (eol if line.newline else "") for line in image)


def _holds(source: str, image: tuple[DiffLine, ...]) -> bool:
    """Is `source` exactly `image` (its line endings aside: a CRLF file is the same file)?"""
    lines = split_lines(source)
    return len(lines) == len(image) and all(
        _body(line) == want.text and line.endswith("\n") == want.newline for line, want in zip(lines, image))


def _added(patch: FilePatch, path: str, source: str | None) -> FileOutcome:
    post = tuple(line for hunk in patch.hunks for line in hunk.post)
    if source is None:
        return FileOutcome("changed", _image_text(post, "\n"), f"{path}: created ({len(post)} lines)", ())
    if _holds(source, post):
        return FileOutcome("already", source, f"{path}: already in place (the file the diff adds exists)", ())
    return FileOutcome("not_found", source, f"{path}: the diff adds this file, but it exists with other content "
                                            f"({_similar(post, source)})", ())


def _deleted(patch: FilePatch, path: str, source: str) -> FileOutcome:
    pre = tuple(line for hunk in patch.hunks for line in hunk.pre)
    if _holds(source, pre):
        return FileOutcome("changed", None, f"{path}: deleted", ())
    return FileOutcome("not_found", source, f"{path}: the diff deletes this file, but it holds other content "
                                            f"({_similar(pre, source)}); not deleted", ())


def _similar(image: tuple[DiffLine, ...], source: str) -> str:
    matcher = difflib.SequenceMatcher(None, [line.text for line in image],
                                      [_body(line) for line in split_lines(source)], autojunk=False)
    ratio = matcher.ratio() if len(image) <= 5_000 else matcher.quick_ratio()
    return f"similarity {ratio:.2f}"
