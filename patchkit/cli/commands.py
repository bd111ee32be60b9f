"""One function per command, and `COMMANDS`, the table from a command's name to it.

Each function takes the parsed arguments and returns the exit code: 0 every host fine; 1 a
host failed; 2 usage or recipe error (nothing contacted); 3 for `status` and `audit`: a
host is drifted or pending (any command: a server runs older code than the disk holds).
A usage error is raised as UsageError (cli/main.py says it). The commands that work on
hosts (apply, plan, status, rollback, history, audit, capture) share one path, `_on_hosts`,
and differ by their `HostWork`: what is done on each host and what the command adds around
the run. What a command's start does to stay cheap is in cli/startup.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from patchkit.cli import startup
from patchkit.cli.targets import hosts_of, per_host, prepare, rollout, split, warn_unused, with_inventory_problems

if TYPE_CHECKING:
    from patchkit.commands.capture import Capture
    from patchkit.fleet.inventory import HostSpec
    from patchkit.host.transport.early import EarlyReach
    from patchkit.recipe.model import LoadedRecipe
    from patchkit.run.results import HostResult, RunReport
    from patchkit.run.runner import Runner, Session

    Work = Callable[[Session], Awaitable[HostResult]]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOT_CONVERGED = 0, 1, 2, 3
EXIT_INTERRUPTED = 130


def completion(args: argparse.Namespace) -> int:
    """patchkit completion SHELL: the shell's completion script, from the parser itself."""
    from patchkit.cli.completion import script
    from patchkit.cli.parser import build_parser

    sys.stdout.write(script(build_parser(), args.shell))
    return EXIT_OK


def schema(args: argparse.Namespace) -> int:
    """patchkit schema [--report]: the JSON Schema of the recipe format, or of the --json report."""
    if args.report:
        from patchkit.run.results import RunReport

        print(json.dumps(RunReport.model_json_schema(), indent=2))
        return EXIT_OK
    import patchkit.run.steps.registry  # noqa: F401 - the step kinds a recipe's steps may be
    from patchkit.recipe.model import recipe_model

    print(json.dumps(recipe_model().model_json_schema(by_alias=True), indent=2))
    return EXIT_OK


def validate(args: argparse.Namespace) -> int:
    """patchkit validate RECIPE [-i INVENTORY]: the recipe checked (with each host's variables);
    no host contacted."""
    from patchkit.base.errors import UsageError

    prepared = prepare(args, rendered_per_host=True, bases=False)
    source, loaded = prepared.source, prepared.loaded
    assert source
    hosts = hosts_of(args, resolve=False)[0] if args.inventory else []
    if hosts:
        loaded = per_host(args, source, prepared.extra, hosts, bases=False)[hosts[0].name]
    elif loaded is None:  # every selected group is resolved at run time: no host to render for
        raise with_inventory_problems(prepared.base_error or UsageError("no host to check"), args)
    else:
        warn_unused(args, source, prepared.extra, [])
    steps = ", ".join(f"{s.name} ({s.kind})" for s in loaded.recipe.steps)
    on = f" (with the variables of {len(hosts)} host{'s' if len(hosts) != 1 else ''})" if hosts else ""
    print(f"{args.recipe}: valid recipe {loaded.recipe.name}{on}: {steps}")
    return EXIT_OK


def test(args: argparse.Namespace) -> int:
    """patchkit test RECIPE: the recipe's patch steps planned on every release of their package."""
    prepared = prepare(args)
    from patchkit.commands.releasetest.command import TestOptions, run

    assert prepared.loaded
    _check_outputs(args)
    startup.started()  # then hours of release installs: collected as usual
    return run(prepared.loaded, TestOptions(split(args.steps), args.dist, args.versions, args.jobs, args.strict,
                                            args.json, prepared.overrides.get("python"), args.html, args.markdown),
               lambda: hosts_of(args)[0])


def bundle(args: argparse.Namespace) -> int:
    """patchkit bundle RECIPE -o FILE: the recipe's patch and check steps, built for every release
    they apply to, as one file a container's Python runs before its server (commands/bundle.py)."""
    prepared = prepare(args)
    from patchkit.commands.bundle import BundleOptions, run
    from patchkit.commands.outfile import check_output

    assert prepared.loaded
    check_output(args.output, "-o")
    startup.started()
    return run(prepared.loaded, BundleOptions(args.output, split(args.steps), args.versions, args.dist, args.jobs))


