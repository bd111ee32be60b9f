"""The command line's grammar, built in one place: every command, its options and their checks.

`build_parser` is the one source of the commands' names and options (shell completion reads
it too); cli/commands.py maps each name to the function that runs it. Nothing here imports
more than argparse (and patchkit's errors, for a usage error): `--help` and a usage error
cost no recipe model.
"""

from __future__ import annotations

import argparse
from typing import NoReturn


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Each command's name and its own parser."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="patchkit", description="Idempotent, verified patches to installed Python packages, on one host or a fleet.")
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
        sp.add_argument("--concurrency", type=at_least_one, help="hosts worked on at once (default 32)")
        sp.add_argument("--serial", metavar="N[,N|P%...]",
                        help="rollout batches, e.g. 1,10%%,100%%: a batch starts once every host before it succeeded "
                             "(gates included); a single N: the first N hosts, then the rest")
        sp.add_argument("--max-fail", metavar="K|P%", help="stop starting hosts once more than K (or P%% of them) have failed")
        sp.add_argument("--lock-timeout", type=seconds, help="seconds to wait for another run's host lock (default 60)")
        sp.add_argument("--state-dir", help="journal folder on hosts that set none (default ~/.local/state/patchkit)")
        sp.add_argument("--accept-new-host-keys", action="store_true",
                        help="SSH: record the key of a host seen for the first time (a changed key is still refused)")
        sp.add_argument("--log-format", choices=["console", "json"], help="stderr's log lines (default console)")
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
    history = sub.add_parser("history", help="runs recorded in each host's journal")
    targets(history, recipe=False)
    history.add_argument("--recipe", dest="recipe_name", metavar="NAME", help="only the runs of this recipe (its name:)")
    history.add_argument("--since", type=since, metavar="WHEN",
                         help="only runs started since WHEN: a UTC date or time (2026-12-01, 2026-12-01T08:00) "
                              "or a span back from now (30m, 12h, 7d)")
    audit = sub.add_parser("audit", help="installed files of a distribution that differ from its RECORD, "
                           "each explained by the journal or unexplained (exit 3)")
    audit.add_argument("dist", metavar="DIST", help="distribution name, or the import name of its package (vllm)")
    audit.add_argument("--time-budget", type=seconds, default=None, metavar="SECONDS",
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
    test.add_argument("--jobs", type=at_least_one, default=4, help="wheels fetched at once (default 4)")
    test.add_argument("--strict", action="store_true", help="exit 1 on warnings too (a range that may be too narrow)")
    test.add_argument("--json", action="store_true", help="the whole matrix as one JSON document on stdout")
    test.add_argument("--html", metavar="FILE", help="also write the matrix as one self-contained review page: "
                      "per release and step the outcome, each distinct diff once with its releases")
    test.add_argument("--markdown", metavar="FILE", help="also write that page as Markdown (- for stdout, "
                      "instead of the table)")
    test.add_argument("-e", "--extra-var", action="append", default=[], metavar="KEY=VALUE|@FILE|JSON")
    test.add_argument("-i", "--inventory", action="append", default=[], help="--versions installed: the hosts")
    test.add_argument("-l", "--limit", help="--versions installed: a host pattern, as for apply")
    bundle = sub.add_parser("bundle", help="write a start-up bundle: one file any Python >= 3.8 runs as "
                            "`python FILE -- COMMAND` to apply the recipe in place, then start COMMAND (containers "
                            "and pods from upstream images)")
    bundle.add_argument("recipe", help="recipe YAML file")
    bundle.add_argument("-o", "--output", required=True, metavar="FILE", help="the bundle to write (e.g. fix.pyz)")
    bundle.add_argument("--versions", metavar="SPEC",
                        help="releases to build for: a specifier ('>=0.14,<0.20') or releases ('0.16.0,0.17.1'); "
                             "default: every release on the index in the steps' ranges")
    bundle.add_argument("--dist", help="the distribution whose releases to build for (default: each step's package)")
    bundle.add_argument("--steps", help="only these steps: NAME[,...]")
    bundle.add_argument("--jobs", type=at_least_one, default=4, help="wheels fetched at once (default 4)")
    bundle.add_argument("-e", "--extra-var", action="append", default=[], metavar="KEY=VALUE|@FILE|JSON",
                        help="set a recipe variable")
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
    bake.add_argument("--timeout", type=at_least_one, default=3600, metavar="SECONDS",
                      help="the bake container's lifetime (it runs `sleep SECONDS`; default 3600)")
    bake.add_argument("--allow-skipped", action="store_true",
                      help="write TAG even when every step was skipped (else: no image, exit 1)")
    bake.add_argument("--json", action="store_true", help="the apply's JSON document on stdout")
    bake.add_argument("--log-format", choices=["console", "json"], help="stderr's log lines (default console)")
    bake.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    return p


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is raised (main reports it, as a JSON document under --json),
    in one line."""

    def error(self, message: str) -> NoReturn:
        from patchkit.base.errors import UsageError

        raise UsageError(f"{message} (see: {self.prog} --help)")


MAX_SECONDS = 7 * 24 * 3600  # a wait or budget longer than a week is a typo (and overflows some clocks)
MAX_COUNT = 1_000_000


def seconds(text: str) -> float:
    """A number of seconds: finite, 0 to MAX_SECONDS (`nan` and `inf` parse as floats)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value <= MAX_SECONDS:  # false for nan too
        raise argparse.ArgumentTypeError(f"{text!r}: want seconds from 0 to {MAX_SECONDS}")
    return value


def since(text: str, now: float | None = None) -> float:
    """A moment as epoch seconds: a UTC ISO date or date-time, or a span back from now (30m, 12h, 7d)."""
    import datetime
    import re
    import time

    span = re.fullmatch(r"(\d+(?:\.\d+)?)([smhdw])", text.strip())
    if span:
        unit = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[span.group(2)]
        return (time.time() if now is None else now) - float(span.group(1)) * unit
    try:
        moment = datetime.datetime.fromisoformat(text.strip().removesuffix("Z"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a UTC date or time (2026-12-01, 2026-12-01T08:00) "
                                         "nor a span back from now (30m, 12h, 7d)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.timestamp()


def at_least_one(text: str) -> int:
    """A whole number from 1 to MAX_COUNT."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= MAX_COUNT:
        raise argparse.ArgumentTypeError(f"{text!r}: want a whole number from 1 to {MAX_COUNT}")
    return value


def refuse_empty(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """An empty value (`-i "$INV"`, `-l "$HOSTS"` with the variable unset) is a usage error: read
    as given, '' is the current folder, or every host."""
    from patchkit.base.errors import UsageError

    for action in subcommands(parser)[args.command]._actions:
        value = getattr(args, action.dest, None)
        if value == "" or (isinstance(value, list) and "" in value):
            name = "/".join(action.option_strings) or (action.metavar if isinstance(action.metavar, str) else
                                                       action.dest.upper())
            raise UsageError(f"{name} '': an empty value (an unset variable?)")


def command_first(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """Options may come before the command (`patchkit -v plan R`): they are moved after it,
    where the command's own parser reads them. A value an option takes is never the command."""
    commands = subcommands(parser)
    takes_value = {flag for command in commands.values() for action in command._actions
                   if action.nargs != 0 for flag in action.option_strings}
    i = 0
    while i < len(argv):
        token = argv[i]
        if token in commands:
            return [token, *argv[:i], *argv[i + 1:]] if i else argv
        if token == "--" or not token.startswith("-"):
            return argv
        if token in takes_value:
            i += 1
        i += 1
    return argv
