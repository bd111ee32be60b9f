"""What a reviewer reads of `patchkit test`: the release matrix as one page (HTML or Markdown).

`build_matrix_review` turns the matrices (plus the recipe) into plain data: per patch step
and release the outcome in a reviewer's words (applies / already / refused / not touched /
not tested) with the reason, each distinct diff once with the releases it holds for, and a
summary per step (how many releases it applies on, the first and the last, where it stops
applying and why, since when upstream has the change or its target is gone: history.py). `render_html` and `render_markdown` only lay that data out, with the
frame, diff rendering and escaping of patchkit/report/review.py: one self-contained file, no
script, nothing fetched, every piece of recipe, message and diff text escaped, its hidden
characters shown and counted in a warning at the top (patchkit/base/reveal.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from patchkit.recipe.model import LoadedRecipe
from patchkit.commands.releasetest.touchable import release_reads
from patchkit.commands.releasetest.matrix import (
    Cell,
    StepMatrix,
    Verdicts,
    not_tested,
    release_runs,
    span,
)
from patchkit.report.review import (
    TOGGLE,
    badge,
    diff_html,
    escape,
    marked,
    md_code,
    md_fence,
    md_html,
    md_text,
    page,
    warning_html,
    warning_md,
)
from patchkit.base.reveal import Reveal, hidden_warning

# A cell's status (as --json says it) in a reviewer's words.
OUTCOMES = {"changed": "applies", "ok": "already", "failed": "refused", "error": "not tested",
            "skipped": "not touched"}
# The badge colour of each: the review page's own status classes.
_COLOUR = {"changed": "changed", "ok": "ok", "failed": "failed", "error": "failed", "skipped": "skipped"}
_OUTSIDE = {"changed": "the edit would still change it", "ok": "already in place anyway",
            "failed": "the edit finds no target"}


@dataclass
class ReleaseOutcome:
    """One patch step on one release."""

    release: str  # the version (--versions installed: version@host), as --json's key
    status: str  # changed | ok | skipped | failed | error, as --json
    outcome: str  # the status in words (OUTCOMES)
    reason: str  # why, in a sentence
    diff_id: str | None = None
    file: str | None = None


@dataclass
class ReleaseDiff:
    """One distinct diff and the releases whose step makes it (line numbers may differ)."""

    diff_id: str
    text: str
    releases: list[str]
    runs: str  # the releases as runs of consecutive ones: `0.10.1..0.10.2 (4 releases), 0.12.0`
    outside_range: bool = False  # what the edit would do on releases outside the step's range


@dataclass
class Stop:
    """The first release after one the step applies on where it no longer does, and why."""

    release: str
    outcome: str
    reason: str


@dataclass
class MatrixStep:
    name: str
    kind: str
    tested: bool
    dist: str | None
    versions: str | None  # the step's range
    description: str | None
    why: str | None
    upstream: str | None
    not_tested: str = ""  # a check, deploy or launch step: why it is not in the matrix
    releases: list[ReleaseOutcome] = field(default_factory=list)  # oldest first
    rows: list[tuple[str, ReleaseOutcome]] = field(default_factory=list)  # consecutive equal outcomes, one row
    diffs: list[ReleaseDiff] = field(default_factory=list)
    applies: int = 0
    first: str | None = None
    last: str | None = None
    stops: list[Stop] = field(default_factory=list)
    history: str = ""  # `upstream since 0.18.0, gone since 0.22.0`, with its bounds and the suggested range
    obsolete: str = ""  # its summary alone, for the summary table

    @property
    def bad(self) -> bool:
        return any(r.status in ("failed", "error") for r in self.releases)


@dataclass
class MatrixReview:
    recipe: str
    description: str | None
    recipe_sha256: str
    released: dict[str, list[str]]  # dist -> versions, oldest first
    steps: list[MatrixStep]
    failures: list[str]
    warnings: list[str]
    notes: list[str]
    hidden: int = 0  # characters a reader cannot see, shown as <U+XXXX> in every string above

    @property
    def title(self) -> str:
        return f"patchkit test: {self.recipe}"

    @property
    def warning(self) -> str | None:
        """The hidden characters' warning, for the top of the page."""
        return hidden_warning(self.hidden, "page")


def _label(cell: Cell) -> str:
    return cell.version if cell.host is None else f"{cell.version}@{cell.host}"


