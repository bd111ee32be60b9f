"""What a reviewer reads: a run's report as one Review, then as an HTML page or as Markdown.

`build_review` turns a RunReport (plus the recipe it ran) into plain data: the recipe, the
hosts, the counts, and per step its outcomes with the hosts sharing each, failures first,
identical diffs once. `render_html` and `render_markdown` only lay that data out, so both
say the same thing. Every piece of user text (recipe, diff, message) is escaped: none is
ever read as markup; a character a reader cannot see (a bidi control, a zero-width space) is
shown as `<U+202E>` and counted in a warning at the top (patchkit/base/reveal.py); in Markdown a
mention or a link is shown as code, so a comment pings no one. The page is one file with no
script and nothing fetched (a Content Security Policy that allows no source says so to the
browser too); the unified/side-by-side toggle is two radio buttons and CSS.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from typing import Any

from patchkit.recipe.model import LoadedRecipe
from patchkit.report.output import diff_key
from patchkit.run.results import RunReport, StepResult
from patchkit.run.steps.registry import KINDS, kind_named
from patchkit.base.reveal import MARK, Reveal, hidden_warning

ORDER = ("failed", "drifted", "stale", "pending", "changed", "applied", "ok", "skipped", "not-applicable")


@dataclass
class DiffGroup:
    """One diff, and the hosts whose step would make it (their paths may differ)."""

    text: str
    hosts: list[str] = field(default_factory=list)


@dataclass
class Outcome:
    """A status and message that several hosts share for one step."""

    status: str
    message: str
    hosts: list[str] = field(default_factory=list)


@dataclass
class StepView:
    name: str
    kind: str
    description: str | None
    why: str | None
    upstream: str | None
    outcomes: list[Outcome]
    diffs: list[DiffGroup]
    facts: list[tuple[str, str]]  # what the step would do, from the recipe: a command, a source, a check


@dataclass
class HostView:
    name: str
    status: str
    where: str
    versions: str


@dataclass
class Review:
    command: str
    dry_run: bool
    run_id: str
    recipe: str
    description: str | None
    recipe_sha256: str
    hosts: list[HostView]
    counts: dict[str, int]
    steps: list[StepView]
    attention: list[tuple[str, str, str, str]]  # (host, step, status, message): what failed or drifted
    hidden: int = 0  # characters a reader cannot see, shown as <U+XXXX> in every string above

    @property
    def warning(self) -> str | None:
        """The hidden characters' warning, for the top of the page."""
        return hidden_warning(self.hidden, "plan" if self.dry_run else "report")

    @property
    def title(self) -> str:
        what = "plan" if self.dry_run else self.command
        return f"patchkit {what}: {self.recipe}"


def _facts(loaded: LoadedRecipe | None, name: str, dry_run: bool) -> list[tuple[str, str]]:
    if loaded is None:
        return []
    step = next((s for s in loaded.recipe.steps if s.name == name), None)
    if step is None:
        return []
    kind = kind_named(step.kind)
    return kind.facts(step, kind.spec_of(step), loaded.redactor.value, dry_run)


def _measured(step: StepResult) -> list[tuple[str, str]]:
    """What a host's result adds to the recipe's facts: what its kind says (the files a deploy
    sends, what a launch's gate measured), then the checks that verified a write."""
    kind = KINDS.get(step.kind)
    out = kind.measured(step) if kind is not None else []
    if step.checks:
        out.append(("checks", "\n".join(f"{'passed' if c.ok else 'FAILED'}  {c.name}"
                                         + (f": {c.detail.splitlines()[-1]}" if not c.ok and c.detail else "")
                                         for c in step.checks)))
    return out


def _host_facts(loaded: LoadedRecipe | None, per_host: dict[str, LoadedRecipe], hosts: list[str], name: str,
                dry_run: bool) -> list[tuple[str, str]]:
    """The recipe's facts of a step; when host variables make them differ, each version with
    the hosts it is for."""
    if not per_host:
        return _facts(loaded, name, dry_run)
    versions: dict[tuple[tuple[str, str], ...], list[str]] = {}
    for host in hosts:
        versions.setdefault(tuple(_facts(per_host.get(host, loaded), name, dry_run)), []).append(host)
    if len(versions) <= 1:
        return list(next(iter(versions), ())) or _facts(loaded, name, dry_run)
    return [(f"{label} ({', '.join(on)})", text) for facts, on in versions.items() for label, text in facts]


