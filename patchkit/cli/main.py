"""The edge: arguments in, one report out, an exit code. Logging is configured here only.

Exit codes: 0 every host fine; 1 a host failed; 2 usage or recipe error (nothing
contacted); 3 for `status`: a host is drifted or pending.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import types
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:  # imported where used: `patchkit validate` and --help stay fast
    from patchkit.commands.capture import Capture
    from patchkit.base.errors import UsageError
    from patchkit.fleet.inventory import HostSpec
    from patchkit.fleet.sources import LoadedInventory
    from patchkit.recipe.model import LoadedRecipe, RecipeSource
    from patchkit.recipe.variables import Given
    from patchkit.run.results import HostResult, RunReport
    from patchkit.base.rollout import Size
    from patchkit.run.runner import Runner, Session
    from patchkit.host.transport.early import EarlyReach

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOT_CONVERGED = 0, 1, 2, 3
# The commands that contact the inventory's hosts (the SSH helper starts for them only).
REACHES_HOSTS = frozenset({"apply", "plan", "status", "rollback", "history", "audit", "capture"})


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="patchkit", description="Idempotent, verified patches to installed Python packages, on one host or a fleet.")
    from patchkit import __version__

    p.add_argument("--version", action="version", version=f"patchkit {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def targets(sp: argparse.ArgumentParser, recipe: bool = True) -> None:
        if recipe:
            sp.add_argument("recipe", help="recipe YAML file")
        sp.add_argument("-i", "--inventory", action="append", default=[], metavar="INVENTORY",
                        help="patchkit inventory YAML, or an Ansible inventory (INI, YAML, folder, script, or the JSON "
                             "of ansible-inventory --list); several merge, the later winning per host "
                             "(default: this machine, local transport)")
        sp.add_argument("-l", "--limit", help="host pattern: HOST|GROUP|all|GLOB, joined by , or : (union), :&X (and), :!X (not)")
        sp.add_argument("-e", "--extra-var", action="append", default=[], metavar="KEY=VALUE|@FILE|JSON",
                        help="set recipe variables (over the inventory's): KEY=VALUE, @vars.yml or '{\"k\": 1}'; "
                             "python=PATH picks the target interpreter")
        sp.add_argument("--strict", action="store_true",
                        help="a variable from -e or the inventory that the recipe does not use is an error, not a warning")
        sp.add_argument("--json", action="store_true", help="one JSON document on stdout")
        sp.add_argument("--html", metavar="FILE", help="also write the report as one self-contained HTML page")
        sp.add_argument("--markdown", metavar="FILE", help="also write the report as Markdown (- for stdout)")
        sp.add_argument("--concurrency", type=_at_least_one, default=32, help="hosts worked on at once (default 32)")
        sp.add_argument("--serial", metavar="N[,N|P%...]",
                        help="rollout batches, e.g. 1,10%%,100%%: a batch starts once every host before it succeeded "
                             "(gates included); a single N: the first N hosts, then the rest")
        sp.add_argument("--max-fail", metavar="K|P%", help="stop starting hosts once more than K (or P%% of them) have failed")
        sp.add_argument("--lock-timeout", type=_seconds, default=60.0, help="seconds to wait for another run's host lock (default 60)")
        sp.add_argument("--state-dir", help="journal folder on hosts that set none (default ~/.local/state/patchkit)")
        sp.add_argument("--accept-new-host-keys", action="store_true",
                        help="SSH: record the key of a host seen for the first time (a changed key is still refused)")
        sp.add_argument("--log-format", choices=["console", "json"], default="console")
        sp.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
        if recipe:
            sp.add_argument("--steps", help="only these steps: NAME[,...]")

    apply = sub.add_parser("apply", help="apply a recipe (verified; a failed check restores the original)")
    targets(apply)
    apply.add_argument("--dry-run", action="store_true", help="show diffs, write nothing (same as plan)")
    apply.add_argument("--no-restart", action="store_true",
                       help="launch: never restart a running server: a different command fails, a server "
                            "running code older than the disk is reported `stale` (exit 3)")
    plan = sub.add_parser("plan", help="unified diffs of what apply would change; nothing written")
    status = sub.add_parser("status", help="per host and step: applied | pending | drifted | stale | not-applicable")
    for command in (apply, plan, status):
        if command is not apply:
            targets(command)
        command.add_argument("--verify-all", action="store_true",
                             help="deploy: re-hash every file, ignoring hash caches")
    rollback = sub.add_parser("rollback", help="undo the last (or named) run from the host's journal")
    targets(rollback)
    rollback.add_argument("--run", help="run id to undo (default: the newest with a change not yet undone)")
    rollback.add_argument("--force", action="store_true", help="restore even files that changed since")
    targets(sub.add_parser("history", help="runs recorded in each host's journal"), recipe=False)
    audit = sub.add_parser("audit", help="installed files of a distribution that differ from its RECORD, "
                           "each explained by the journal or unexplained (exit 3)")
    audit.add_argument("dist", metavar="DIST", help="distribution name, or the import name of its package (vllm)")
    audit.add_argument("--time-budget", type=_seconds, default=None, metavar="SECONDS",
                       help="stop hashing after this long (default 120 s); the report says how far it got")
    targets(audit, recipe=False)
    capture = sub.add_parser("capture", help="the files of a distribution that differ from its RECORD (hand "
                             "edits), as a recipe; nothing on the host is changed")
    capture.add_argument("dist", metavar="DIST", help="distribution name, or the import name of its package (vllm)")
    capture.add_argument("-o", "--output", required=True, metavar="RECIPE.yaml",
                         help="the recipe to write (.patch files go next to it)")
    capture.add_argument("--wheel", help="the wheel the distribution was installed from (default: pip download)")
    targets(capture, recipe=False)
    validate = sub.add_parser("validate", help="schema check of a recipe; no host contacted")
    validate.add_argument("recipe")
    validate.add_argument("-e", "--extra-var", action="append", default=[], metavar="KEY=VALUE|@FILE|JSON")
    validate.add_argument("-i", "--inventory", action="append", default=[], metavar="INVENTORY",
                          help="also check the recipe with each host's variables (no host contacted; groups "
                               "resolved at run time, k8s_selector and ray, are named and not checked)")
    validate.add_argument("-l", "--limit", help="host pattern, as for apply")
    validate.add_argument("--strict", action="store_true", help="an -e variable the recipe does not use is an error")
    schema = sub.add_parser("schema", help="JSON Schema of the recipe format (--report: of the --json report)")
    schema.add_argument("--report", action="store_true", help="the JSON Schema of what --json prints")
    completion = sub.add_parser("completion", help="a shell completion script (bash, zsh or fish) on stdout")
    completion.add_argument("shell", choices=["bash", "zsh", "fish"])
    test = sub.add_parser("test", help="plan the recipe's patch steps on every release of their package "
                          "(from the package index, through pip); no host contacted")
    test.add_argument("recipe")
    test.add_argument("--dist", help="the distribution whose releases to try (default: each step's package)")
    test.add_argument("--versions", metavar="SPEC|all|installed",
                      help="releases to try: a specifier ('>=0.14,<0.20'), all (default), or installed "
                           "(the release a host of -i/-l or -e python= has, read through the agent)")
    test.add_argument("--steps", help="only these steps: NAME[,...]")
    test.add_argument("--jobs", type=_at_least_one, default=4, help="wheels fetched at once (default 4)")
    test.add_argument("--strict", action="store_true", help="exit 1 on warnings too (a range that may be too narrow)")
    test.add_argument("--json", action="store_true", help="the whole matrix as one JSON document on stdout")
    test.add_argument("--html", metavar="FILE", help="also write the matrix as one self-contained review page: "
                      "per release and step the outcome, each distinct diff once with its releases")
    test.add_argument("--markdown", metavar="FILE", help="also write that page as Markdown (- for stdout, "
                      "instead of the table)")
    test.add_argument("-e", "--extra-var", action="append", default=[], metavar="KEY=VALUE|@FILE|JSON")
    test.add_argument("-i", "--inventory", action="append", default=[], help="--versions installed: the hosts")
    test.add_argument("-l", "--limit", help="--versions installed: a host pattern, as for apply")
    bake = sub.add_parser("bake", help="apply a recipe in a container from IMAGE and commit it as TAG (verified; "
                                       "nothing written if a step fails)")
    bake.add_argument("recipe", help="recipe YAML file")
    bake.add_argument("--from", dest="image", required=True, metavar="IMAGE", help="the image to patch")
    bake.add_argument("-t", "--tag", required=True, metavar="TAG", help="the patched image's name")
    bake.add_argument("-e", "--extra-var", action="append", default=[], metavar="KEY=VALUE|@FILE|JSON",
                      help="set a recipe variable; python=PATH picks the interpreter in the image")
    bake.add_argument("--steps", help="only these steps: NAME[,...]")
    bake.add_argument("--engine", default="podman", help="podman (default), docker, or the path of either")
    bake.add_argument("--engine-arg", action="append", default=[], metavar="ARG",
                      help="an argument the engine takes before its command (e.g. --engine-arg=--runtime=runc)")
    bake.add_argument("--run-arg", action="append", default=[], metavar="ARG",
                      help="an argument for the engine's `run` (e.g. --run-arg=--ulimit=nofile=1024:1024)")
    bake.add_argument("--state-dir", help="journal folder in the image (default ~/.local/state/patchkit)")
    bake.add_argument("--timeout", type=_at_least_one, default=3600, metavar="SECONDS",
                      help="the bake container's lifetime (it runs `sleep SECONDS`; default 3600)")
    bake.add_argument("--allow-skipped", action="store_true",
                      help="write TAG even when every step was skipped (else: no image, exit 1)")
    bake.add_argument("--json", action="store_true", help="the apply's JSON document on stdout")
    bake.add_argument("--log-format", choices=["console", "json"], default="console")
    bake.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    return p


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is raised (main reports it, as a JSON document under --json),
    in one line."""

    def error(self, message: str) -> NoReturn:
        from patchkit.base.errors import UsageError

        raise UsageError(f"{message} (see: {self.prog} --help)")


