"""Showing results: one JSON document, or diffs and a summary table for humans."""

from __future__ import annotations

import re
import sys
from typing import Any, TextIO

from patchkit.run.results import RunReport
from patchkit.base.reveal import Reveal

_HEADER = re.compile(r"^(---|\+\+\+) (?:[ab]/)?(.*)$")

STATUS_STYLE = {
    "changed": "bold yellow", "ok": "green", "skipped": "dim", "failed": "bold red",
    "applied": "green", "pending": "yellow", "drifted": "bold magenta", "stale": "bold magenta", "not-applicable": "dim",
}


def print_json(report: RunReport, out: TextIO = sys.stdout) -> None:
    # history's runs are in each host's `runs`; its `steps` (a row per run) are for the eye only
    exclude: Any = {"hosts": {"__all__": {"steps"}}} if report.command == "history" else None
    out.write(report.model_dump_json(indent=2, exclude_none=False, exclude=exclude) + "\n")


def diff_key(diff: str) -> str:
    """A diff without its paths' folders: hosts holding the package in different places share it."""
    return "\n".join(_HEADER.sub(lambda m: f"{m.group(1)} {m.group(2).rsplit('/', 1)[-1]}", line)
                     for line in diff.splitlines())


def shared_diffs(report: RunReport) -> dict[str, tuple[str, list[str]]]:
    """Each distinct diff once: key -> (the first host's diff, the host/step pairs that make it)."""
    shown: dict[str, tuple[str, list[str]]] = {}
    keys: dict[str, str] = {}  # a fleet's hosts mostly show the same diff: each text keyed once
    for host, result in report.hosts.items():
        for step in result.steps:
            if step.diff:
                key = keys.get(step.diff)
                if key is None:
                    key = keys[step.diff] = diff_key(step.diff)
                shown.setdefault(key, (step.diff, []))[1].append(f"{host}/{step.name}")
    return shown


def _one_line(text: str) -> str:
    return " ".join(text.replace("\t", " ").splitlines())


def where_lines(report: RunReport) -> list[str]:
    """How each host was reached (-v): its transport and address, as --json says them."""
    return [f"{host}: {result.transport or '?'} {result.address or ''}".rstrip() for host, result in report.hosts.items()]


def print_plain(report: RunReport, out: TextIO = sys.stdout, verbose: bool = False) -> None:
    """For a pipe or a file: no colour, no box, nothing cut; a line per host and step with tabs
    between host, step, status and message; diffs once each, under a `#` line naming where.
    With `verbose`, a `# via` line per host names its transport and address. Hidden characters
    (a bidi control, a zero-width space) are shown as <U+XXXX>, counted in a `# warning:` line first."""
    shown = Reveal()  # each text before a line of it is split: U+2028 is a line break to the eye, not to Python

    def one_line(text: str) -> str:
        return _one_line(shown(text))

    lines: list[str] = [f"# {one_line(_title(report))}\n"]  # what follows is this run's
    if verbose:
        lines += [f"# via {one_line(line)}\n" for line in where_lines(report)]
    for diff, where in shared_diffs(report).values():
        lines.append(f"# {shown(', '.join(where))}\n{shown(diff).rstrip(chr(10))}\n\n")
    for name, why, upstream in _about(report):
        lines.append(" ".join([f"{shown(name)}:", *(f"{key}: {one_line(value)}" for key, value in (
            ("why", why), ("upstream", upstream)) if value)]) + "\n")
    notes: list[str] = []
    for host, result in report.hosts.items():
        if not result.steps:
            lines.append(f"{one_line(host)}\t-\t{result.status}\t{one_line(result.message)}\n")
        elif result.message:
            notes.append(f"note: {one_line(host)}: {one_line(result.message)}")
        for step in result.steps:
            lines.append(f"{one_line(host)}\t{one_line(step.name)}\t{step.status}\t{one_line(step.message)}\n")
        notes += [f"note: {one_line(host)}: {one_line(n)}" for n in result.notices]
    lines += [note + "\n" for note in notes]
    lines.append(one_line(_host_counts(report)) + "\n")
    warning = shown.warning(_noun(report))
    out.write((f"# {warning}\n" if warning else "") + "".join(lines))


