"""diff's parameters, as a recipe writes them: the diff is read (and checked) when the recipe loads."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from pydantic import Field, PrivateAttr, model_validator

from patchkit.edits.model import EditError, EditResult, EditSpec, compile_error, keeping_bom
from patchkit.edits.unified_diff import FilePatch, ParsedDiff

if TYPE_CHECKING:
    from patchkit.edits.hunk_locate import FileOutcome


class DiffEdit(EditSpec):
    """A unified diff (git or plain; one or several files), applied by meaning: each hunk is
    found where its lines are (within the def/class its header names), not at its line
    number. `file` is relative to the recipe (and may not leave its folder); or `text` inline.
    `reverse` applies it backwards (what it added is taken out, what it removed put back).
    Paths map to modules of the step's package after `strip` leading components (`patch -p`)."""

    kind: ClassVar[str] = "diff"
    file: str | None = Field(None, description="a .patch/.diff file next to the recipe (relative to its folder)")
    text: str | None = Field(None, description="the unified diff itself, inline")
    strip: int = Field(1, ge=0, description="leading path components to drop, like patch -p (default 1: a/, b/)")
    reverse: bool = Field(False, description="apply the diff backwards (patch -R): take a fix out with the "
                                             "same diff that put it in")
    _base_dir: Path | None = PrivateAttr(None)
    _parsed: ParsedDiff | None = PrivateAttr(None)
    _targets: list[tuple[str, str, FilePatch]] | None = PrivateAttr(None)  # of _parsed, computed once

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

    def apply_to(self, path: str, source: str | None) -> FileOutcome:
        """The FileOutcome (hunk_locate.py) of the diff's file `path` on `source` (None: absent).
        A changed result that does not compile is refused (the diff's doing, not ours)."""
        from patchkit.edits.hunk_locate import FileOutcome, apply_file_patch

        patch = next((p for rel, _, p in self.targets() if rel == path), None)
        if patch is None:
            raise EditError(f"the diff does not name {path}")
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
        return EditResult(outcome.verdict, source if outcome.source is None else outcome.source, message)