def bake(args: argparse.Namespace) -> int:
    """patchkit bake RECIPE --from IMAGE -t TAG: plan, then apply, in a container of IMAGE;
    commit it as TAG if all went well."""
    prepared = prepare(args)
    loaded = prepared.loaded
    assert loaded
    _logs_and_checks(args, loaded)
    startup.started()

    from patchkit.base.errors import HostError
    from patchkit.commands.bake import BakeSpec, bake as bake_image
    from patchkit.report.output import print_human, print_json
    from patchkit.run.journal import new_run_id
    from patchkit.run.results import RunReport
    from patchkit.run.runner import Options, Runner

    python = prepared.overrides.get("python")
    spec = BakeSpec(image=args.image, tag=args.tag, engine=args.engine, engine_args=list(args.engine_arg),
                    run_args=list(args.run_arg), python=python, state_dir=args.state_dir,
                    timeout_s=args.timeout, allow_skipped=args.allow_skipped)
    run_id = new_run_id()

    def work(host: HostSpec, dry_run: bool) -> RunReport:
        import asyncio

        options = Options(steps=split(args.steps), dry_run=dry_run, python=python,
                          concurrency=1, progress=not args.json or sys.stderr.isatty(), changes_note=False)
        runner = Runner(loaded, options, run_id if not dry_run else new_run_id(), "plan" if dry_run else "apply")
        results = asyncio.run(runner.on_hosts([host], runner.apply))
        report = RunReport(recipe=loaded.recipe.name, run_id=runner.run_id, dry_run=dry_run,
                           command="plan" if dry_run else "bake", hosts=results)
        if not (args.json and dry_run):  # --json: one document on stdout, the apply's
            (print_json if args.json else print_human)(report)
        return report

    def say(text: str) -> None:
        print(f"patchkit: {text}", file=sys.stderr, flush=True)

    try:
        report, written = bake_image(spec, run_id, work, say)
    except HostError as exc:
        say(str(exc))
        return EXIT_FAILED
    if report is not None and args.json and not written and report.dry_run:
        print_json(report)  # the failed plan is the document
    return EXIT_OK if written else EXIT_FAILED


class HostWork(NamedTuple):
    """What a command does on each host, and what it adds around the run."""

    work: Callable[[Runner], Work]  # the coroutine run for each host's session
    modules: tuple[str, ...] = ()  # its own code, imported while the first hosts connect
    changes: bool = False  # it changes hosts: the recipe's and the inventory's `serial:` pace it
    dry_run: bool = False
    pending_not_converged: bool = False  # a drifted or pending host or step: exit 3
    outputs: Callable[[], None] | None = None  # its own files checked, before any host is reached
    hosts_check: Callable[[list[HostSpec]], None] | None = None  # refuses a selection (UsageError)
    finish: Callable[[RunReport], None] | None = None  # after a run with no host failed
    edits: bool = True  # it computes the recipe's edits: a based diff's base release is fetched first


def apply(args: argparse.Namespace) -> int:
    """patchkit apply RECIPE: verified; a failed check restores the original."""
    return _on_hosts(args, HostWork(lambda runner: runner.apply, changes=True, dry_run=args.dry_run))


def plan(args: argparse.Namespace) -> int:
    """patchkit plan RECIPE: apply --dry-run: unified diffs, nothing written."""
    return _on_hosts(args, HostWork(lambda runner: runner.apply, dry_run=True))


def status(args: argparse.Namespace) -> int:
    """patchkit status RECIPE: per host and step, applied | pending | drifted | stale | not-applicable."""
    return _on_hosts(args, HostWork(lambda runner: runner.status, pending_not_converged=True))


def rollback(args: argparse.Namespace) -> int:
    """patchkit rollback RECIPE [--run RUN_ID] [--force]: the last (or named) run undone."""
    return _on_hosts(args, HostWork(lambda runner: runner.rollback, changes=True, edits=False))


def history(args: argparse.Namespace) -> int:
    """patchkit history: the runs recorded in each host's journal."""
    return _on_hosts(args, HostWork(lambda runner: runner.history))


def audit(args: argparse.Namespace) -> int:
    """patchkit audit DIST: installed files that differ from the distribution's RECORD, each
    explained by the journal or unexplained (exit 3)."""
    def work(runner: Runner) -> Work:
        from functools import partial

        from patchkit.commands.audit import audit_host

        return partial(audit_host, dist=args.dist, budget_s=args.time_budget)

    return _on_hosts(args, HostWork(work, modules=("patchkit.commands.audit",), pending_not_converged=True))


