"""Showing results: one JSON document, or diffs and a summary table for humans."""

from __future__ import annotations

import sys
from typing import TextIO

from patchkit.results import RunReport

STATUS_STYLE = {
    "changed": "bold yellow", "ok": "green", "skipped": "dim", "failed": "bold red",
    "applied": "green", "pending": "yellow", "drifted": "bold magenta", "stale": "bold magenta", "not-applicable": "dim",
}


def print_json(report: RunReport, out: TextIO = sys.stdout) -> None:
    out.write(report.model_dump_json(indent=2, exclude_none=False) + "\n")


def print_human(report: RunReport, out: TextIO = sys.stdout) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(file=out, highlight=False, soft_wrap=True)
    shown: dict[str, list[str]] = {}
    for host, result in report.hosts.items():
        for step in result.steps:
            if step.diff:
                shown.setdefault(step.diff, []).append(f"{host}/{step.name}")
    for diff, where in shown.items():
        console.print(Text(f"# {', '.join(where)}", style="bold"))
        for line in diff.splitlines():
            style = "green" if line.startswith("+") else "red" if line.startswith("-") else "cyan" if line.startswith("@@") else ""
            if line.startswith(("+++", "---")):
                style = "bold"
            console.print(Text(line, style=style))
        console.print()

    about = {(s.name, s.why, s.upstream) for r in report.hosts.values() for s in r.steps if s.why or s.upstream}
    for name, why, upstream in sorted(about, key=lambda a: a[0]):  # a step's `why:` and `upstream:`
        console.print(Text(f"{name}:", style="bold"), *(f"{key}: {value}" for key, value in (
            ("why", why), ("upstream", upstream)) if value))
    title = f"{report.command} {report.recipe}" + (" (dry run)" if report.dry_run else "") + f" · run {report.run_id}"
    table = Table(title=title, title_justify="left", show_lines=False)
    table.add_column("host")
    table.add_column("step")
    table.add_column("status")
    table.add_column("message", overflow="fold")
    for host, result in report.hosts.items():
        if not result.steps:
            table.add_row(host, "-", Text(result.status, style=STATUS_STYLE.get(result.status, "")), result.message)
        for i, step in enumerate(result.steps):
            table.add_row(host if i == 0 else "", step.name, Text(step.status, style=STATUS_STYLE.get(step.status, "")),
                          step.message)
        if result.steps and result.message:
            table.add_row("", "", "", result.message)
    console.print(table)
    for host, result in report.hosts.items():
        for notice in result.notices:
            console.print(Text(f"note: {host}: {notice}", style="yellow"))
    counts: dict[str, int] = {}
    for result in report.hosts.values():
        counts[result.status] = counts.get(result.status, 0) + 1
    console.print("hosts: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