def build_review(report: RunReport, loaded: LoadedRecipe | None, where: dict[str, str] | None = None,
                 per_host: dict[str, LoadedRecipe] | None = None) -> Review:
    names: list[str] = []
    kinds: dict[str, str] = {}
    about: dict[str, tuple[str | None, str | None]] = {}
    outcomes: dict[str, dict[tuple[str, str], Outcome]] = {}
    diffs: dict[str, dict[str, DiffGroup]] = {}
    sent: dict[str, dict[str, DiffGroup]] = {}
    attention: list[tuple[str, str, str, str]] = []
    hosts: list[HostView] = []
    counts: dict[str, int] = {}
    for host, result in report.hosts.items():
        counts[result.status] = counts.get(result.status, 0) + 1
        versions = sorted({s.package_version for s in result.steps if s.package_version})
        hosts.append(HostView(host, result.status, (where or {}).get(host, ""), ", ".join(versions)))
        if not result.steps and result.status == "failed":
            attention.append((host, "", result.status, result.message))
        for step in result.steps:
            if step.name not in kinds:
                names.append(step.name)
                kinds[step.name] = step.kind
                about[step.name] = (step.why, step.upstream)
            key = (step.status, step.message)
            outcomes.setdefault(step.name, {}).setdefault(key, Outcome(step.status, step.message)).hosts.append(host)
            if step.status in ("failed", "drifted", "stale"):
                attention.append((host, step.name, step.status, step.message))
            if step.diff:
                group = diffs.setdefault(step.name, {}).setdefault(diff_key(step.diff), DiffGroup(step.diff))
                group.hosts.append(host)
            for label, text in _measured(step):
                sent.setdefault(step.name, {}).setdefault(f"{label}\0{text}", DiffGroup(text)).hosts.append(host)
    if loaded is not None:  # recipe order, and steps no host reached
        order = [s.name for s in loaded.recipe.steps]
        names = [n for n in order if n in kinds] + [n for n in names if n not in order]
    steps = []
    for name in names:
        recipe_step = next((s for s in loaded.recipe.steps if s.name == name), None) if loaded else None
        facts = _host_facts(loaded, per_host or {}, list(report.hosts), name, report.dry_run)
        for seen, group in (sent.get(name) or {}).items():
            facts.append((f"{seen.split(chr(0))[0]} ({', '.join(group.hosts)})", group.text))
        steps.append(StepView(
            name=name, kind=kinds[name], description=recipe_step.description if recipe_step else None,
            why=about[name][0], upstream=about[name][1],
            outcomes=sorted((outcomes.get(name) or {}).values(), key=lambda o: _rank(o.status)),
            diffs=list((diffs.get(name) or {}).values()), facts=facts))
    hosts.sort(key=lambda h: _rank(h.status))
    review = Review(command=report.command, dry_run=report.dry_run, run_id=report.run_id, recipe=report.recipe,
                    description=loaded.recipe.description if loaded else None,
                    recipe_sha256=loaded.content_sha256 if loaded else "", hosts=hosts, counts=counts,
                    steps=steps, attention=attention)
    shown = Reveal()  # after grouping, which compares the text: a diff shared by hosts is counted once
    review = shown.tree(review)
    review.hidden = shown.found
    return review


def _rank(status: str) -> int:
    return ORDER.index(status) if status in ORDER else len(ORDER)


# ---------------------------------------------------------------- side by side

