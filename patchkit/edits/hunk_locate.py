"""Apply the hunks of one file's diff by meaning: where their lines are, not where they were.

For each hunk, in order, on the text as the earlier hunks left it:
1. the region: the scope named by the hunk's section (git writes the enclosing `class`/`def`
   line after the second `@@`), resolved with libcst to the qualified scopes of that name in
   this file; a hunk starts at or after that line and before the next `def`/`class` at the
   same or an outer indentation (where git would have named another). A section naming nothing in
   the file, or none given: the whole file.
2. the pre-image (context and removed lines) is looked for there, line by line, comparing
   each line with its whitespace collapsed: a function moved by hundreds of lines, or
   re-indented, is found all the same. Exactly one place: it is replaced by the post-image,
   re-indented to where it was found; context lines keep the file's bytes, added lines take
   the file's line ending. The pre-image gone and the post-image there: `already`. Two
   places: refused, naming both. Neither: `not_found`, naming the closest region and how
   similar it is (difflib's ratio over the lines).
Outside the hunks the text is kept byte for byte.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Literal

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from patchkit.edits.model import MODULE_SCOPE, Verdict
from patchkit.edits.unified_diff import DiffLine, FilePatch, Hunk

HunkVerdict = Literal["applied", "already", "not_found", "ambiguous"]


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


@dataclass(frozen=True)
class Scope:
    qualname: str
    kind: str  # "def" or "class"
    line: int  # 0-based index of the line holding its name
    indent: int  # columns before `def`/`class`
    end: int  # 0-based index of its last line


def norm(line: str) -> str:
    """A line compared by its words: indentation, trailing spaces and line endings aside."""
    return " ".join(line.split())


def split_lines(text: str) -> list[str]:
    """Lines with their endings; only \\n ends a line (\\f, \\x1c or U+2028 do not, as in Python)."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _eol(lines: list[str]) -> str:
    for line in lines:
        if line.endswith("\n"):
            return "\r\n" if line.endswith("\r\n") else "\n"
    return "\n"


def _indent(text: str) -> str:
    return text[: len(text) - len(text.lstrip(" \t"))]