def capture(args: argparse.Namespace) -> int:
    """patchkit capture DIST -o RECIPE.yaml: the hand edits of one host's distribution, as a recipe."""
    captures: list[Capture] = []

    def work(runner: Runner) -> Work:
        from functools import partial

        from patchkit.commands.capture import capture_host

        return partial(capture_host, dist=args.dist, wheel=Path(args.wheel) if args.wheel else None, out=captures)

    def outputs() -> None:
        from patchkit.commands.outfile import check_output

        check_output(args.output, "-o", replace=False)  # a recipe someone may have edited is never written over

    def one_host(hosts: list[HostSpec]) -> None:
        from patchkit.base.errors import UsageError

        if len(hosts) != 1:
            raise UsageError(f"capture reads one host; -l names {len(hosts)}: pick one")

    def write(report: RunReport) -> None:
        import datetime

        from patchkit.base.errors import HostError
        from patchkit.commands.capture import write_recipe

        if not captures:
            return
        host = next(iter(report.hosts.values()))
        try:
            written = write_recipe(captures[0], Path(args.output), datetime.datetime.now(datetime.UTC))
        except HostError as exc:
            host.status, host.message = "failed", str(exc)
            return
        host.message += "; wrote " + ", ".join(str(p) for p in written)

    return _on_hosts(args, HostWork(work, modules=("patchkit.commands.capture",), outputs=outputs,
                                    hosts_check=one_host, finish=write))


class Command(NamedTuple):
    run: Callable[[argparse.Namespace], int]
    reaches_hosts: bool = False  # an inventory's hosts: its start warms up SSH (cli/startup.py)


# Each command's function, by the name build_parser (cli/parser.py) declares for it.
COMMANDS: dict[str, Command] = {
    "apply": Command(apply, reaches_hosts=True),
    "plan": Command(plan, reaches_hosts=True),
    "status": Command(status, reaches_hosts=True),
    "rollback": Command(rollback, reaches_hosts=True),
    "history": Command(history, reaches_hosts=True),
    "audit": Command(audit, reaches_hosts=True),
    "capture": Command(capture, reaches_hosts=True),
    "validate": Command(validate),
    "schema": Command(schema),
    "completion": Command(completion),
    "test": Command(test),
    "bake": Command(bake),
    "bundle": Command(bundle),
}


def _on_hosts(args: argparse.Namespace, how: HostWork) -> int:
    """The path of every command that works on hosts: recipe and inventory checked (nothing
    contacted before: exit 2), then the run on the selected hosts, then the report."""
    from patchkit.base.errors import HostError, UsageError

    prepared = prepare(args, rendered_per_host=True, bases=how.edits)
    source, loaded = prepared.source, prepared.loaded
    _check_outputs(args)  # before any inventory group is resolved (a cluster asked) or host reached
    if how.outputs:
        how.outputs()
    early: tuple[list[HostSpec], list[int | str] | int | str | None] | None = None
    rendered: dict[str, LoadedRecipe] = {}
    if loaded is None and source is not None:  # to be rendered per host first
        try:
            early = hosts_of(args)
        except HostError as exc:
            print(f"patchkit: {exc}", file=sys.stderr)
            return EXIT_FAILED
        except UsageError as exc:  # the inventory is broken too: both, grouped per file
            raise UsageError(f"{prepared.base_error}\n{exc}") from None
        rendered = per_host(args, source, prepared.extra, early[0], bases=how.edits)
        loaded = rendered[early[0][0].name]
    _logs_and_checks(args, loaded)
    try:
        hosts, inventory_serial = early or hosts_of(args)
    except HostError as exc:  # a selector group kubectl could not list
        print(f"patchkit: {exc}", file=sys.stderr)
        return EXIT_FAILED
    serial, max_fail = rollout(args, loaded, inventory_serial, how.changes)
    if source is not None and not rendered:
        rendered = per_host(args, source, prepared.extra, hosts, bases=how.edits)
    if rendered:  # a host's variables may bring secrets the recipe's alone do not: the logs hide them too
        from patchkit.base import logs
        from patchkit.recipe.redact import Redactor

        logs.configure(args.log_format, args.verbose,
                       redact=Redactor.joined([r.redactor for r in [loaded, *rendered.values()] if r]).value)
    if how.hosts_check:
        how.hosts_check(hosts)

    started_at = time.monotonic()

    async def run(early: EarlyReach) -> tuple[Runner, dict[str, HostResult]]:
        from patchkit.run.journal import new_run_id
        from patchkit.run.runner import Options, Runner

        options = Options(
            steps=split(getattr(args, "steps", None)),
            dry_run=how.dry_run,
            force=getattr(args, "force", False),
            run=getattr(args, "run", None),
            python=prepared.overrides.get("python"),
            concurrency=args.concurrency,
            lock_timeout=args.lock_timeout,
            state_dir=args.state_dir,
            serial=serial,
            max_fail=max_fail,
            progress=not args.json or sys.stderr.isatty(),
            verify_all=getattr(args, "verify_all", False),
            no_restart=getattr(args, "no_restart", False),
            accept_new_host_keys=args.accept_new_host_keys,
            early=early,
            history_recipe=getattr(args, "recipe_name", None),
            history_since=getattr(args, "since", None),
        )
        runner = Runner(loaded, options, new_run_id(), args.command, per_host=rendered)
        return runner, await runner.on_hosts(hosts, how.work(runner))

    runner, results = startup.reach_then_run(hosts, args.concurrency, serial, args.accept_new_host_keys,
                                             how.modules, run)

    from patchkit.commands.outfile import OutputError
    from patchkit.report.output import print_human, print_json
    from patchkit.run.results import RunReport

    report = RunReport(recipe=loaded.recipe.name if loaded else "", run_id=runner.run_id, dry_run=how.dry_run,
                       command=args.command, hosts=results, seconds=round(time.monotonic() - started_at, 3)).count()
    if how.finish and all(h.status != "failed" for h in results.values()):
        how.finish(report)
    try:
        _write_review(args, report, loaded, hosts, rendered)
        unwritten = None
    except OutputError as exc:  # said after the report: what was asked for but not written fails the run
        unwritten = str(exc)
    if getattr(args, "markdown", None) != "-":
        if args.json:
            print_json(report)
        else:
            print_human(report, verbose=args.verbose)
    if args.json or not sys.stdout.isatty():  # on a terminal the summary line below the table says it
        for warning in report.warnings:
            print(f"patchkit: warning: {warning}", file=sys.stderr)
    if unwritten:
        print(f"patchkit: {unwritten}", file=sys.stderr)
    if runner.interrupt.requested:
        return EXIT_INTERRUPTED
    if runner.untrusted_state:
        return EXIT_USAGE
    code = _exit_code(report, how.pending_not_converged)
    return max(code, EXIT_FAILED) if unwritten else code


