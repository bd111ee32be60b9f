"""Unified diffs (git's and plain `diff -u`'s) as data: files, hunks, lines. No I/O, no libcst.

What is read: `--- a/x` / `+++ b/x` headers (a tab and a timestamp after the name are
dropped), `@@ -a,b +c,d @@ section` hunk headers (the section is what git writes after the
second `@@`: the enclosing `class`/`def` line), ` `, `-`, `+` lines and `\\ No newline at
end of file`. `/dev/null` (or git's `new file mode` / `deleted file mode`) makes an added or
a deleted file; an empty file git adds or deletes has no `---`/`+++` and no hunk, only its
`diff --git` line and mode: it is read from those. Names git quotes (`"a/caf\\303\\251.py"`:
C escapes, UTF-8 bytes in octal) are unquoted. Anything else between file sections (a commit
message) is skipped; git's `index` line is kept (the blob ids of both sides). `reversed_diff`
turns a diff into the one that undoes it. Refused with a message naming the diff line:
renames and copies (a patch step edits files in place), binary patches, a hunk whose lines do not add up to its
header's counts, a file named twice.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from patchkit.edits.model import EditError

Tag = Literal[" ", "-", "+"]
DEV_NULL = "/dev/null"

_Fail = Callable[[int, str], "DiffError"]
_INDEX = re.compile(r"^index ([0-9a-f]{7,64})\.\.([0-9a-f]{7,64})(?: [0-7]{6})?$")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@ ?(.*)$")


class DiffError(EditError):
    """The diff cannot be read, or asks for something a patch step does not do (a rename)."""


@dataclass(frozen=True)
class DiffLine:
    tag: Tag
    text: str  # without its line ending
    newline: bool = True  # False: `\ No newline at end of file` follows it


@dataclass(frozen=True)
class Hunk:
    number: int  # 1-based, within its file
    old_start: int
    old_len: int
    new_start: int
    new_len: int
    section: str  # git's enclosing `class`/`def` line, "" when the diff has none
    lines: tuple[DiffLine, ...]

    @property
    def header(self) -> str:
        old = f"{self.old_start},{self.old_len}"
        new = f"{self.new_start},{self.new_len}"
        return f"@@ -{old} +{new} @@" + (f" {self.section}" if self.section else "")

    @property
    def pre(self) -> tuple[DiffLine, ...]:
        """What the file holds before the change: context and removed lines."""
        return tuple(line for line in self.lines if line.tag != "+")

    @property
    def post(self) -> tuple[DiffLine, ...]:
        """What it holds after: context and added lines."""
        return tuple(line for line in self.lines if line.tag != "-")

    def first_lines(self, count: int = 2) -> str:
        shown = [line.text.strip() for line in self.pre if line.text.strip()][:count]
        if not shown:
            shown = [line.text.strip() for line in self.post if line.text.strip()][:count]
        return " / ".join(f"`{text[:70]}`" for text in shown)


@dataclass(frozen=True)
class FilePatch:
    old_path: str  # as written in the diff (DEV_NULL for an added file)
    new_path: str
    hunks: tuple[Hunk, ...]
    line: int  # of its `---` header in the diff (1-based)
    index: tuple[str, str] | None = None  # git's `index OLD..NEW` blob ids (abbreviated), when it wrote one

    @property
    def added(self) -> bool:
        return self.old_path == DEV_NULL

    @property
    def deleted(self) -> bool:
        return self.new_path == DEV_NULL

    def path(self, strip: int) -> str:
        """The file's path with `strip` leading components removed, like `patch -pN`."""
        return strip_path(self.old_path if self.deleted else self.new_path, strip)


@dataclass(frozen=True)
class ParsedDiff:
    files: tuple[FilePatch, ...]


def split_lines(text: str) -> list[str]:
    """Lines with their endings; only \\n ends a line (\\f, \\x1c or U+2028 do not, as in Python)."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def line_body(line: str) -> str:
    """A line without its ending (\\n or \\r\\n): what a diff line's text is compared with."""
    if line.endswith("\r\n"):
        return line[:-2]
    return line.removesuffix("\n")


def strip_path(path: str, strip: int) -> str:
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if strip >= len(parts):
        raise DiffError(f"path {path} has {len(parts)} components: strip {strip} leaves no file name")
    return "/".join(parts[strip:])


