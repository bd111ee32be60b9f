"""The outcome of every step planned on releases (patch steps, checks that read files) on every
release: a table, verdicts, and the JSON document.

Pure: plans in, text and data out. Consecutive releases with the same outcome share a row;
a change is named by a short id of its diff with the hunks' line numbers left out (the same
edit of the same lines, moved down the file by an unrelated change, is one diff), and each
distinct diff is printed once.

Verdicts, per patch step:
- failure (exit 1): a release inside the step's range that cannot be patched (target not
  found, ambiguous, the diff does not apply), or whose wheel could not be fetched;
- warning (exit 1 with --strict): a release outside the range that the edit would still
  change (the range may be too narrow), or a range no release falls in;
- note: the newest release is past the range (upstream may have fixed it).

Beside the verdicts, each patch step's history (history.py): since which release upstream has
the change, since which its target is gone, and the narrower range that follows.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from patchkit.recipe.model import Step
from patchkit.commands.releasetest.history import ABSENT, HAS, NEEDS, History, Release, State, history
from patchkit.commands.releasetest.plan import StepOutcome
from patchkit.commands.releasetest.touchable import release_reads
from patchkit.run.steps.patch import TARGET_NOT_FOUND, PatchStep
from patchkit.run.steps.registry import kind_named

_HUNK_LINES = re.compile(r"^@@ -\d+(,\d+)? \+\d+(,\d+)? @@", re.MULTILINE)


def not_tested(step: Step) -> str | None:
    """What the release test says of a step it does not plan on releases, as its kind says."""
    return kind_named(step.kind).not_tested


def diff_id(diff: str) -> str:
    return hashlib.sha256(_HUNK_LINES.sub("@@", diff).encode()).hexdigest()[:8]


@dataclass
class Cell:
    """One patch step on one release."""

    version: str
    status: str  # changed | ok | skipped | failed | error
    message: str
    diff_id: str | None = None
    file: str | None = None
    unranged: str | None = None  # outside the range: what the edit would do there (changed | ok | failed)
    unranged_diff_id: str | None = None
    host: str | None = None  # --versions installed: the host whose files these are

    def key(self) -> tuple[Any, ...]:
        """Consecutive releases with equal keys share a row (the version left out of the message)."""
        return (self.status, self.diff_id, self.file, self.unranged, self.unranged_diff_id,
                self.message.replace(self.version, "{version}"))

    @property
    def state(self) -> State | None:
        """What the release says of the edit (history.py): it needs it, has it, or has no target
        for it (outside the range: as the edit planned without the range found it)."""
        edit = self.unranged if self.status == "skipped" else self.status
        if edit == "changed":
            return NEEDS
        if edit == "ok":
            return HAS
        if edit == "failed" and (self.status == "skipped" or TARGET_NOT_FOUND in self.message):
            return ABSENT  # outside the range, a failed edit is one that finds no target (see _outside_text)
        return None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status, "message": self.message, "diff_id": self.diff_id}
        if self.file:
            out["file"] = self.file
        if self.unranged:
            out["outside_range"] = {"edit": self.unranged, "diff_id": self.unranged_diff_id}
        if self.host:
            out["host"] = self.host
        return out


def cell_of(version: str, outcome: StepOutcome | None, error: str | None, diffs: dict[str, str],
            host: str | None = None) -> Cell:
    if outcome is None:
        return Cell(version, "error", error or "no outcome", host=host)
    result = outcome.result
    files = [c.file for c in result.files or [] if c.sha256_before != c.sha256_after]
    cell = Cell(version, str(result.status), result.message, file=result.file or ", ".join(files) or None, host=host)
    if result.status == "changed" and result.diff:
        cell.diff_id = diff_id(result.diff)
        diffs.setdefault(cell.diff_id, result.diff)
    if outcome.unranged is not None:
        cell.unranged = str(outcome.unranged.status)
        if outcome.unranged.status == "changed" and outcome.unranged.diff:
            cell.unranged_diff_id = diff_id(outcome.unranged.diff)
            diffs.setdefault(cell.unranged_diff_id, outcome.unranged.diff)
    return cell


@dataclass
class StepMatrix:
    step: Step
    dist: str | None  # None: not a patch step
    cells: list[Cell] = field(default_factory=list)  # oldest release first

    @property
    def versions(self) -> str | None:
        reads = release_reads(self.step)
        return reads.versions if reads else None

    def history(self) -> History | None:
        """Over releases of the index, oldest first; None for hosts' installed releases (their
        order is the hosts', not the releases'); None for a check (it has no edit to be upstream)."""
        if PatchStep.of(self.step) is None or self.dist is None or not self.cells or any(c.host for c in self.cells):
            return None
        return history([Release(c.version, c.state) for c in self.cells], self.versions)

    def rows(self) -> list[list[Cell]]:
        groups: list[list[Cell]] = []
        for cell in self.cells:
            if groups and groups[-1][0].key() == cell.key() and cell.host is None:
                groups[-1].append(cell)
            else:
                groups.append([cell])
        return groups


@dataclass
class Verdicts:
    failures: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _inside(version: str, spec: str | None) -> bool:
    """In the range (an unreadable version counts as inside: nothing proves it is not)."""
    try:
        return spec is None or Version(version) in SpecifierSet(spec, prereleases=True)
    except InvalidVersion:
        return True


def span(cells: list[Cell]) -> str:
    """`0.10.1..0.10.2.post2 (8 releases)`, or one version (a host's installed one: with its name)."""
    if len(cells) == 1:
        return cells[0].version + (f" on {cells[0].host}" if cells[0].host else "")
    return f"{cells[0].version}..{cells[-1].version} ({len(cells)} releases)"


def release_runs(all_cells: list[Cell], picked: list[Cell]) -> str:
    """`picked` as runs of releases consecutive in `all_cells`: `0.10.1..0.10.2 (4 releases), 0.12.0`."""
    position = {id(c): i for i, c in enumerate(all_cells)}
    groups: list[list[Cell]] = []
    for cell in picked:
        if groups and position[id(cell)] == position[id(groups[-1][-1])] + 1:
            groups[-1].append(cell)
        else:
            groups.append([cell])
    return ", ".join(span(group) for group in groups)


def verdicts(matrices: list[StepMatrix]) -> Verdicts:
    out = Verdicts()
    for m in matrices:
        if m.dist is None or not m.cells:
            continue
        name, spec = m.step.name, m.versions
        where = f" inside {spec}" if spec else ""
        unranged = "" if spec else " (the step has no version range)"
        failed = [c for c in m.cells if c.status == "failed"]
        if failed:
            are = f" {'are' if len(failed) > 1 else 'is'}{where} and" if spec else ""
            reads = release_reads(m.step)
            refused = reads.refused if reads else "cannot be patched"
            out.failures.append(f"{name}: {release_runs(m.cells, failed)}{are} {refused}{unranged}: "
                                f"{failed[0].message}")
        errors = [c for c in m.cells if c.status == "error"]
        inside_errors = [c for c in errors if _inside(c.version, spec)]
        if inside_errors:
            out.failures.append(f"{name}: {release_runs(m.cells, inside_errors)}{where} could not be tested: "
                                f"{inside_errors[0].message}")
        if len(inside_errors) < len(errors):
            outside = [c for c in errors if not _inside(c.version, spec)]
            out.warnings.append(f"{name}: {release_runs(m.cells, outside)} (outside {spec}) could not be tested: {outside[0].message}")
        would = [c for c in m.cells if c.status == "skipped" and c.unranged == "changed"]
        if would:
            ids = sorted({c.unranged_diff_id for c in would if c.unranged_diff_id})
            out.warnings.append(f"{name}: {release_runs(m.cells, would)} {'are' if len(would) > 1 else 'is'} outside {spec}, but the "
                                f"edit would still change {'them' if len(would) > 1 else 'it'} (diff "
                                f"{', '.join(ids)}): the range may be too narrow")
        if spec and m.cells[0].host is None:
            inside = [c for c in m.cells if _inside(c.version, spec)]
            newest = m.cells[-1]
            if not inside:
                out.warnings.append(f"{name}: no release of {m.dist} tested is inside {spec}")
            elif newest not in inside and Version(newest.version) > Version(inside[-1].version):
                finds = {"failed": "there the edit finds no target", "ok": "there it is already in place",
                         "changed": "yet the edit would still change it"}.get(newest.unranged or "", "")
                out.notes.append(f"{name}: the newest release, {newest.version}, is past {spec} (upstream may have "
                                 f"fixed it{'; ' + finds if finds else ''})")
        checks = m.step.verify
        if checks is not None and (checks.import_ or checks.python) and any(c.status == "changed" for c in m.cells):
            what = " and its verify program" if checks.python else ""
            out.notes.append(f"{name}: `changed` says the edit applies to that release's files; its import "
                             f"check{what} did not run (planned offline: they run on each host when applied)")
    return out


def exit_code(v: Verdicts, strict: bool) -> int:
    return 1 if v.failures or (strict and v.warnings) else 0


def _row_text(cells: list[Cell], ok: str | None = "already in place") -> str:
    first = cells[0]
    if first.status == "changed":
        what = f"{first.diff_id}  {first.file or ''}"
    elif first.status == "ok" and ok is None:
        what = first.message
    elif first.status == "ok":
        what = f"{ok} ({first.file})" if first.file else str(ok)
    elif first.status == "skipped":
        what = first.message.replace(first.version, "{version}") if first.host else _outside_text(first)
    else:
        what = first.message
    return f"{first.status:<8} {what}"


def _outside_text(cell: Cell) -> str:
    spec = cell.message.split(" is outside ", 1)[-1] if " is outside " in cell.message else ""
    base = f"outside {spec}" if spec else cell.message
    edit = {"changed": f"; the edit WOULD change it (diff {cell.unranged_diff_id})",
            "ok": "; already in place anyway", "failed": "; the edit finds no target"}.get(cell.unranged or "", "")
    return base + edit


def render(recipe: str, matrices: list[StepMatrix], diffs: dict[str, str], v: Verdicts,
           released: dict[str, list[str]]) -> str:
    lines: list[str] = []
    for dist, versions in released.items():
        lines.append(f"{recipe} on {dist}: {len(versions)} release{'s' if len(versions) != 1 else ''}"
                     + (f" ({versions[0]}..{versions[-1]})" if len(versions) > 1 else ""))
    shown: dict[str, list[Cell]] = {}
    for m in matrices:
        if m.dist is None:
            lines.append(f"{m.step.name} ({m.step.kind}): {not_tested(m.step) or 'not tested'}")
            continue
        reads = release_reads(m.step)
        assert reads is not None
        lines.append(f"{m.step.name} ({m.step.kind} {reads.package} {m.versions or 'any version'}, "
                     f"releases of {m.dist}):")
        rows = m.rows()
        width = max(len(span(r)) for r in rows) if rows else 0
        for row in rows:
            lines.append(f"  {span(row):<{width}}  {_row_text(row, reads.ok)}")
            for cell in row:
                for ident in (cell.diff_id, cell.unranged_diff_id):
                    if ident:
                        shown.setdefault(ident, []).append(cell)
    for ident, cells in shown.items():
        lines.append("")
        lines.append(f"diff {ident} ({_spread(cells)}; shown for {cells[0].version}):")
        lines.append(diffs[ident].rstrip("\n"))
    told = [(m.step.name, h.text()) for m in matrices if (h := m.history()) is not None and h.text()]
    if v.failures or v.warnings or v.notes or told:
        lines.append("")
    lines += [f"FAILED: {text}" for text in v.failures]
    lines += [f"warning: {text}" for text in v.warnings]
    lines += [f"note: {text}" for text in v.notes]
    lines += [f"history: {name}: {text}" for name, text in told]
    return "\n".join(lines)


def _spread(cells: list[Cell]) -> str:
    versions = sorted({c.version for c in cells}, key=Version)
    if len(versions) == 1:
        return versions[0]
    return f"{len(versions)} releases, {versions[0]}..{versions[-1]}"


def _label(cell: Cell) -> str:
    return cell.version if cell.host is None else f"{cell.version}@{cell.host}"


def as_json(recipe: str, matrices: list[StepMatrix], diffs: dict[str, str], v: Verdicts,
            released: dict[str, list[str]]) -> dict[str, Any]:
    steps: dict[str, Any] = {}
    for m in matrices:
        if m.dist is None:
            steps[m.step.name] = {"kind": m.step.kind, "tested": False, "message": not_tested(m.step) or "",
                                  "releases": {}}
            continue
        told = m.history()
        steps[m.step.name] = {"kind": m.step.kind, "tested": True, "dist": m.dist, "versions": m.versions,
                              "releases": {_label(c): c.as_json() for c in m.cells},
                              "history": told.as_json() if told is not None else None}
    dists = list(released)
    return {"recipe": recipe, "dist": dists[0] if len(dists) == 1 else dists, "releases": released,
            "steps": steps, "diffs": diffs, "failures": v.failures, "warnings": v.warnings, "notes": v.notes}
