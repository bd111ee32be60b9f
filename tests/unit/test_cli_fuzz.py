"""Fuzz of the command line: hundreds of generated invocations (commands, flags and values:
empty strings, nan, huge numbers, folders, devices, missing files, odd -l patterns, -e
without `=`, non-ASCII, options given as values, ...), run in-process against the real
argument parsing and validation of patchkit/cli/. Each must end in one of the exit codes
the product names (0, 1, 2, 3) with no traceback; a usage error is `patchkit: ...` on
stderr's first line; and a value known to be malformed (an empty value, a number that is no
count or no number of seconds, a nested-too-deep inventory) must be a usage error before any
host is contacted.

No host is contacted: the run itself (asyncio.run, where the first hosts are reached), the
release matrix of `patchkit test` and `bake` are replaced by a marker that records the
invocation got that far; every inventory's hosts have their state in tmp. Ansible's own
reader is not run here (it costs a second a call; tests/agent/test_ansible_inventory_cli.py
runs it): `ansible-inventory` is "not installed" for the fuzz.
"""

from __future__ import annotations

import asyncio
import io
import random
import traceback
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from patchkit.cli import main as cli
from patchkit.host.transport.sshhelper import SWITCH
from tests.helpers import REPO

SEED = 3801
INVOCATIONS = 500
EXIT_CODES = {0, 1, 2, 3}


class Reached(Exception):
    """The invocation was valid up to contacting hosts (or running the matrix or a bake)."""


@dataclass(frozen=True)
class Value:
    text: str
    bad: bool = False  # known malformed: must be a usage error, nothing contacted


def _chain_inventory(depth: int) -> str:
    lines = ["hosts:\n  local: {address: local}\ngroups:\n"]
    lines += [f"  g{i}: [g{i + 1}]\n" for i in range(depth)]
    lines.append(f"  g{depth}: [local]\n")
    return "".join(lines)


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Value]]:
    """The value pools, with their files in tmp."""
    state = tmp_path / "state"
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text((REPO / "fixtures/recipes/toyllm_eagle3.yaml").read_text())
    inventory = tmp_path / "inv.yml"
    inventory.write_text(f"hosts:\n  local: {{address: local, state_dir: {state}}}\n  gpu-1: {{address: local, "
                         f"state_dir: {state}}}\ngroups:\n  gpus: [gpu-1]\n")
    meta = tmp_path / "meta.json"
    meta.write_text('{"_meta": {"hostvars": {"m1": {"ansible_connection": "local", "patchkit_state_dir": "%s"}}}, '
                    '"web": {"hosts": ["m1"]}}' % state)
    deep_meta = tmp_path / "deep.json"
    deep_meta.write_text('{"_meta": {"hostvars": {"m1": {"v": ' + '{"k": ' * 3000 + "1" + "}" * 3000 + "}}}}")
    chain = tmp_path / "chain.yml"
    chain.write_text(_chain_inventory(900))
    ini = tmp_path / "hosts.ini"
    ini.write_text("[web]\nw1 ansible_connection=local\n")
    folder = tmp_path / "folder"
    folder.mkdir()
    (tmp_path / "out").mkdir()
    vars_file = tmp_path / "vars.yml"
    vars_file.write_text("first_value: qwen\n")
    missing = str(tmp_path / "missing.yml")
    weird = str(tmp_path / "ünï cödé.yml")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(SWITCH, "0")  # no SSH helper process forked per invocation
    monkeypatch.setenv("HOME", str(tmp_path))

    def reached(*args: Any, **kwargs: Any) -> None:
        for arg in args:
            if asyncio.iscoroutine(arg):
                arg.close()
        raise Reached

    monkeypatch.setattr(asyncio, "run", reached)
    monkeypatch.setattr("patchkit.commands.releasetest.command.run", reached)
    monkeypatch.setattr("patchkit.commands.bake.bake", reached)
    monkeypatch.setattr("patchkit.fleet.sources.ansible_inventory_command", lambda: None)

    # (No NUL: no command line can carry one.)
    common = [Value("-"), Value("--json"), Value("-i"), Value("ü"), Value(" "), Value("--"), Value("a" * 5000)]
    return {
        "recipe": [Value(str(recipe))] * 6 + [Value("", True), Value("/"), Value("/dev/null"), Value(missing),
                                              Value(str(folder)), Value(weird), Value("/dev/zero"), *common],
        "inventory": [Value(str(inventory))] * 6 + [
            Value(str(meta)), Value(str(meta)), Value("", True), Value(str(folder)), Value("/dev/null"),
            Value(missing), Value(weird), Value("/dev/zero", True), Value(str(chain), True),
            Value(str(deep_meta), True), Value(str(ini)), Value(str(recipe)), *common],
        "limit": [Value("local"), Value("all"), Value("gpus"), Value("gpu-*"), Value("!local"), Value("local:&gpus"),
                  Value("", True), Value("!"), Value("&"), Value(",,"), Value(":::"), Value("~["), Value("~(" * 3000),
                  Value("nope"), Value("loc*,~g.*"), Value("ünï"), Value("web"), *common],
        "extra_var": [Value("first_value=qwen"), Value(f"@{vars_file}"), Value("x"), Value("="), Value("python="),
                      Value("python=/nonexistent/python"), Value("@"), Value("@/dev/null"), Value("@/dev/zero"),
                      Value(f"@{missing}"), Value(f"@{folder}"), Value("{"), Value("[1]"), Value('{"python": 3}'),
                      Value("{" + '"a": [' * 3000), Value("ä=1"), Value("first_value"), Value("", True), *common],
        "seconds": [Value("0"), Value("1.5"), Value("60"), Value("nan", True), Value("inf", True),
                    Value("-inf", True), Value("-1", True), Value("1e309", True), Value("1e300", True),
                    Value("abc", True), Value("", True), Value("NaN", True), Value("0x10", True), *common[:3]],
        "count": [Value("1"), Value("4"), Value("0", True), Value("-1", True), Value("1" + "0" * 40, True),
                  Value("nan", True), Value("1.5", True), Value("", True), Value("abc", True), *common[:3]],
        "size": [Value("1"), Value("1,10%,100%"), Value("50%"), Value(""), Value("0"), Value("-1"), Value("101%"),
                 Value("nan"), Value("%"), Value("1e9"), Value("9" * 60), Value("1,,2"), *common[:3]],
        "steps": [Value("eagle3-whitelist"), Value("eagle3-preflight,eagle3-whitelist"), Value("", True),
                  Value(","), Value("nope"), Value("ü"), *common[:3]],
        "path_out": [Value(str(tmp_path / "out" / "r.html")), Value("", True), Value("-"), Value("/"),
                     Value("/nonexistent/x.html"), Value(str(folder)), *common[:3]],
        "state_dir": [Value(str(state)), Value("", True), Value("/dev/null"), Value("rel/state"), *common[:3]],
        "word": [Value("vllm"), Value("nope"), Value("", True), Value("1.0"), Value(">=0.10"), Value("all"),
                 Value("installed"), Value("nan"), *common[:3]],
        "shell": [Value("bash"), Value("zsh"), Value("fish"), Value("tcsh"), Value("")],
        "log_format": [Value("console"), Value("json"), Value("xml"), Value("")],
    }