def split_rows(diff: str) -> list[tuple[str, str, str, str]]:
    """A unified diff as side-by-side rows (old, new, old kind, new kind): context beside itself,
    a run of removed lines beside the added lines that follow it, hunk headers across."""
    rows: list[tuple[str, str, str, str]] = []
    removed: list[str] = []
    added: list[str] = []

    def flush() -> None:
        for i in range(max(len(removed), len(added))):
            old = removed[i] if i < len(removed) else ""
            new = added[i] if i < len(added) else ""
            rows.append((old, new, "del" if i < len(removed) else "empty", "add" if i < len(added) else "empty"))
        removed.clear()
        added.clear()

    for line in diff.splitlines():
        if line.startswith(("--- ", "+++ ")):
            flush()
            rows.append((line, "", "file", "file"))
        elif line.startswith("@@"):
            flush()
            rows.append((line, line, "hunk", "hunk"))
        elif line.startswith("-"):
            if added:
                flush()
            removed.append(line[1:])
        elif line.startswith("+"):
            added.append(line[1:])
        else:
            flush()
            rows.append((line[1:], line[1:], "ctx", "ctx"))
    flush()
    return rows


# ---------------------------------------------------------------- HTML

_CSS = """
:root{--fg:#1d232b;--muted:#5c6773;--line:#d8dee4;--bg:#fff;--add:#e6ffec;--del:#ffebe9;--hunk:#ddf4ff}
*{box-sizing:border-box}body{margin:0;font:15px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;
color:var(--fg);background:var(--bg)}main{max-width:1100px;margin:0 auto;padding:12px 16px 48px}
h1{font-size:1.4em;margin:.4em 0}h2{font-size:1.15em;margin:1.4em 0 .4em}h3{font-size:1em;margin:.8em 0 .3em}
.muted{color:var(--muted)}p,li,dd,dt,h1,h2,h3,summary{overflow-wrap:anywhere}code,pre{font:13px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre{margin:0;white-space:pre}.scroll{overflow-x:auto;border:1px solid var(--line);border-radius:6px}
table{border-collapse:collapse;width:100%}.scroll table{width:auto;min-width:100%}td,th{padding:4px 8px;border-bottom:1px solid var(--line);
text-align:left;vertical-align:top;overflow-wrap:anywhere}
.bar{display:flex;height:14px;border-radius:7px;overflow:hidden;margin:6px 0;border:1px solid var(--line)}
.bar span{display:block}.s-failed,.s-drifted,.s-stale{background:#cf222e;color:#fff}
.s-changed,.s-pending{background:#bf8700;color:#fff}.s-ok,.s-applied{background:#1a7f37;color:#fff}
.s-skipped,.s-not-applicable{background:#8c959f;color:#fff}
.badge{display:inline-block;padding:0 7px;border-radius:10px;font-size:.85em;white-space:nowrap}
section.step{border:1px solid var(--line);border-radius:8px;padding:4px 14px 12px;margin:14px 0}
section.step.bad{border-color:#cf222e}.facts dt{font-weight:600;margin-top:4px}.facts dd{margin:0 0 4px 0}
.facts pre{white-space:pre-wrap;overflow-wrap:anywhere}td.hosts{min-width:5.5em;overflow-wrap:normal}
td.code{font:13px/1.4 ui-monospace,monospace;white-space:pre;padding:0 6px;border:0}
tr.add td.new,.u-add{background:var(--add)}tr.del td.old,.u-del{background:var(--del)}
.u-hunk,td.hunk{background:var(--hunk);color:var(--muted)}.u-file,td.file{font-weight:600}
td.del{background:var(--del)}td.add{background:var(--add)}td.empty{background:#f6f8fa}
.toggle{margin:8px 0}.toggle label{border:1px solid var(--line);padding:3px 10px;border-radius:6px;cursor:pointer}
#view-unified:checked~main .split,#view-split:checked~main .unified{display:none}
#view-unified:checked~main label[for=view-unified],#view-split:checked~main label[for=view-split]{
background:var(--fg);color:var(--bg)}input.view{position:absolute;opacity:0}
.attention{border-left:4px solid #cf222e;padding:4px 12px;background:#fff8f8}
.hidden-char{background:#cf222e;color:#fff;border-radius:3px;padding:0 2px}
@media (max-width:600px){body{font-size:14px}main{padding:8px}td,th{padding:3px 4px}}
@media print{.toggle,input.view{display:none}.split{display:none!important}.unified{display:block!important}
section.step{break-inside:avoid-page}pre{white-space:pre-wrap}}
"""


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