def _logs_and_checks(args: argparse.Namespace, loaded: LoadedRecipe | None) -> None:
    """Logging configured (the recipe's secrets hidden), --steps checked, the cache folder
    checked: the last checks before any host is contacted."""
    from patchkit.base import logs
    from patchkit.base.cache import check as check_cache

    logs.configure(args.log_format, args.verbose, redact=loaded.redactor.value if loaded else None)
    if loaded:
        loaded.recipe.select(split(args.steps))  # unknown step names: usage error before contacting anyone
    check_cache()  # another user's cache folder: refused before any host is contacted
    for key, value, source in getattr(args, "configured", ()):
        logs.get_logger().info("config", key=key, value=value, source=source)


def _check_outputs(args: argparse.Namespace) -> None:
    """--html and --markdown checked before any host or cluster is contacted
    (patchkit/commands/outfile.py): a usage error, nothing done."""
    from patchkit.base.errors import UsageError

    if getattr(args, "markdown", None) == "-" and getattr(args, "json", False):
        raise UsageError("--markdown - and --json both want stdout: write one of them to a file")
    from patchkit.commands.outfile import check_output

    for flag in ("html", "markdown"):
        value = getattr(args, flag, None)
        if value is not None and value != "-":
            check_output(value, f"--{flag}")


def _write_review(args: argparse.Namespace, report: RunReport, loaded: LoadedRecipe | None,
                  hosts: list[HostSpec], rendered: dict[str, LoadedRecipe]) -> None:
    """--html FILE / --markdown FILE|-: the reviewer's page of the report (patchkit/report/review.py)."""
    html_file, md_file = getattr(args, "html", None), getattr(args, "markdown", None)
    if not html_file and not md_file:
        return
    from patchkit.commands.outfile import write_output
    from patchkit.report.review import build_review, render_html, render_markdown
    from patchkit.run.runner import transport_of

    where = {h.name: " ".join(dict.fromkeys(transport_of(h))) for h in hosts}
    review = build_review(report, loaded, where, rendered)
    if html_file:
        write_output(html_file, render_html(review), "--html")
    if md_file == "-":
        sys.stdout.write(render_markdown(review))
    elif md_file:
        write_output(md_file, render_markdown(review), "--markdown")


def _exit_code(report: RunReport, pending_not_converged: bool) -> int:
    statuses = [h.status for h in report.hosts.values()]
    step_statuses = [s.status for h in report.hosts.values() for s in h.steps]
    if "failed" in statuses:
        return EXIT_FAILED
    if pending_not_converged and ({"drifted", "pending"} & (set(statuses) | set(step_statuses))):
        return EXIT_NOT_CONVERGED
    if "stale" in set(statuses) | set(step_statuses):  # a server runs older code than the disk holds
        return EXIT_NOT_CONVERGED
    return EXIT_OK