def _title(report: RunReport) -> str:
    return f"{report.command} {report.recipe}" + (" (dry run)" if report.dry_run else "") + f" · run {report.run_id}"


def _noun(report: RunReport) -> str:
    return "plan" if report.dry_run else "report"


def _about(report: RunReport) -> list[tuple[str, str | None, str | None]]:
    about = {(s.name, s.why, s.upstream) for r in report.hosts.values() for s in r.steps if s.why or s.upstream}
    return sorted(about, key=lambda a: a[0])


def _host_counts(report: RunReport) -> str:
    counts: dict[str, int] = {}
    for result in report.hosts.values():
        counts[result.status] = counts.get(result.status, 0) + 1
    return "hosts: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + "".join(
        f" · warning: {w}" for w in report.warnings)


def print_human(report: RunReport, out: TextIO = sys.stdout, verbose: bool = False) -> None:
    """A terminal's view (colours, a table); anything else gets print_plain. `verbose`: each
    host's transport and address too."""
    if not out.isatty():
        print_plain(report, out, verbose)
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    # Every piece of text is a Text (never parsed as rich markup: a message's `[link=...]` or
    # `[/b]` is shown as written) and is shown through one Reveal, whose count heads the output.
    shown = Reveal()
    items: list[Text | Table] = []
    for diff, where in shared_diffs(report).values():
        items.append(Text(shown(f"# {', '.join(where)}"), style="bold"))
        for line in shown(diff).splitlines():
            style = "green" if line.startswith("+") else "red" if line.startswith("-") else "cyan" if line.startswith("@@") else ""
            if line.startswith(("+++", "---")):
                style = "bold"
            items.append(Text(line, style=style))
        items.append(Text(""))

    table = Table(title=Text(shown(_title(report))), title_justify="left", show_lines=False)
    steps = [s.name for r in report.hosts.values() for s in r.steps]
    # Nothing is cut: a step column as wide as its longest name (history's run ids are what
    # rollback --run takes), the rest folded.
    table.add_column("host", overflow="fold")
    table.add_column("step", overflow="fold", min_width=min(40, max((len(n) for n in steps), default=4)))
    table.add_column("status", overflow="fold")
    table.add_column("message", overflow="fold")
    for host, result in report.hosts.items():
        if not result.steps:
            table.add_row(Text(shown(host)), "-", Text(result.status, style=STATUS_STYLE.get(result.status, "")),
                          Text(shown(result.message)))
        for i, step in enumerate(result.steps):
            table.add_row(Text(shown(host)) if i == 0 else "", Text(shown(step.name)),
                          Text(step.status, style=STATUS_STYLE.get(step.status, "")), Text(shown(step.message)))
    items.append(table)
    for name, why, upstream in _about(report):  # a step's `why:` and `upstream:`, under the table naming it
        items.append(Text.assemble((f"{shown(name)}:", "bold"), *(f" {key}: {shown(value)}" for key, value in (
            ("why", why), ("upstream", upstream)) if value)))
    if verbose:
        items += [Text(f"via {shown(line)}", style="dim") for line in where_lines(report)]
    for host, result in report.hosts.items():
        if result.steps and result.message:  # the host's own note, not a row that reads as its last step's
            items.append(Text(f"note: {shown(host)}: {shown(result.message)}", style="yellow"))
        items += [Text(f"note: {shown(host)}: {shown(notice)}", style="yellow") for notice in result.notices]
    items.append(Text(shown(_host_counts(report))))
    console = Console(file=out, highlight=False, soft_wrap=True)
    warning = shown.warning(_noun(report))
    if warning:
        console.print(Text(warning, style="bold red"))
    for item in items:
        console.print(item)