escape = _e  # the names other review pages (commands/releasetest/review.py) use


def _badge(status: str, label: str | None = None) -> str:
    return f'<span class="badge s-{_e(status)}">{_e(status if label is None else label)}</span>'


badge = _badge


def _marked(text: str) -> str:
    """Text escaped, each revealed character (<U+202E>) in it marked out: for an element's
    content only, never an attribute's value."""
    out, at = [], 0
    for found in MARK.finditer(text):
        out += [_e(text[at:found.start()]), f'<span class="hidden-char">{_e(found.group())}</span>']
        at = found.end()
    return "".join(out) + _e(text[at:])


def _unified(diff: str) -> str:
    lines = []
    for line in diff.splitlines():
        kind = ("u-file" if line.startswith(("--- ", "+++ ")) else "u-hunk" if line.startswith("@@")
                else "u-add" if line.startswith("+") else "u-del" if line.startswith("-") else "")
        lines.append(f'<span class="{kind}">{_marked(line)}</span>' if kind else _marked(line))
    return '<div class="unified scroll"><pre>' + "\n".join(lines) + "</pre></div>"


def _split(diff: str) -> str:
    rows = []
    for old, new, old_kind, new_kind in split_rows(diff):
        if old_kind == "file":
            rows.append(f'<tr><td class="code file" colspan="2">{_marked(old)}</td></tr>')
            continue
        rows.append(f'<tr><td class="code {old_kind}">{_marked(old)}</td>'
                    f'<td class="code {new_kind}">{_marked(new)}</td></tr>')
    return '<div class="split scroll"><table>' + "".join(rows) + "</table></div>"


marked = _marked


def diff_html(diff: str) -> str:
    """A diff both ways; TOGGLE (somewhere on the page) picks which one shows."""
    return _unified(diff) + "\n" + _split(diff)


TOGGLE = ('<div class="toggle">Diffs: <label for="view-unified">unified</label> '
          '<label for="view-split">side by side</label></div>')


def warning_html(warning: str | None) -> list[str]:
    """The hidden characters' warning as the page shows it, first (nothing without one)."""
    return [f'<div class="attention hidden-chars" role="alert"><p><b>{_e(warning)}</b></p></div>'] if warning else []


def page(title: str, body: list[str]) -> str:
    """The frame of every review page: `body` (already escaped HTML) in one self-contained file."""
    out = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        # Nothing may load or run: no script, no font, no image, no request of any kind.
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">",
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        '<input class="view" type="radio" name="view" id="view-unified" checked>',
        '<input class="view" type="radio" name="view" id="view-split">',
        "<main>",
        *body,
        '<p class="muted">Made by patchkit. Nothing on this page runs or loads anything.</p>',
        "</main></body></html>",
    ]
    return "\n".join(out) + "\n"