def module_of(relpath: str) -> str:
    """`vllm/config/speculative.py` -> `vllm.config.speculative`; a package's `__init__.py` is
    the package. Only Python modules: a patch step edits Python source."""
    if not relpath.endswith(".py"):
        raise DiffError(f"{relpath} is not a Python module (.py): a patch step edits Python source")
    parts = relpath[:-3].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if not parts or not all(p.isidentifier() for p in parts):
        raise DiffError(f"{relpath} is not the path of an importable module")
    return ".".join(parts)


def _name(header: str) -> str:
    """`--- a/x.py\t2024-01-01 ...` -> `a/x.py`; git's quoted names (`"a/caf\\303\\251.py"`) unquoted."""
    name = header[4:]
    if name.startswith('"'):
        quoted, _ = _quoted(name)
        if quoted is not None:
            return quoted
    return name.split("\t", 1)[0] if "\t" in name else name.rstrip()


_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


def _quoted(text: str) -> tuple[str | None, str]:
    """A name as git quotes one (C escapes, bytes as octal `\\303`, UTF-8) at the start of
    `text`: (the name, what follows it); (None, text) when it is not one."""
    out = bytearray()
    i = 1
    while i < len(text):
        char = text[i]
        if char == '"':
            try:
                return out.decode("utf-8"), text[i + 1:]
            except UnicodeDecodeError:
                return None, text
        if char == "\\" and i + 1 < len(text):
            follow = text[i + 1]
            if follow in _ESCAPES:
                out.append(_ESCAPES[follow])
                i += 2
                continue
            digits = text[i + 1:i + 4]
            if len(digits) == 3 and all(d in "01234567" for d in digits):
                out.append(int(digits, 8) & 0xFF)
                i += 4
                continue
            return None, text
        out.extend(char.encode("utf-8"))
        i += 1
    return None, text


def _git_names(rest: str) -> tuple[str, str] | None:
    """The two names of `diff --git a/x b/x` (either may be quoted); None when unclear."""
    if rest.startswith('"'):
        old, after = _quoted(rest)
        if old is None or not after.startswith(" "):
            return None
        after = after[1:]
        new = _quoted(after)[0] if after.startswith('"') else after
        return (old, new) if new else None
    if rest.endswith('"'):
        cut = rest.rfind(' "')
        new = _quoted(rest[cut + 1:])[0] if cut > 0 else None
        return (rest[:cut], new) if new else None
    half = (len(rest) - 1) // 2  # no rename: both names the same length, one space between
    if rest[half:half + 1] == " " and rest[:half].split("/", 1)[-1] == rest[half + 1:].split("/", 1)[-1]:
        return rest[:half], rest[half + 1:]
    return None


@dataclass
class _Git:
    """What git's extended headers said about the next file."""

    line: int = 0
    rename: str = ""
    binary: bool = False
    names: tuple[str, str] | None = None
    mode: str = ""  # "new" or "deleted": git writes no `---`/`+++` for an empty file
    index: tuple[str, str] | None = None
    seen: list[str] = field(default_factory=list)