def _reason(cell: Cell, ok: str | None = "already in place") -> str:
    if cell.status == "ok" and ok is None:  # a check: its own words
        return cell.message
    if cell.status == "changed":
        return f"diff {cell.diff_id} on {cell.file}" if cell.file else f"diff {cell.diff_id}"
    if cell.status == "ok":
        return f"the edit is in place in {cell.file}" if cell.file else "the edit is in place"
    if cell.status == "skipped" and cell.unranged:
        edit = _OUTSIDE.get(cell.unranged, cell.unranged)
        if cell.unranged_diff_id:
            edit += f" (diff {cell.unranged_diff_id})"
        return f"{cell.message}; {edit}"
    return cell.message


def _outcome(cell: Cell, ok: str | None = "already in place") -> ReleaseOutcome:
    words = "passes" if cell.status == "ok" and ok is None else OUTCOMES.get(cell.status, cell.status)
    return ReleaseOutcome(_label(cell), cell.status, words, _reason(cell, ok), cell.diff_id, cell.file)


def _step(m: StepMatrix, diffs: dict[str, str]) -> MatrixStep:
    step = m.step
    out = MatrixStep(name=step.name, kind=step.kind, tested=m.dist is not None, dist=m.dist, versions=m.versions,
                     description=step.description, why=step.why, upstream=step.upstream)
    if m.dist is None:
        out.not_tested = not_tested(step) or "not tested"
        return out
    reads = release_reads(step)
    ok = reads.ok if reads else "already in place"
    out.releases = [_outcome(c, ok) for c in m.cells]
    out.rows = [(span(row), _outcome(row[0], ok)) for row in m.rows()]
    groups: dict[tuple[str, bool], list[Cell]] = {}
    for cell in m.cells:
        if cell.diff_id:
            groups.setdefault((cell.diff_id, False), []).append(cell)
        if cell.unranged_diff_id:
            groups.setdefault((cell.unranged_diff_id, True), []).append(cell)
    out.diffs = [ReleaseDiff(ident, diffs[ident], [_label(c) for c in cells], release_runs(m.cells, cells), outside)
                 for (ident, outside), cells in groups.items()]
    applying = [c for c in m.cells if c.status == "changed"]
    out.applies = len(applying)
    if applying:
        out.first, out.last = _label(applying[0]), _label(applying[-1])
    for before, cell in zip(m.cells, m.cells[1:]):
        if before.status == "changed" and cell.status != "changed":
            found = _outcome(cell, ok)
            out.stops.append(Stop(found.release, found.outcome, found.reason))
    told = m.history()
    if told is not None:
        out.history, out.obsolete = told.text(), told.summary
    return out


def build_matrix_review(loaded: LoadedRecipe, matrices: list[StepMatrix], diffs: dict[str, str], v: Verdicts,
                        released: dict[str, list[str]]) -> MatrixReview:
    review = MatrixReview(recipe=loaded.recipe.name, description=loaded.recipe.description,
                          recipe_sha256=loaded.content_sha256, released=released,
                          steps=[_step(m, diffs) for m in matrices], failures=list(v.failures),
                          warnings=list(v.warnings), notes=list(v.notes))
    shown = Reveal()  # after the diffs were told apart by their text
    review = shown.tree(review)
    review.hidden = shown.found
    return review


def summary_line(step: MatrixStep) -> str:
    """`applies on 22 of 55 releases, 0.10.1 to 0.17.1; stops at 0.18.0 (already)`: the reasons are
    in the summary table and the rows (this line holds no message, so it can be an HTML summary)."""
    if not step.tested:
        return step.not_tested
    total = len(step.releases)
    if not step.applies:
        return f"applies on none of {total} release{'s' if total != 1 else ''}"
    where = step.first if step.first == step.last else f"{step.first} to {step.last}"
    text = f"applies on {step.applies} of {total} release{'s' if total != 1 else ''}, {where}"
    if step.stops:
        text += "; stops at " + ", ".join(f"{s.release} ({s.outcome})" for s in step.stops)
    elif step.releases[-1].status == "changed":
        text += "; still applies on the newest release tested"
    return text


def _grid(review: MatrixReview) -> list[tuple[str, list[MatrixStep], list[str]]]:
    """Per distribution: its patch steps and the releases they were tried on (a row each)."""
    out = []
    for dist in review.released:
        steps = [s for s in review.steps if s.tested and s.dist == dist]
        labels = list(dict.fromkeys(r.release for s in steps for r in s.releases))
        if steps:
            out.append((dist, steps, labels))
    return out


# ---------------------------------------------------------------- HTML