class _Scopes(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.found: list[Scope] = []

    def _enter(self, node: cst.FunctionDef | cst.ClassDef, kind: str) -> None:
        name_pos = self.get_metadata(PositionProvider, node.name).start
        end = self.get_metadata(PositionProvider, node).end
        self.stack.append(node.name.value)
        self.found.append(Scope(".".join(self.stack), kind, name_pos.line - 1, 0, end.line - 1))

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._enter(node, "def")

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.stack.pop()

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._enter(node, "class")

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.stack.pop()


def scopes_of(text: str) -> list[Scope] | None:
    """Every def and class of the file, in source order; None when libcst cannot parse it."""
    try:
        module = cst.parse_module(text)
    except cst.ParserSyntaxError:
        return None
    visitor = _Scopes()
    MetadataWrapper(module, unsafe_skip_copy=True).visit(visitor)
    lines = split_lines(text)
    return [Scope(s.qualname, s.kind, s.line, len(_indent(lines[s.line])), s.end) for s in visitor.found]


def _section_name(section: str) -> tuple[str, str] | None:
    """`def _verify_args(self):` -> ("def", "_verify_args"); `class A(B):` -> ("class", "A")."""
    words = section.replace("(", " ( ").replace(":", " : ").split()
    if words[:1] == ["async"]:
        words = words[1:]
    if len(words) >= 2 and words[0] in ("def", "class") and words[1].isidentifier():
        return words[0], words[1]
    return None


class _Located:
    """One hunk against the current lines of the file."""

    def __init__(self, hunk: Hunk, lines: list[str], scopes: list[Scope] | None) -> None:
        self.hunk = hunk
        self.lines = lines
        self.keys = [norm(line) for line in lines]
        self.scopes = scopes or []
        self.note = ""
        self.regions = self._regions(scopes)

    def _regions(self, scopes: list[Scope] | None) -> list[tuple[int, int, str]] | None:
        """(first, last) 0-based indices where the hunk may start, with the scope's name."""
        named = _section_name(self.hunk.section) if self.hunk.section else None
        if named is None:
            return None
        kind, name = named
        if scopes is None:
            self.note = f" (the file does not parse, so `{self.hunk.section}` was not looked for)"
            return None
        matching = [s for s in scopes if s.kind == kind and s.qualname.rsplit(".", 1)[-1] == name]
        if not matching:
            self.note = f" (this file has no `{kind} {name}`: located by its lines alone)"
            return None
        wanted = norm(self.hunk.section)
        exact = [s for s in matching if norm(self.lines[s.line]).startswith(wanted)]
        regions = []
        for scope in exact or matching:
            later = [s.line for s in scopes if s.line > scope.line and s.indent <= scope.indent]
            # git names the def/class line before the hunk; some tools name the hunk's own first line
            regions.append((scope.line, (min(later) if later else len(self.lines)) - 1, scope.qualname))
        return regions

    def in_region(self, index: int) -> bool:
        return self.regions is None or any(first <= index <= last for first, last, _ in self.regions)

    def where(self) -> str:
        if self.regions is None:
            return "in the file"
        return "in " + " or ".join(sorted({name for _, _, name in self.regions}))

    def find(self, image: tuple[DiffLine, ...]) -> list[int]:
        """Start indices where `image` is, inside the hunk's region."""
        wanted = [norm(line.text) for line in image]
        size = len(wanted)
        if size == 0:
            return []
        ends_open = not image[-1].newline
        hits = []
        for start in range(len(self.keys) - size + 1):
            if self.keys[start] != wanted[0] or self.keys[start:start + size] != wanted:
                continue
            last = self.lines[start + size - 1]
            at_end = start + size == len(self.lines)
            if ends_open and not (at_end and not last.endswith("\n")):
                continue  # the hunk says the file ends here, without a newline
            if not ends_open and at_end and not last.endswith("\n"):
                continue
            if self.in_region(start):
                hits.append(start)
        return hits

    def scope_at(self, index: int) -> str:
        inside = [s for s in self.scopes if s.line < index <= s.end]
        return inside[-1].qualname if inside else MODULE_SCOPE

    def place(self, index: int) -> str:
        return f"line {index + 1} in {self.scope_at(index)}: `{self.lines[index].strip()[:70]}`"

    def closest(self) -> str:
        """The region most like the pre-image, and how alike (0..1), for a not_found message."""
        wanted = [norm(line.text) for line in self.hunk.pre]
        size = len(wanted)
        text = "\n".join(wanted)
        ranked: list[tuple[float, int]] = []
        for start in range(0, max(len(self.keys) - size + 1, 0)):
            if self.in_region(start):
                window = "\n".join(self.keys[start:start + size])
                ranked.append((difflib.SequenceMatcher(None, text, window, autojunk=False).quick_ratio(), start))
        best, best_at = 0.0, -1
        for _, start in sorted(ranked, reverse=True)[:12]:  # the full ratio only for the likeliest
            window = "\n".join(self.keys[start:start + size])
            ratio = difflib.SequenceMatcher(None, text, window, autojunk=False).ratio()
            if ratio > best or (ratio == best and start < best_at):
                best, best_at = ratio, start
        if best_at < 0:
            return "nothing like it " + self.where()
        text = f"closest: lines {best_at + 1}-{best_at + size} (similarity {best:.2f})"
        for offset, key in enumerate(wanted):
            if self.keys[best_at + offset] != key:
                at = best_at + offset
                found = self.lines[at].strip()[:60]
                text += f", where line {at + 1} in {self.scope_at(at)} is `{found}` and the hunk has `{key[:60]}`"
                break
        return text


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


def _locate(path: str, hunk: Hunk, lines: list[str], scopes: list[Scope] | None) -> tuple[HunkOutcome, int]:
    """What to do with one hunk: its outcome, and the index to apply it at (-1: nothing)."""
    located = _Located(hunk, lines, scopes)
    label = _label(path, hunk)
    if not hunk.pre:
        return HunkOutcome(hunk, "not_found", f"{label} has no context lines: it can only be placed by line "
                                              "number, which patchkit does not do (make the diff with context, "
                                              "e.g. diff -u or git diff)"), -1
    pre_hits = located.find(hunk.pre)
    post_hits = located.find(hunk.post)
    post_size = len(hunk.post)
    pending = [i for i in pre_hits if not any(j <= i and i + len(hunk.pre) <= j + post_size for j in post_hits)]
    if not pending and post_hits:
        return HunkOutcome(hunk, "already", f"hunk {hunk.number} already in place at line {post_hits[0] + 1}",
                           post_hits[0] + 1), -1
    if len(pending) == 1:
        at = pending[0]
        changed = at + _first_change(hunk)
        return HunkOutcome(hunk, "applied", f"hunk {hunk.number} at line {changed + 1} in "
                                            f"{located.scope_at(changed)}{located.note}", changed + 1), at
    if len(pending) > 1:
        places = "; ".join(f"{n}) {located.place(i)}" for n, i in enumerate(pending, 1))
        return HunkOutcome(hunk, "ambiguous", (
            f"{label} is ambiguous: its lines fit {len(pending)} places {located.where()}: {places}; nothing in "
            "the hunk tells them apart (give it more context lines, or a section header naming its def)")), -1
    return HunkOutcome(hunk, "not_found", (
        f"{label} starting {hunk.first_lines()}: not found {located.where()}{located.note}; "
        f"{located.closest()}")), -1


def _post_lines(hunk: Hunk, old: list[str], eol: str) -> list[str]:
    """The post-image to put where `old` (the matched pre-image lines) was: context lines are
    the file's own, added lines are re-indented from the hunk's indentation to the file's."""
    pre = hunk.pre
    base = next((k for k, line in enumerate(pre) if line.text.strip()), None)
    theirs = _indent(pre[base].text) if base is not None else ""
    ours = _indent(old[base]) if base is not None else ""
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
        if not text.strip():
            text = ""
        elif text.startswith(theirs):
            text = ours + text[len(theirs):]
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
    lines = split_lines(source)
    eol = _eol(lines)
    scopes = scopes_of(source)
    outcomes: list[HunkOutcome] = []
    for hunk in patch.hunks:
        outcome, at = _locate(path, hunk, lines, scopes)
        outcomes.append(outcome)
        if at >= 0:
            old = lines[at:at + len(hunk.pre)]
            new = _post_lines(hunk, old, eol)
            lines = lines[:at] + new + lines[at + len(hunk.pre):]
            if scopes is not None:  # the scopes after it move with the lines (no re-parse)
                delta = len(new) - len(old)
                scopes = [Scope(s.qualname, s.kind, s.line + delta if s.line > at else s.line, s.indent,
                                s.end + delta if s.end >= at else s.end) for s in scopes]
    return _verdict(path, source, "".join(lines), outcomes)


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


def _added(patch: FilePatch, path: str, source: str | None) -> FileOutcome:
    post = tuple(line for hunk in patch.hunks for line in hunk.post)
    if source is None:
        return FileOutcome("changed", _image_text(post, "\n"), f"{path}: created ({len(post)} lines)", ())
    if [norm(line) for line in split_lines(source)] == [norm(line.text) for line in post]:
        return FileOutcome("already", source, f"{path}: already in place (the file the diff adds exists)", ())
    return FileOutcome("not_found", source, f"{path}: the diff adds this file, but it exists with other content "
                                            f"({_similar(post, source)})", ())


def _deleted(patch: FilePatch, path: str, source: str) -> FileOutcome:
    pre = tuple(line for hunk in patch.hunks for line in hunk.pre)
    if [norm(line) for line in split_lines(source)] == [norm(line.text) for line in pre]:
        return FileOutcome("changed", None, f"{path}: deleted", ())
    return FileOutcome("not_found", source, f"{path}: the diff deletes this file, but it holds other content "
                                            f"({_similar(pre, source)}); not deleted", ())


def _similar(image: tuple[DiffLine, ...], source: str) -> str:
    ratio = difflib.SequenceMatcher(None, [norm(line.text) for line in image],
                                    [norm(line) for line in split_lines(source)], autojunk=False).ratio()
    return f"similarity {ratio:.2f}"