def render_html(review: Review) -> str:
    total = sum(review.counts.values()) or 1
    bar = "".join(f'<span class="s-{_e(s)}" style="width:{100 * n / total:.2f}%" title="{_e(s)}: {n}"></span>'
                  for s, n in sorted(review.counts.items(), key=lambda kv: _rank(kv[0])))
    summary = ", ".join(f"{n} {_e(s)}" for s, n in sorted(review.counts.items(), key=lambda kv: _rank(kv[0])))
    out = [f"<h1>{_e(review.title)}</h1>", *warning_html(review.warning)]
    if review.description:
        out.append(f"<p>{_marked(review.description)}</p>")
    out.append(f'<p class="muted">{"dry run, nothing written" if review.dry_run else _e(review.command)} · run '
               f"<code>{_e(review.run_id)}</code>"
               + (f" · recipe sha256 <code>{_e(review.recipe_sha256)}</code>" if review.recipe_sha256 else "")
               + "</p>")
    out.append(f'<h2>Hosts: {summary}</h2><div class="bar" role="img" aria-label="{summary}">{bar}</div>')
    if review.attention:
        out.append('<div class="attention"><h3>Needs attention</h3><ul>')
        for host, name, status, message in review.attention:
            out.append(f"<li>{_badge(status)} <b>{_e(host)}</b>{' / ' + _e(name) if name else ''}: {_marked(message)}</li>")
        out.append("</ul></div>")
    out.append('<div class="scroll"><table><tr><th>host</th><th>status</th><th>reached by</th><th>package</th></tr>')
    for h in review.hosts:
        out.append(f"<tr><td>{_e(h.name)}</td><td>{_badge(h.status)}</td><td>{_e(h.where)}</td>"
                   f"<td>{_e(h.versions)}</td></tr>")
    out.append("</table></div>")
    out.append(TOGGLE)
    for step in review.steps:
        bad = any(_rank(o.status) <= 3 for o in step.outcomes)
        out.append(f'<section class="step{" bad" if bad else ""}" id="step-{_e(step.name)}">'
                   f"<h2>{_e(step.name)} <span class=\"muted\">({_e(step.kind)})</span></h2>")
        if step.description:
            out.append(f"<p>{_marked(step.description)}</p>")
        if step.why:
            out.append(f"<p><b>why:</b> {_marked(step.why)}</p>")
        if step.upstream:
            out.append(f"<p><b>upstream:</b> <code>{_marked(step.upstream)}</code></p>")
        out.append("<table>")
        for outcome in step.outcomes:
            out.append(f"<tr><td>{_badge(outcome.status)}</td><td class=\"hosts\">{_e(', '.join(outcome.hosts))}</td>"
                       f"<td>{_marked(outcome.message)}</td></tr>")
        out.append("</table>")
        if step.facts:
            out.append('<dl class="facts">')
            for label, text in step.facts:
                body = f"<pre>{_marked(text)}</pre>" if "\n" in text or len(text) > 80 else f"<code>{_marked(text)}</code>"
                out.append(f"<dt>{_e(label)}</dt><dd>{body}</dd>")
            out.append("</dl>")
        for group in step.diffs:
            shared = f"{len(group.hosts)} hosts" if len(group.hosts) > 1 else "1 host"
            paths = f" (paths as on {_e(group.hosts[0])})" if len(group.hosts) > 1 else ""
            out.append(f'<h3 class="diff-hosts">diff on {shared}: {_e(", ".join(group.hosts))}{paths}</h3>')
            out.append(diff_html(group.text))
        out.append("</section>")
    return page(review.title, out)


# ---------------------------------------------------------------- Markdown

# Outside code, GitHub turns text into pings and links: `@user` and `@org/team` notify them,
# `#12`, `org/repo#12` and `GH-12` put a reference into that issue, and GFM's autolink
# extension links bare `http://`, `www.` and e-mail addresses. A backslash does not stop a
# mention (it is gone from the text GitHub's mention filter reads), an invisible character
# between `@` and the name would be the very thing reveal.py flags, and an HTML entity is
# decoded first. A code span stops all of them: the autolink extension does not look inside
# code spans, and GitHub's mention and reference filters skip <code>. So each such token is
# shown as code: whole, readable, and inert. A revealed character (<U+202E>) is shown as
# code too, so it stands out from the text around it. A code span has no escapes and ends at
# the first backtick run as long as its own (_code takes a longer one); a URL token stops at
# a backtick and at `|`, which splits a table cell even inside code and stays escaped outside.
_LIVE = re.compile(
    r"(?:[a-z][a-z0-9+.-]*://|www\.|mailto:|xmpp:)[^\s<>|`]*[^\s<>|`?!.,:;*_~'\")\]}]"  # a URL, as GFM ends one
    r"|[\w.+-]+@[\w-]+(?:\.[\w-]+)+"  # an e-mail address
    r"|(?<!\w)@[a-z0-9][\w.-]*(?:/[\w.-]+)?"  # a mention, of a user or a team
    r"|(?<![\w/])(?:[\w.-]+/[\w.-]+)?#\d+|\bgh-\d+"  # an issue or pull request reference
    r"|<U\+[0-9A-F]{4,6}>",
    re.IGNORECASE,
)