TARGET_OPTIONS = {  # flag -> pool (None: a switch)
    "-i": "inventory", "-l": "limit", "-e": "extra_var", "--strict": None, "--json": None, "-v": None,
    "--html": "path_out", "--markdown": "path_out", "--concurrency": "count", "--serial": "size",
    "--max-fail": "size", "--lock-timeout": "seconds", "--state-dir": "state_dir", "--accept-new-host-keys": None,
    "--log-format": "log_format",
}
COMMANDS: dict[str, tuple[list[str], dict[str, str | None]]] = {  # command -> (positional pools, its options)
    "apply": (["recipe"], {**TARGET_OPTIONS, "--steps": "steps", "--dry-run": None, "--no-restart": None,
                           "--verify-all": None}),
    "plan": (["recipe"], {**TARGET_OPTIONS, "--steps": "steps", "--verify-all": None}),
    "status": (["recipe"], {**TARGET_OPTIONS, "--steps": "steps", "--verify-all": None}),
    "rollback": (["recipe"], {**TARGET_OPTIONS, "--steps": "steps", "--run": "word", "--force": None}),
    "history": ([], TARGET_OPTIONS),
    "audit": (["word"], {**TARGET_OPTIONS, "--time-budget": "seconds"}),
    "capture": (["word"], {**TARGET_OPTIONS, "-o": "path_out", "--wheel": "path_out"}),
    "validate": (["recipe"], {"-e": "extra_var", "-i": "inventory", "-l": "limit", "--strict": None}),
    "schema": ([], {"--report": None}),
    "completion": (["shell"], {}),
    "test": (["recipe"], {"--dist": "word", "--versions": "word", "--steps": "steps", "--jobs": "count",
                          "--strict": None, "--json": None, "--html": "path_out", "--markdown": "path_out",
                          "-e": "extra_var", "-i": "inventory", "-l": "limit"}),
    "bake": (["recipe"], {"--from": "word", "-t": "word", "-e": "extra_var", "--steps": "steps", "--engine": "word",
                          "--engine-arg": "word", "--run-arg": "word", "--state-dir": "state_dir",
                          "--timeout": "count", "--allow-skipped": None, "--json": None}),
}