MAX_SECONDS = 7 * 24 * 3600  # a wait or budget longer than a week is a typo (and overflows some clocks)
MAX_COUNT = 1_000_000


def _seconds(text: str) -> float:
    """A number of seconds: finite, 0 to MAX_SECONDS (`nan` and `inf` parse as floats)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value <= MAX_SECONDS:  # false for nan too
        raise argparse.ArgumentTypeError(f"{text!r}: want seconds from 0 to {MAX_SECONDS}")
    return value


def _at_least_one(text: str) -> int:
    """A whole number from 1 to MAX_COUNT."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= MAX_COUNT:
        raise argparse.ArgumentTypeError(f"{text!r}: want a whole number from 1 to {MAX_COUNT}")
    return value


def _refuse_empty(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """An empty value (`-i "$INV"`, `-l "$HOSTS"` with the variable unset) is a usage error: read
    as given, '' is the current folder, or every host."""
    from patchkit.base.errors import UsageError

    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for action in sub.choices[args.command]._actions:
        value = getattr(args, action.dest, None)
        if value == "" or (isinstance(value, list) and "" in value):
            name = "/".join(action.option_strings) or (action.metavar if isinstance(action.metavar, str) else
                                                       action.dest.upper())
            raise UsageError(f"{name} '': an empty value (an unset variable?)")


def main(argv: Sequence[str] | None = None) -> int:
    from patchkit.cli.startgc import starting

    with starting():  # no collection over the start's objects (startgc.py)
        code = _main(argv)
    sys.exit(code)


def _main(argv: Sequence[str] | None) -> int:
    from patchkit.base.errors import UsageError

    parser = _parser()
    tokens = list(sys.argv[1:] if argv is None else argv)
    json_out = "--json" in tokens[:tokens.index("--")] if "--" in tokens else "--json" in tokens
    if not tokens:  # no command is a usage error, but a bare `patchkit` is asking what there is: the help
        print("patchkit: no command given; here is the help:\n\n" + parser.format_help(), end="", file=sys.stderr)
        return EXIT_USAGE
    try:
        args = parser.parse_args(_command_first(parser, tokens))
        _refuse_empty(parser, args)
        if args.command in REACHES_HOSTS and getattr(args, "inventory", None):
            from patchkit.host.transport.sshhelper import ssh_side

            with ssh_side():  # SSH warms up in a second process while this one validates
                code = _dispatch(args)
        else:
            code = _dispatch(args)
    except UsageError as exc:
        print(f"patchkit: {exc}", file=sys.stderr)
        if json_out:  # stdout still gets its one document
            from patchkit.run.results import REPORT_SCHEMA_VERSION

            print(json.dumps({"schema_version": REPORT_SCHEMA_VERSION, "error": {"kind": "usage",
                              "message": str(exc).split(chr(10))[0]}, "exit_code": EXIT_USAGE}, indent=2))
        code = EXIT_USAGE
    except KeyboardInterrupt:
        print("patchkit: interrupted", file=sys.stderr)
        code = 130
    return code


def _without_pydantic_plugins() -> None:
    """patchkit's models run without pydantic plugins, as if none were installed beside it.

    pydantic hands a plugin every value a model validates (a recipe's and an inventory's
    secrets among them: telemetry plugins record them), and finds plugins by reading the
    entry points of every installed distribution when the first model is built.
    pydantic's own switch is an environment variable, which the targets a local run starts
    would inherit; this one stays in this process. pydantic asks for plugins through one
    function of one private module (`pydantic.plugin._loader.get_plugins`, 2.5 to 2.14 alike),
    imported at the first model build: that module is given here, answering none, before any
    model is built. Not importing the real one spares the scan, importlib.metadata and the
    email package (nothing else on a command's path imports them): `validate` 130 -> 121 ms
    (bench/README.md, issue 27 in session 11)."""
    if "pydantic.plugin._loader" in sys.modules:  # a model was built already: leave it as it is
        return
    loader = types.ModuleType("pydantic.plugin._loader", "patchkit: no pydantic plugins (cli.py)")
    loader.get_plugins = lambda: ()  # type: ignore[attr-defined]
    sys.modules["pydantic.plugin._loader"] = loader


def _command_first(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """Options may come before the command (`patchkit -v plan R`): they are moved after it,
    where the command's own parser reads them. A value an option takes is never the command."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    takes_value = {flag for command in sub.choices.values() for action in command._actions
                   if action.nargs != 0 for flag in action.option_strings}
    i = 0
    while i < len(argv):
        token = argv[i]
        if token in sub.choices:
            return [token, *argv[:i], *argv[i + 1:]] if i else argv
        if token == "--" or not token.startswith("-"):
            return argv
        if token in takes_value:
            i += 1
        i += 1
    return argv


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "completion":
        from patchkit.cli.completion import script

        sys.stdout.write(script(_parser(), args.shell))
        return EXIT_OK
    _without_pydantic_plugins()
    if args.command == "schema":
        if args.report:
            from patchkit.run.results import RunReport

            print(json.dumps(RunReport.model_json_schema(), indent=2))
            return EXIT_OK
        from patchkit.recipe.model import Recipe

        print(json.dumps(Recipe.model_json_schema(by_alias=True), indent=2))
        return EXIT_OK

    from patchkit.base.errors import UsageError
    from patchkit.recipe.model import read_recipe
    from patchkit.recipe.variables import layered, parse_extra_vars

    extra = parse_extra_vars(getattr(args, "extra_var", []))
    overrides = {"python": _python_of(extra)} if "python" in extra else {}
    source = None
    try:
        if getattr(args, "recipe", None):
            source = read_recipe(args.recipe)
    except UsageError as exc:
        raise _with_inventory_problems(exc, args) from None
    base_error: UsageError | None = None
    base = layered(source.declared, {}, extra, declared_at=source.declared_at) if source else {}  # -e of the wrong type: its error, once
    try:
        loaded = source.render(base) if source else None
    except UsageError as exc:
        # A variable only the inventory gives is undefined here: each host's rendering says.
        if not (source and getattr(args, "inventory", None)
                and args.command in ("apply", "plan", "status", "rollback", "validate")):
            raise _with_inventory_problems(exc, args) from None
        loaded, base_error = None, exc
    if args.command == "validate":
        assert source
        hosts = _hosts(args, resolve=False)[0] if args.inventory else []
        if hosts:
            loaded = _per_host(args, source, extra, hosts)[hosts[0].name]
        elif loaded is None:  # every selected group is resolved at run time: no host to render for
            raise _with_inventory_problems(base_error or UsageError("no host to check"), args)
        else:
            _warn_unused(args, source, extra, [])
        steps = ", ".join(f"{s.name} ({s.kind})" for s in loaded.recipe.steps)
        on = f" (with the variables of {len(hosts)} host{'s' if len(hosts) != 1 else ''})" if hosts else ""
        print(f"{args.recipe}: valid recipe {loaded.recipe.name}{on}: {steps}")
        return EXIT_OK

    if args.command == "test":
        from patchkit.commands.releasetest.command import TestOptions, run
        from patchkit.cli.startgc import started

        assert loaded
        _check_review_outputs(args)
        started()  # then hours of release installs: collected as usual
        return run(loaded, TestOptions(_split(args.steps), args.dist, args.versions, args.jobs, args.strict,
                                       args.json, overrides.get("python"), args.html, args.markdown),
                   lambda: _hosts(args)[0])
    from patchkit.base.errors import HostError

    _check_review_outputs(args)  # before any inventory group is resolved (a cluster asked) or host reached
    early: tuple[list[HostSpec], list[int | str] | int | str | None] | None = None
    per_host: dict[str, LoadedRecipe] = {}
    if loaded is None and source is not None:  # rendered per host first (above)
        try:
            early = _hosts(args)
        except HostError as exc:
            print(f"patchkit: {exc}", file=sys.stderr)
            return EXIT_FAILED
        except UsageError as exc:  # the inventory is broken too: both, grouped per file
            raise UsageError(f"{base_error}\n{exc}") from None
        per_host = _per_host(args, source, extra, early[0])
        loaded = per_host[early[0][0].name]
    from patchkit.base import logs

    logs.configure(args.log_format, args.verbose, redact=loaded.redactor.value if loaded else None)
    if loaded:
        loaded.recipe.select(_split(args.steps))  # unknown step names: usage error before contacting anyone
    from patchkit.base.cache import check as check_cache

    check_cache()  # another user's cache folder: refused before any host is contacted
    if args.command == "bake":
        assert loaded
        return _bake(args, loaded, overrides)
    try:
        hosts, inventory_serial = early or _hosts(args)
    except HostError as exc:  # a selector group kubectl could not list
        print(f"patchkit: {exc}", file=sys.stderr)
        return EXIT_FAILED
    serial, max_fail = _rollout(args, loaded, inventory_serial)
    if source is not None and not per_host:
        per_host = _per_host(args, source, extra, hosts)
    if per_host:  # a host's variables may bring secrets the recipe's alone do not: the logs hide them too
        from patchkit.recipe.redact import Redactor

        logs.configure(args.log_format, args.verbose,
                       redact=Redactor.joined([r.redactor for r in [loaded, *per_host.values()] if r]).value)
    if args.command == "capture":
        if len(hosts) != 1:
            raise UsageError(f"capture reads one host; -l names {len(hosts)}: pick one")

    # Everything is valid: the first hosts are reached while the rest of the run's code loads.
    import asyncio

    from patchkit.cli.startgc import started
    from patchkit.host.transport import sshhelper
    from patchkit.host.transport.base import Reach
    from patchkit.host.transport.early import EarlyReach, first_wave

    sshhelper.keep_for(len(hosts))

    started_at = time.monotonic()
    dry_run = args.command == "plan" or getattr(args, "dry_run", False)
    captures: list[Capture] = []

    async def reach_then_run() -> tuple[Runner, dict[str, HostResult]]:
        early = EarlyReach(first_wave(hosts, args.concurrency, serial), Reach(args.accept_new_host_keys))
        try:
            await asyncio.sleep(0)  # each connect runs up to its first wait on the network, then the imports
            await asyncio.to_thread(_import_run_code, args.command)
            started()
            runner = _runner(args, loaded, per_host, overrides, serial, max_fail, dry_run, early)
            return runner, await runner.on_hosts(hosts, _work(args, runner, captures))
        finally:
            await early.close()

    runner, results = asyncio.run(reach_then_run())

    from patchkit.report.output import print_human, print_json
    from patchkit.run.results import RunReport

    report = RunReport(recipe=loaded.recipe.name if loaded else "", run_id=runner.run_id, dry_run=dry_run,
                       command=args.command, hosts=results, seconds=round(time.monotonic() - started_at, 3)).count()
    if captures and all(h.status != "failed" for h in results.values()):
        _write_capture(captures[0], Path(args.output), report)
    from patchkit.commands.outfile import OutputError

    try:
        _write_review(args, report, loaded, hosts, per_host)
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
        return 130
    if runner.untrusted_state:
        return EXIT_USAGE
    code = _exit_code(args.command, report)
    return max(code, EXIT_FAILED) if unwritten else code


def _import_run_code(command: str) -> None:
    """What a run imports beyond the validation (~50 ms), loaded while the first hosts connect.
    The event loop's thread takes the interpreter back within 0.5 ms (not 5) when a host answers."""
    import importlib

    interval = sys.getswitchinterval()
    sys.setswitchinterval(min(interval, 0.0005))
    try:
        for module in ("patchkit.run.runner", *_COMMAND_MODULES.get(command, ()), "patchkit.report.output"):
            importlib.import_module(module)
    finally:
        sys.setswitchinterval(interval)


_COMMAND_MODULES = {"audit": ("patchkit.commands.audit",), "capture": ("patchkit.commands.capture",)}


def _runner(args: argparse.Namespace, loaded: LoadedRecipe | None, per_host: dict[str, LoadedRecipe],
            overrides: dict[str, str], serial: list[Size] | None, max_fail: Size | None, dry_run: bool,
            early: EarlyReach) -> Runner:
    from patchkit.run.journal import new_run_id
    from patchkit.run.runner import Options, Runner

    options = Options(
        steps=_split(getattr(args, "steps", None)),
        dry_run=dry_run,
        force=getattr(args, "force", False),
        run=getattr(args, "run", None),
        python=overrides.get("python"),
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
    )
    return Runner(loaded, options, new_run_id(), args.command, per_host=per_host)


def _work(args: argparse.Namespace, runner: Runner, captures: list[Capture]) -> Callable[[Session], Awaitable[HostResult]]:
    """What the command does on each host (`plan` is a dry-run apply)."""
    from functools import partial

    command = "apply" if args.command == "plan" else args.command
    if command == "audit":
        from patchkit.commands.audit import audit_host

        return partial(audit_host, dist=args.dist, budget_s=args.time_budget)
    if command == "capture":
        from patchkit.commands.capture import capture_host

        return partial(capture_host, dist=args.dist, wheel=Path(args.wheel) if args.wheel else None, out=captures)
    works = {"apply": runner.apply, "status": runner.status, "rollback": runner.rollback, "history": runner.history}
    return works[command]


def _check_review_outputs(args: argparse.Namespace) -> None:
    """Every file the command will write (--html, --markdown, capture's -o), checked before any
    host or cluster is contacted (patchkit/commands/outfile.py): a usage error, nothing done."""
    from patchkit.base.errors import UsageError

    if getattr(args, "markdown", None) == "-" and getattr(args, "json", False):
        raise UsageError("--markdown - and --json both want stdout: write one of them to a file")
    from patchkit.commands.outfile import check_output

    for flag in ("html", "markdown"):
        value = getattr(args, flag, None)
        if value is not None and value != "-":
            check_output(value, f"--{flag}")
    if args.command == "capture":  # a recipe someone may have edited is never written over
        check_output(args.output, "-o", replace=False)


def _write_review(args: argparse.Namespace, report: RunReport, loaded: LoadedRecipe | None,
                  hosts: list[HostSpec], per_host: dict[str, LoadedRecipe]) -> None:
    """--html FILE / --markdown FILE|-: the reviewer's page of the report (patchkit/report/review.py)."""
    html_file, md_file = getattr(args, "html", None), getattr(args, "markdown", None)
    if not html_file and not md_file:
        return
    from patchkit.commands.outfile import write_output
    from patchkit.report.review import build_review, render_html, render_markdown

    from patchkit.run.runner import transport_of

    where = {h.name: " ".join(dict.fromkeys(transport_of(h))) for h in hosts}
    review = build_review(report, loaded, where, per_host)
    if html_file:
        write_output(html_file, render_html(review), "--html")
    if md_file == "-":
        sys.stdout.write(render_markdown(review))
    elif md_file:
        write_output(md_file, render_markdown(review), "--markdown")


def _exit_code(command: str, report: RunReport) -> int:
    statuses = [h.status for h in report.hosts.values()]
    step_statuses = [s.status for h in report.hosts.values() for s in h.steps]
    if "failed" in statuses:
        return EXIT_FAILED
    if command in ("status", "audit") and ({"drifted", "pending"} & (set(statuses) | set(step_statuses))):
        return EXIT_NOT_CONVERGED
    if "stale" in set(statuses) | set(step_statuses):  # a server runs older code than the disk holds
        return EXIT_NOT_CONVERGED
    return EXIT_OK


def _write_capture(capture: Capture, output: Path, report: RunReport) -> None:
    import datetime

    from patchkit.commands.capture import write_recipe
    from patchkit.base.errors import HostError

    host = next(iter(report.hosts.values()))
    try:
        written = write_recipe(capture, output, datetime.datetime.now(datetime.UTC))
    except HostError as exc:
        host.status, host.message = "failed", str(exc)
        return
    host.message += "; wrote " + ", ".join(str(p) for p in written)


def _with_inventory_problems(recipe_error: UsageError, args: argparse.Namespace) -> UsageError:
    """A broken recipe, and an inventory given: its problems too, after the recipe's (grouped
    per file), so one run shows everything to fix."""
    inventories = getattr(args, "inventory", None)
    if not isinstance(inventories, list) or not inventories:
        return recipe_error
    from patchkit.base.errors import UsageError

    try:
        _inventories(args)
    except UsageError as exc:
        return UsageError(f"{recipe_error}\n{exc}")
    return recipe_error


def _inventories(args: argparse.Namespace) -> LoadedInventory:
    """The -i inventories, read once per command (a pipe has no second reading); a problem
    found is raised again on each call."""
    from patchkit.base.errors import UsageError
    from patchkit.fleet.sources import load_inventories
    from patchkit.host.transport import schemes  # noqa: F401 - declares the addresses and options inventories take

    if "inventory_loaded" not in vars(args):
        try:
            args.inventory_loaded = load_inventories(args.inventory)
        except UsageError as exc:
            args.inventory_loaded = exc
    loaded: LoadedInventory | UsageError = args.inventory_loaded
    if isinstance(loaded, UsageError):
        raise loaded
    return loaded


def _python_of(extra: dict[str, Given]) -> str:
    from patchkit.base.errors import UsageError

    value = extra["python"].value
    if not isinstance(value, str) or not value:
        raise UsageError(f"{extra['python'].origin}: python is the target interpreter's path, not {value!r}")
    return value


def _per_host(args: argparse.Namespace, source: RecipeSource, extra: dict[str, Given],
              hosts: list[HostSpec]) -> dict[str, LoadedRecipe]:
    """The recipe rendered per host with its inventory variables (hosts alike share one); every
    host's problem at once, before any host is contacted. Unused variables warned about."""
    from patchkit.base.errors import UsageError
    from patchkit.recipe.variables import layered

    origins = getattr(args, "inventory_origins", {})
    out: dict[str, LoadedRecipe] = {}
    problems: dict[str, list[str]] = {}  # the same problem on every host is said once
    for host in hosts:
        try:
            out[host.name] = source.render(layered(source.declared, host.vars, extra, host.name,
                                                   f"-i {origins.get(host.name, 'inventory')}", source.declared_at))
        except UsageError as exc:
            problems.setdefault(str(exc), []).append(host.name)
    if len(problems) == 1 and len(next(iter(problems.values()))) == len(hosts):
        raise _with_inventory_problems(UsageError(next(iter(problems))), args)
    if problems:
        raise UsageError("\n".join(f"host {', '.join(on)}: {problem}" for problem, on in problems.items()))
    _warn_unused(args, source, extra, hosts)
    return out


def _warn_unused(args: argparse.Namespace, source: RecipeSource, extra: dict[str, Given],
                 hosts: list[HostSpec]) -> None:
    """A variable given (-e, inventory) that the recipe does not know: a warning, --strict an error."""
    from patchkit.base.errors import UsageError
    from patchkit.recipe.variables import unused

    origins = getattr(args, "inventory_origins", {})
    from_ansible: set[str] = getattr(args, "inventory_ansible", set())
    given: dict[str, str] = {}
    typos_only: set[str] = set()
    for host in hosts:
        for name in host.vars:
            where = f"-i {origins.get(host.name, 'inventory')} (host {host.name})"
            given.setdefault(name, where)
            if host.name in from_ansible:
                typos_only.add(name)
    for name, value in extra.items():
        given[name] = value.origin
        typos_only.discard(name)
    found = unused(given, source.known, typos_only)
    if not found:
        return
    if getattr(args, "strict", False):
        raise UsageError("\n".join(f"{f} (--strict)" for f in found))
    for f in found:
        print(f"patchkit: warning: {f}", file=sys.stderr)


def _split(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def _hosts(args: argparse.Namespace, resolve: bool = True) -> tuple[list[HostSpec], list[int | str] | int | str | None]:
    """The selected hosts, and the inventory's `serial`. resolve False (validate): groups resolved
    at run time (pods, Ray nodes) are named, not resolved: no cluster is contacted."""
    from patchkit.fleet.inventory import local_inventory
    from patchkit.fleet.sources import LoadedInventory
    from patchkit.host.transport import schemes  # noqa: F401 - declares the addresses and options inventories take
    from patchkit.host.transport.groups import resolve_group

    loaded = _inventories(args) if args.inventory else LoadedInventory(local_inventory())
    if getattr(args, "verbose", False):
        for note in loaded.notes:  # conflicts between -i, Ansible settings patchkit does not use
            print(f"patchkit: {note}", file=sys.stderr)
    inventory = loaded.inventory
    args.inventory_origins, args.inventory_ansible = loaded.sources, loaded.ansible
    selected = inventory.select(args.limit, resolve_group if resolve else _not_resolved)
    for note in selected.notes:
        print(f"patchkit: {note}", file=sys.stderr)
    return selected.hosts, inventory.serial


def _not_resolved(group: str, found: object, defaults: object) -> tuple[list[HostSpec], list[str]]:
    return [], [f"group {group}: resolved at run time (its hosts are not checked here)"]


def _rollout(args: argparse.Namespace, loaded: LoadedRecipe | None,
             inventory_serial: list[int | str] | int | str | None) -> tuple[list[Size] | None, Size | None]:
    """--serial, else (apply, rollback) the recipe's `serial:`, else the inventory's; --max-fail.
    UsageError if unreadable."""
    from patchkit.base.errors import UsageError
    from patchkit.base.rollout import parse_serial, parse_size

    changes = args.command in ("apply", "rollback")  # `serial:` paces changes; reads need no batches
    try:
        given = args.serial if args.serial is not None else (loaded.recipe.serial if loaded and changes else None)
        if given is None and changes:
            given = inventory_serial
        serial = parse_serial(given, "--serial") if given is not None else None
        max_fail = parse_size(args.max_fail, "--max-fail") if args.max_fail is not None else None
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return serial, max_fail


def _bake(args: argparse.Namespace, loaded: LoadedRecipe, overrides: dict[str, str]) -> int:
    """patchkit bake: plan, then apply, in a container of IMAGE; commit it as TAG if all went well."""
    import asyncio

    from patchkit.cli.startgc import started

    started()

    from patchkit.commands.bake import BakeSpec, bake
    from patchkit.base.errors import HostError
    from patchkit.fleet.inventory import HostSpec
    from patchkit.run.journal import new_run_id
    from patchkit.report.output import print_human, print_json
    from patchkit.run.results import RunReport
    from patchkit.run.runner import Options, Runner

    spec = BakeSpec(image=args.image, tag=args.tag, engine=args.engine, engine_args=list(args.engine_arg),
                    run_args=list(args.run_arg), python=overrides.get("python"), state_dir=args.state_dir,
                    timeout_s=args.timeout, allow_skipped=args.allow_skipped)
    run_id = new_run_id()

    def work(host: HostSpec, dry_run: bool) -> RunReport:
        options = Options(steps=_split(args.steps), dry_run=dry_run, python=overrides.get("python"),
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
        report, written = bake(spec, run_id, work, say)
    except HostError as exc:
        say(str(exc))
        return EXIT_FAILED
    if report is not None and args.json and not written and report.dry_run:
        print_json(report)  # the failed plan is the document
    return EXIT_OK if written else EXIT_FAILED


if __name__ == "__main__":
    main()