def _md(text: Any) -> str:
    """Inline text that GitHub shows as written: no HTML, no emphasis, no table break, one line,
    no mention or link (shown as code)."""
    flat = " ".join(str(text).split())
    out, at = [], 0
    for found in _LIVE.finditer(flat):
        out += [_md_plain(flat[at:found.start()]), _code(found.group())]
        at = found.end()
    return "".join(out) + _md_plain(flat[at:])


def _md_plain(text: str) -> str:
    return re.sub(r"([\\`*_\[\]|#~])", r"\\\1", html.escape(text, quote=False))


def _md_html(text: str) -> str:
    """Text inside our own HTML (a <summary>): escaped, a mention or link in <code>, as _md."""
    out, at = [], 0
    for found in _LIVE.finditer(text):
        out += [html.escape(text[at:found.start()]), f"<code>{html.escape(found.group())}</code>"]
        at = found.end()
    return "".join(out) + html.escape(text[at:])


def _fence(text: str, info: str = "") -> str:
    """A fenced code block no line of `text` can close: longer than any run of backticks in it
    (a closing fence is a line of at least as many backticks as the opening one)."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{info}\n{text.rstrip(chr(10))}\n{ticks}"


def _code(text: str) -> str:
    """A code span: its delimiter longer than any run of backticks in `text`; padded where
    CommonMark would otherwise take a backtick or a space at either end as part of it."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or (text.startswith(" ") and text.endswith(" ")) else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


md_text, md_fence, md_code, md_html = _md, _fence, _code, _md_html  # for the other review pages


def warning_md(warning: str | None) -> list[str]:
    """The hidden characters' warning as a Markdown alert, first (nothing without one)."""
    return ["> [!WARNING]", f"> {_md(warning)}", ""] if warning else []


def render_markdown(review: Review) -> str:
    summary = ", ".join(f"{n} {s}" for s, n in sorted(review.counts.items(), key=lambda kv: _rank(kv[0])))
    out = [f"## {_md(review.title)}", "", *warning_md(review.warning)]
    if review.description:
        out += [_md(review.description), ""]
    out += [f"{'dry run, nothing written' if review.dry_run else _md(review.command)} · run `{review.run_id}`"
            + (f" · recipe sha256 `{review.recipe_sha256[:16]}`" if review.recipe_sha256 else ""), "",
            f"**Hosts:** {_md(summary)}", ""]
    if review.attention:
        out.append("**Needs attention:**")
        out.append("")
        out += [f"- **{_md(status)}** {_md(host)}{' / ' + _md(name) if name else ''}: {_md(message)}"
                for host, name, status, message in review.attention]
        out.append("")
    out += ["| host | status | reached by | package |", "|---|---|---|---|"]
    out += [f"| {_md(h.name)} | {_md(h.status)} | {_md(h.where)} | {_md(h.versions)} |" for h in review.hosts]
    out.append("")
    for step in review.steps:
        where = "; ".join(f"{o.status} on {len(o.hosts)}" for o in step.outcomes)
        summary_line = f"<summary><b>{_md_html(step.name)}</b> ({_md_html(step.kind)}): {_md_html(where)}</summary>"
        out += ["<details>", summary_line, ""]
        for label, value in ((None, step.description), ("why", step.why), ("upstream", step.upstream)):
            if value:
                out += [f"{'**' + label + ':** ' if label else ''}{_md(value)}", ""]
        out += [f"- **{_md(o.status)}** on {_md(', '.join(o.hosts))}: {_md(o.message)}" for o in step.outcomes]
        out.append("")
        for label, text in step.facts:
            if "\n" in text or len(text) > 80:
                out += [f"{_md(label)}:", "", _fence(text), ""]
            else:
                out += [f"{_md(label)}: {_code(text)}", ""]
        for group in step.diffs:
            out += [f"diff on {_md(', '.join(group.hosts))}:", "", _fence(group.text, "diff"), ""]
        out += ["</details>", ""]
    return "\n".join(out)