def _cell_html(step: MatrixStep, found: ReleaseOutcome) -> str:
    detail = (f'<a href="#diff-{escape(step.name)}-{escape(found.diff_id)}"><code>{escape(found.diff_id)}</code></a>'
              + (f' <span class="muted">{escape(found.file)}</span>' if found.file else "")
              if found.diff_id else escape(found.reason))
    return (f'<td class="cell" data-step="{escape(step.name)}" data-release="{escape(found.release)}" '
            f'data-status="{escape(found.status)}" data-diff="{escape(found.diff_id or "")}">'
            f"{badge(_COLOUR.get(found.status, found.status), found.outcome)} {detail}</td>")


def render_html(review: MatrixReview) -> str:
    out = [f"<h1>{escape(review.title)}</h1>", *warning_html(review.warning)]
    if review.description:
        out.append(f"<p>{marked(review.description)}</p>")
    tried = "; ".join(f"{len(v)} release{'s' if len(v) != 1 else ''} of {escape(d)}"
                      + (f" ({escape(v[0])}..{escape(v[-1])})" if len(v) > 1 else "")
                      for d, v in review.released.items())
    out.append(f'<p class="muted">planned offline, nothing written · {tried}'
               + (f" · recipe sha256 <code>{escape(review.recipe_sha256)}</code>" if review.recipe_sha256 else "")
               + "</p>")
    if review.failures or review.warnings:
        out.append('<div class="attention"><h3>Needs attention</h3><ul>')
        out += [f"<li>{badge('failed', 'FAILED')} {marked(t)}</li>" for t in review.failures]
        out += [f"<li>{badge('changed', 'warning')} {marked(t)}</li>" for t in review.warnings]
        out.append("</ul></div>")
    if review.notes:
        out.append("<ul>" + "".join(f"<li>note: {escape(t)}</li>" for t in review.notes) + "</ul>")
    out.append('<h2>Summary</h2><div class="scroll"><table class="summary"><tr><th>step</th><th>range</th>'
               "<th>applies on</th><th>first</th><th>last</th><th>stops applying</th><th>upstream</th></tr>")
    for step in review.steps:
        if not step.tested:
            out.append(f'<tr><td>{escape(step.name)} <span class="muted">({escape(step.kind)})</span></td>'
                       f'<td colspan="6" class="muted">{escape(step.not_tested)}</td></tr>')
            continue
        stops = "<br>".join(f"{escape(s.release)}: {badge(_status_of(s.outcome), s.outcome)} {escape(s.reason)}"
                            for s in step.stops) or ("still applies on the newest release tested"
                                                     if step.applies and step.releases[-1].status == "changed" else "")
        out.append(f'<tr><td><a href="#step-{escape(step.name)}">{escape(step.name)}</a></td>'
                   f"<td><code>{escape(step.versions or 'any version')}</code></td>"
                   f"<td>{step.applies} of {len(step.releases)}</td><td>{escape(step.first or '')}</td>"
                   f"<td>{escape(step.last or '')}</td><td>{stops}</td><td>{escape(step.obsolete)}</td></tr>")
    out.append("</table></div>")
    for dist, steps, labels in _grid(review):
        out.append(f"<h2>Every release of {escape(dist)}</h2>"
                   '<div class="scroll"><table class="grid"><tr><th>release</th>'
                   + "".join(f"<th>{escape(s.name)}</th>" for s in steps) + "</tr>")
        by_step = [{r.release: r for r in s.releases} for s in steps]
        for label in labels:
            cells = "".join(_cell_html(s, found[label]) if label in found else "<td></td>"
                            for s, found in zip(steps, by_step))
            out.append(f'<tr data-release="{escape(label)}"><td>{escape(label)}</td>{cells}</tr>')
        out.append("</table></div>")
    out.append(TOGGLE)
    for step in review.steps:
        out.append(f'<section class="step{" bad" if step.bad else ""}" id="step-{escape(step.name)}">'
                   f'<h2>{escape(step.name)} <span class="muted">({escape(step.kind)})</span></h2>')
        for label, value in (("", step.description), ("why", step.why), ("upstream", step.upstream)):
            if value:
                out.append(f"<p>{'<b>' + label + ':</b> ' if label else ''}{marked(value)}</p>")
        if step.tested:
            out.append(f"<p>range <code>{escape(step.versions or 'any version')}</code>, releases of "
                       f"{escape(step.dist)}: {escape(summary_line(step))}</p>")
            if step.history:
                out.append(f'<p class="history"><b>history:</b> {marked(step.history)}</p>')
            out.append('<table class="runs">')
            for where, found in step.rows:
                out.append(f"<tr><td class=\"hosts\">{escape(where)}</td>"
                           f"<td>{badge(_COLOUR.get(found.status, found.status), found.outcome)}</td>"
                           f"<td>{marked(found.reason)}</td></tr>")
            out.append("</table>")
        else:
            out.append(f'<p class="muted">{escape(step.not_tested)}</p>')
        for group in step.diffs:
            many = len(group.releases)
            what = "outside the range, the edit would make" if group.outside_range else "diff"
            out.append(f'<h3 class="diff-releases" id="diff-{escape(step.name)}-{escape(group.diff_id)}">{what} '
                       f"<code>{escape(group.diff_id)}</code> on {many} release{'s' if many != 1 else ''}: "
                       f"{escape(group.runs)}"
                       + (f" (shown for {escape(group.releases[0])})" if many > 1 else "") + "</h3>")
            if many > 1:
                out.append(f'<p class="muted releases">{escape(", ".join(group.releases))}</p>')
            out.append(diff_html(group.text))
        out.append("</section>")
    return page(review.title, out)