def invocations(pools: dict[str, list[Value]], rng: random.Random) -> Iterator[tuple[list[str], bool]]:
    """(argv, whether a value known to be malformed is in it), INVOCATIONS of them."""
    names = sorted(COMMANDS)
    for _ in range(INVOCATIONS):
        roll = rng.random()
        command = rng.choice(names) if roll > 0.04 else rng.choice(["", "plna", "--version", "-h", "--json"])
        positional, options = COMMANDS.get(command, ([], {}))
        argv: list[str] = [command] if command else []
        bad = False
        for pool in positional:
            if rng.random() < 0.95:
                value = rng.choice(pools[pool])
                argv.append(value.text)
                bad |= value.bad
        for flag in rng.sample(sorted(options), k=min(len(options), rng.randint(0, 5))):
            pool_name = options[flag]
            if pool_name is None:
                argv.append(flag)
                continue
            value = rng.choice(pools[pool_name])
            # `test` reads its -i/-l only for --versions installed: there only '' is refused up front
            lazy = command == "test" and flag in ("-i", "-l") and value.text != ""
            bad |= value.bad and not lazy
            argv += [f"{flag}={value.text}"] if rng.random() < 0.15 else [flag, value.text]
        if command == "bake" and rng.random() < 0.8:  # its required options, most of the time
            argv += ["--from", "img", "-t", "tag"]
        if command == "capture" and rng.random() < 0.8:
            argv += ["-o", pools["path_out"][0].text]
        if rng.random() < 0.05:  # a stray option, or one cut short
            argv.append(rng.choice(["--bogus", "-i", "-l", "--lock-timeout", "-e", "-x", "--json=1"]))
        if rng.random() < 0.05 and len(argv) > 1:  # options first, the command after them
            argv = [*argv[1:], argv[0]]
        yield argv, bad


@dataclass
class Outcome:
    code: int | None
    stdout: str
    stderr: str
    reached: bool
    crash: str = ""


def run_in_process(argv: list[str]) -> Outcome:
    out, err = io.StringIO(), io.StringIO()
    code: int | None = None
    reached, crash = False, ""
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = cli._main(argv)
        except SystemExit as exc:  # --help, --version
            code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 2
        except Reached:
            code, reached = 0, True
        except BaseException:  # noqa: BLE001 - anything else would be the user's traceback
            crash = traceback.format_exc()
    return Outcome(code, out.getvalue(), err.getvalue(), reached, crash)


def test_generated_invocations_end_in_a_known_exit_code_and_never_a_traceback(world: dict[str, list[Value]]) -> None:
    rng = random.Random(SEED)
    problems: list[str] = []
    seen_codes: set[int] = set()
    bad_count = reached_count = 0
    for argv, bad in invocations(world, rng):
        outcome = run_in_process(argv)
        if outcome.code is not None:
            seen_codes.add(outcome.code)
        bad_count += bad
        reached_count += outcome.reached
        if outcome.crash:
            problems.append(f"{argv!r}: raised\n{outcome.crash.splitlines()[-1]}")
        elif outcome.code not in EXIT_CODES:
            problems.append(f"{argv!r}: exit {outcome.code}")
        elif "Traceback" in outcome.stderr:
            problems.append(f"{argv!r}: traceback on stderr")
        elif outcome.code == 2 and not outcome.stderr.startswith("patchkit: "):
            problems.append(f"{argv!r}: usage error without its `patchkit: ` line: {outcome.stderr[:200]!r}")
        elif bad and (outcome.code != 2 or outcome.reached):
            problems.append(f"{argv!r}: a malformed value, yet exit {outcome.code}"
                            f"{' and hosts contacted' if outcome.reached else ''}: {outcome.stderr[:200]!r}")
        if len(problems) >= 10:
            break
    assert not problems, "\n".join(p if len(p) < 600 else p[:300] + " ... " + p[-300:] for p in problems)
    # The generator reaches all of it: usage errors, valid runs, malformed values.
    assert {0, 2} <= seen_codes and bad_count > 100 and reached_count > 30, (seen_codes, bad_count, reached_count)