def parse_diff(text: str, source: str = "the diff") -> ParsedDiff:
    """Read a unified diff; DiffError naming `source` and the line on anything unreadable."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    lines = [line.removesuffix("\r") for line in lines]
    files: list[FilePatch] = []
    git = _Git()
    i = 0

    def fail(at: int, why: str) -> DiffError:
        return DiffError(f"{source} line {at + 1}: {why}")

    def empty_file() -> None:
        """The section git writes for an empty file it adds or deletes: headers, no hunks."""
        if not git.mode:
            return
        if git.names is None:
            raise fail(git.line, "cannot read the file names of this `diff --git` line")
        old, new = (DEV_NULL, git.names[1]) if git.mode == "new" else (git.names[0], DEV_NULL)
        named = new if old == DEV_NULL else old
        if any(named in (f.old_path, f.new_path) for f in files):
            raise fail(git.line, f"{named} is patched twice in one diff: merge its hunks into one section")
        files.append(FilePatch(old, new, (), line=git.line + 1, index=git.index))

    while i < len(lines):
        line = lines[i]
        if line.startswith("diff --git "):
            if git.rename:
                raise fail(git.line, f"renames are not supported ({git.rename}): a patch step edits files in place")
            empty_file()
            git = _Git(line=i, names=_git_names(line[len("diff --git "):]))
        elif line.startswith(("new file mode ", "deleted file mode ")):
            git.mode = "new" if line.startswith("new") else "deleted"
        elif line.startswith("index ") and _INDEX.match(line):
            found = _INDEX.match(line)
            assert found is not None
            git.index = (found.group(1), found.group(2))
        elif line.startswith(("rename from ", "rename to ", "copy from ", "copy to ")):
            git.rename = git.rename or line
        elif line.startswith("GIT binary patch") or (line.startswith("Binary files ") and line.endswith(" differ")):
            raise fail(i, "a binary patch: patch steps edit Python source")
        elif line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            old, new, header_at = _name(line), _name(lines[i + 1]), i
            if git.mode and git.names is not None and git.names[0] != old and git.names[1] != new:
                empty_file()  # that `diff --git` section was an empty file; these headers are the next one
            if git.rename:
                raise fail(git.line, f"renames are not supported ({git.rename}): a patch step edits files in "
                                     "place; rename the file by hand, then diff its content")
            hunks, i = _hunks(lines, i + 2, fail)
            if not hunks:
                raise fail(i, f"no hunks for {new}")
            named = new if old == DEV_NULL else old
            if any(named in (f.old_path, f.new_path) for f in files):
                raise fail(header_at, f"{named} is patched twice in one diff: merge its hunks into one section")
            files.append(FilePatch(old, new, tuple(hunks), line=header_at + 1, index=git.index))
            git = _Git()
            continue
        elif line.startswith("@@ "):
            raise fail(i, "a hunk before any `---`/`+++` file header")
        i += 1
    if git.rename:
        raise fail(git.line, f"renames are not supported ({git.rename}): a patch step edits files in place")
    empty_file()
    if not files:
        if git.rename:
            raise fail(git.line, f"renames are not supported ({git.rename}): a patch step edits files in place")
        raise DiffError(f"{source} holds no unified diff (no `---`/`+++` file headers)")
    return ParsedDiff(tuple(files))


def reversed_diff(parsed: ParsedDiff) -> ParsedDiff:
    """The diff that undoes `parsed`: sides swapped, removed lines added and added removed."""
    swap: dict[str, Tag] = {" ": " ", "-": "+", "+": "-"}
    files = []
    for patch in parsed.files:
        hunks = tuple(Hunk(h.number, h.new_start, h.new_len, h.old_start, h.old_len, h.section,
                           tuple(DiffLine(swap[line.tag], line.text, line.newline) for line in h.lines))
                      for h in patch.hunks)
        index = (patch.index[1], patch.index[0]) if patch.index else None
        files.append(FilePatch(patch.new_path, patch.old_path, hunks, patch.line, index))
    return ParsedDiff(tuple(files))


def _hunks(lines: list[str], i: int, fail: _Fail) -> tuple[list[Hunk], int]:
    hunks: list[Hunk] = []
    while i < len(lines) and lines[i].startswith("@@"):
        found = _HUNK.match(lines[i])
        if not found:
            raise fail(i, f"not a hunk header: {lines[i][:80]}")
        old_start, old_len = int(found.group(1)), int(found.group(2) or 1)
        new_start, new_len = int(found.group(3)), int(found.group(4) or 1)
        if found.group(2) is None and found.group(1) == "0":
            old_len = 0
        header_at = i
        i += 1
        body: list[DiffLine] = []
        old_seen = new_seen = 0
        while old_seen < old_len or new_seen < new_len:
            if i >= len(lines):
                raise fail(header_at, f"hunk {lines[header_at]} ends early: the diff stops before its "
                                      f"{old_len} old and {new_len} new lines")
            line = lines[i]
            tag = line[:1] if line else " "  # an empty line: context whose space was trimmed
            if line.startswith("\\"):
                body = _no_newline(body, i, fail)
                i += 1
                continue
            if tag not in (" ", "-", "+"):
                raise fail(i, f"hunk {lines[header_at]} ends early: {old_seen}/{old_len} old and "
                              f"{new_seen}/{new_len} new lines, then {line[:60]!r}")
            body.append(DiffLine(tag, line[1:]))  # type: ignore[arg-type]
            old_seen += tag != "+"
            new_seen += tag != "-"
            i += 1
        while i < len(lines) and lines[i].startswith("\\"):
            body = _no_newline(body, i, fail)
            i += 1
        hunks.append(Hunk(len(hunks) + 1, old_start, old_len, new_start, new_len,
                          found.group(5).strip(), tuple(body)))
    return hunks, i


def _no_newline(body: list[DiffLine], at: int, fail: _Fail) -> list[DiffLine]:
    if not body:
        raise fail(at, "`\\ No newline at end of file` before any line")
    last = body[-1]
    return body[:-1] + [DiffLine(last.tag, last.text, newline=False)]