def _status_of(outcome: str) -> str:
    words = {**{word: s for s, word in OUTCOMES.items()}, "passes": "ok"}  # "passes": a check's ok
    status = words.get(outcome, outcome)
    return _COLOUR.get(status, status)


# ---------------------------------------------------------------- Markdown

def _cell_md(found: ReleaseOutcome) -> str:
    if found.diff_id:
        return f"{found.outcome} {md_code(found.diff_id)}" + (f" {md_text(found.file)}" if found.file else "")
    return f"{found.outcome}: {md_text(found.reason)}"


def render_markdown(review: MatrixReview) -> str:
    out = [f"## {md_text(review.title)}", "", *warning_md(review.warning)]
    if review.description:
        out += [md_text(review.description), ""]
    tried = "; ".join(f"{len(v)} release{'s' if len(v) != 1 else ''} of {md_text(d)}"
                      + (f" ({md_text(v[0])}..{md_text(v[-1])})" if len(v) > 1 else "")
                      for d, v in review.released.items())
    out += [f"planned offline, nothing written · {tried}"
            + (f" · recipe sha256 `{review.recipe_sha256[:16]}`" if review.recipe_sha256 else ""), ""]
    if review.failures or review.warnings:
        out += ["**Needs attention:**", ""]
        out += [f"- **FAILED** {md_text(t)}" for t in review.failures]
        out += [f"- **warning** {md_text(t)}" for t in review.warnings]
        out.append("")
    if review.notes:
        out += [f"- note: {md_text(t)}" for t in review.notes] + [""]
    out += ["| step | range | applies on | first | last | stops applying | upstream |",
            "|---|---|---|---|---|---|---|"]
    for step in review.steps:
        if not step.tested:
            out.append(f"| {md_text(step.name)} ({md_text(step.kind)}) | | | | | {md_text(step.not_tested)} | |")
            continue
        stops = "; ".join(f"{s.release}: {s.outcome}: {s.reason}" for s in step.stops)
        out.append(f"| {md_text(step.name)} | {md_text(step.versions or 'any version')} | "
                   f"{step.applies} of {len(step.releases)} | {md_text(step.first or '')} | "
                   f"{md_text(step.last or '')} | {md_text(stops)} | {md_text(step.obsolete)} |")
    out.append("")
    for dist, steps, labels in _grid(review):
        by_step = [{r.release: r for r in s.releases} for s in steps]
        out += [f"**Every release of {md_text(dist)}:**", "",
                "| release | " + " | ".join(md_text(s.name) for s in steps) + " |",
                "|---|" + "---|" * len(steps)]
        out += ["| " + md_text(label) + " | " + " | ".join(_cell_md(found[label]) if label in found else ""
                                                             for found in by_step) + " |" for label in labels]
        out.append("")
    for step in review.steps:
        head = f"<summary><b>{md_html(step.name)}</b> ({md_html(step.kind)}): {md_html(summary_line(step))}</summary>"
        out += ["<details>", head, ""]
        for label, value in ((None, step.description), ("why", step.why), ("upstream", step.upstream)):
            if value:
                out += [f"{'**' + label + ':** ' if label else ''}{md_text(value)}", ""]
        if step.tested:
            if step.history:
                out += [f"**history:** {md_text(step.history)}", ""]
            out += [f"- {md_text(where)}: **{md_text(found.outcome)}** {md_text(found.reason)}"
                    for where, found in step.rows]
            out.append("")
        for group in step.diffs:
            what = "outside the range, the edit would make" if group.outside_range else "diff"
            out += [f"{what} {md_code(group.diff_id)} on {md_text(group.runs)}"
                    + (f" (shown for {md_text(group.releases[0])}; all: {md_text(', '.join(group.releases))})"
                       if len(group.releases) > 1 else "") + ":", "", md_fence(group.text, "diff"), ""]
        out += ["</details>", ""]
    return "\n".join(out)
