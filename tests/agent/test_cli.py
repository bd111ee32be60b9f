"""The CLI contract of PRODUCT.md: commands, exit codes, --json, usage errors, the host lock.

Everything runs the installed `patchkit` executable against sandbox hosts
(tests/helpers.py); nothing here touches the real ~/.local/state/patchkit.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import time
from pathlib import Path

import pytest
import yaml
from tests.helpers import (  # noqa: F401 - sandbox_fixture: the `sandbox` fixture
    REPO,
    TOY_MODEL,
    TOY_SPECULATIVE,
    Sandbox,
    finish,
    host,
    recipe,
    run_many,
    run_patchkit,
    sandbox_fixture,
    sha256,
    start_patchkit,
    step,
)

TOY = recipe("toyllm_eagle3.yaml")
HOLD = recipe("hold_lock.yaml")

STEP_STATUSES = {"changed", "ok", "skipped", "failed"}
STATE_STATUSES = {"applied", "pending", "drifted", "not-applicable", "failed"}
STEP_KEYS = {"name", "status", "message", "diff", "file", "sha256_before", "sha256_after"}


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got:\n{text}"
    return lines[0]


# ---------------------------------------------------------------------------- validate / schema


def test_validate_accepts_good_recipes_and_contacts_nobody() -> None:
    files = [TOY, str(REPO / "recipes" / "kimi_eagle3.yaml")]
    results = run_many([["validate", f] for f in files])
    for file, result in zip(files, results):
        assert result.returncode == 0, result
        assert result.stderr == "", result
        assert file in result.stdout and "valid" in result.stdout, result
    assert "eagle3-whitelist (patch)" in results[0].stdout and "eagle3-preflight (check)" in results[0].stdout


def test_schema_is_a_json_schema_that_accepts_our_recipes() -> None:
    shown = run_patchkit("schema")
    assert shown.returncode == 0, shown
    schema = shown.json()
    assert "properties" in schema
    assert {"name", "steps"} <= set(schema["properties"])
    assert {"name", "steps"} <= set(schema.get("required", []))

    import jsonschema  # a test dependency (pyproject [test]): missing means a broken set-up, not a skip
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    good = yaml.safe_load(Path(TOY).read_text())
    assert list(validator.iter_errors(good)) == []
    bad = yaml.safe_load(Path(recipe("bad_unknown_key.yaml")).read_text())
    assert list(validator.iter_errors(bad)) != []  # editors flag the unknown key too


# ---------------------------------------------------------------------------- usage errors

BAD_RECIPES = [
    # file, line the error points at, field named, words the message must have
    ("bad_unknown_key.yaml", {7}, "steps[0].patch", ["unknown key 'edti'"]),
    ("bad_missing_field.yaml", {4}, "steps[0].patch", ["missing", "'modules'"]),
    ("bad_yaml.yaml", {6, 7}, None, ["not valid YAML"]),
    ("bad_undefined_var.yaml", {12}, "steps[0].patch.edit.list_insert.values[0]", ["undefined variable 'modle_type'"]),
    ("bad_version.yaml", {6}, "steps[0].patch.versions", ["'>=0.10.1,<<0.22'", "version specifier"]),
    ("bad_two_edits.yaml", {7}, "steps[0].patch.edit", ["exactly one edit operation"]),
]


def test_bad_recipes_are_one_clear_line_and_exit_2(sandbox: Sandbox) -> None:
    spy = ["-i", str(sandbox.inventory), "-e", f"python={sandbox.spy_python}"]
    commands = [["validate"], ["apply"]]  # half each way: the same loader answers both
    cases = [([*commands[i % 2], recipe(name), *(spy if i % 2 else [])], name, lines, field, words)
             for i, (name, lines, field, words) in enumerate(BAD_RECIPES)]
    results = run_many([argv for argv, *_ in cases])

    for (_, name, lines, field, words), result in zip(cases, results):
        assert result.returncode == 2, result
        assert result.stdout == "", result
        assert "Traceback" not in result.stderr, result
        line = one_line(result.stderr)
        prefix = f"patchkit: {recipe(name)}:"
        assert line.startswith(prefix), result
        assert int(line[len(prefix):].split(":")[0]) in lines, result
        if field:
            assert f" {field}: " in line, result
        for word in words:
            assert word in line, result
    assert not sandbox.contacted.exists(), sandbox.contacted.read_text()
    assert not sandbox.state.exists()


def test_usage_errors_contact_nobody(sandbox: Sandbox) -> None:
    spy = ["-i", str(sandbox.inventory), "-e", f"python={sandbox.spy_python}"]
    cases = [
        (["apply", TOY, "--steps", "eagle3-whitelist,nope", *spy], ["--steps", "nope", "eagle3-whitelist"]),
        (["apply", TOY, "-l", "gpu-9", *spy], ["gpu-9"]),
        (["apply", TOY, "-e", "not an assignment", *spy], ["KEY=VALUE"]),
    ]
    results = run_many([argv for argv, _ in cases])
    for (_, words), result in zip(cases, results):
        assert result.returncode == 2, result
        assert result.stdout == "", result
        line = one_line(result.stderr)
        assert line.startswith("patchkit: ") and "Traceback" not in result.stderr, result
        for word in words:
            assert word in line, result
    assert not sandbox.contacted.exists(), sandbox.contacted.read_text()
    assert not sandbox.state.exists()


def test_no_command_is_a_usage_error_that_shows_the_help() -> None:
    bare, asked = run_patchkit(), run_patchkit("--help")
    assert bare.returncode == 2 and bare.stdout == "", bare  # as any usage error: stdout stays empty
    first, rest = bare.stderr.split("\n", 1)
    assert first == "patchkit: no command given; here is the help:", bare
    assert asked.returncode == 0 and rest.lstrip("\n") == asked.stdout, (bare, asked)  # the whole help
    assert "apply" in asked.stdout and "rollback" in asked.stdout, asked


# ---------------------------------------------------------------------------- --steps


def test_steps_runs_only_the_named_steps(sandbox: Sandbox) -> None:
    spec, model = sandbox.file(TOY_SPECULATIVE), sandbox.file(TOY_MODEL)
    spec_before, model_before = sha256(spec), sha256(model)

    applied = sandbox.run("apply", TOY, "--steps", "fp32-dtype", json_out=True)

    assert applied.returncode == 0, applied
    assert [s["name"] for s in host(applied)["steps"]] == ["fp32-dtype"]
    assert step(applied, "fp32-dtype")["status"] == "changed"
    assert sha256(spec) == spec_before
    assert sha256(model) != model_before


# ---------------------------------------------------------------------------- --json


def check_shape(doc: dict, recipe_name: str, statuses: set[str]) -> None:
    assert {"recipe", "run_id", "dry_run", "hosts"} <= set(doc), doc
    assert doc["recipe"] == recipe_name
    assert isinstance(doc["run_id"], str) and doc["run_id"]
    assert isinstance(doc["dry_run"], bool)
    assert list(doc["hosts"]) == ["local"]
    for result in doc["hosts"].values():
        assert result["status"] in STEP_STATUSES | {"applied", "pending", "drifted"}, result
        for s in result["steps"]:
            assert STEP_KEYS <= set(s), s
            assert s["status"] in statuses, s


def test_json_is_exactly_one_document_with_the_contract_shape(sandbox: Sandbox) -> None:
    spec = sandbox.file(TOY_SPECULATIVE)

    applied = sandbox.run("apply", TOY, "--log-format", "json", "-v", json_out=True)

    assert applied.returncode == 0, applied
    doc = applied.json()  # the whole of stdout parses: nothing else was printed there
    check_shape(doc, "toyllm_eagle3", STEP_STATUSES)
    assert doc["dry_run"] is False
    assert doc["hosts"]["local"]["status"] == "changed"
    patch = step(applied, "eagle3-whitelist")
    assert patch["file"] == str(spec)
    assert patch["sha256_after"] == sha256(spec)
    assert patch["diff"].startswith(f"--- a{spec}\n+++ b{spec}\n@@ ")
    assert "+                \"kimi_k2\",\n" in patch["diff"]
    logs = [json.loads(line) for line in applied.stderr.splitlines() if line.startswith("{")]
    assert logs, applied  # -v --log-format json logs went to stderr, as JSON

    status, history = run_many([sandbox.argv("status", TOY, "--json"), sandbox.argv("history", None, "--json")])
    assert status.returncode == 0 and history.returncode == 0, (status, history)
    check_shape(status.json(), "toyllm_eagle3", STATE_STATUSES)
    assert [r["run_id"] for r in history.json()["hosts"]["local"]["runs"]] == [doc["run_id"]]


# ---------------------------------------------------------------------------- unreachable interpreter


def test_missing_interpreter_fails_the_host_with_a_readable_message(sandbox: Sandbox) -> None:
    not_a_program = sandbox.root / "not-a-program"
    not_a_program.write_text("this is not an interpreter\n")
    not_a_program.chmod(0o755)
    inv = ["-i", str(sandbox.inventory)]
    missing, garbage = run_many([
        ["apply", TOY, *inv, "-e", "python=/nonexistent/python", "--json"],
        ["status", TOY, *inv, "-e", f"python={not_a_program}", "--json"],
    ])

    assert missing.returncode == 1, missing
    failed = host(missing)
    assert failed["status"] == "failed"
    assert "/nonexistent/python" in failed["message"] and "not found" in failed["message"]
    assert garbage.returncode == 1, garbage
    assert host(garbage)["status"] == "failed" and str(not_a_program) in host(garbage)["message"]
    for result in (missing, garbage):
        assert "Traceback" not in result.stderr + result.stdout, result


def test_without_inventory_the_host_is_local_with_the_journal_in_home(tmp_path: Path, sandbox: Sandbox) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home)}
    argv = ["apply", TOY, "--steps", "eagle3-whitelist", "-e", f"python={sandbox.python}", "--json"]

    applied = finish(start_patchkit(*argv, env=env), argv)

    assert applied.returncode == 0, applied
    assert host(applied, "local")["status"] == "changed"
    backup = Path(step(applied, "eagle3-whitelist")["backup"])
    assert backup.is_relative_to(home / ".local" / "state" / "patchkit") and backup.is_file()


# ---------------------------------------------------------------------------- the host lock


def wait_for_holder(lock: Path, owner_word: str, timeout: float = 20) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            info = json.loads(lock.read_text())
        except (OSError, ValueError):
            info = {}
        if owner_word in info.get("owner", ""):
            return info
        time.sleep(0.05)
    raise AssertionError(f"nobody took {lock}")


def test_a_second_run_fails_while_the_first_holds_the_lock(sandbox: Sandbox) -> None:
    spec = sandbox.file(TOY_SPECULATIVE)
    before = sha256(spec)
    release = sandbox.root / "release"
    first_argv = sandbox.argv("apply", HOLD, "-e", f"release={release}", "--json")
    first = start_patchkit(*first_argv)  # holds the lock until `release` exists
    try:
        holder = wait_for_holder(sandbox.state / "lock", "apply")

        started = time.monotonic()
        second = sandbox.run("apply", TOY, "--lock-timeout", "1", json_out=True)
        waited = time.monotonic() - started

        assert second.returncode == 1, second
        assert first.poll() is None, "the first run should still hold the lock"
        message = host(second)["message"]
        assert "another patchkit run holds the lock" in message, second
        assert str(sandbox.state / "lock") in message and holder["owner"] in message
        assert f"pid {holder['pid']} on " in message and " UTC (" in message and "s ago)" in message, message
        assert str(int(holder["since"])) not in message  # a time a person reads, not an epoch
        assert waited >= 1  # it waited its --lock-timeout first
        assert sha256(spec) == before
        assert sandbox.run_records("toyllm_eagle3") == []
    finally:
        release.touch()
        done = finish(first, first_argv)
    assert done.returncode == 0, done
    assert step(done, "hold")["status"] == "ok"


def test_a_run_waiting_for_the_lock_says_so_while_it_waits(sandbox: Sandbox) -> None:
    release = sandbox.root / "release"
    first_argv = sandbox.argv("apply", HOLD, "-e", f"release={release}", "--json")
    first = start_patchkit(*first_argv)  # holds the lock until `release` exists
    argv = sandbox.argv("apply", TOY, "--steps", "eagle3-whitelist", "--lock-timeout", "30", "--json")
    try:
        holder = wait_for_holder(sandbox.state / "lock", "apply")
        started = time.monotonic()
        second = start_patchkit(*argv)
        assert second.stderr is not None
        said, _, _ = select.select([second.stderr], [], [], 20)
        assert said, "nothing on stderr while waiting for the lock"
        line = second.stderr.readline()
        assert second.poll() is None and first.poll() is None, "said while it waits, not after"
        assert time.monotonic() - started >= 1  # a short wait is not worth a line
        assert line.startswith(f"local: waiting for the host lock {sandbox.state / 'lock'}, held by "
                               f"pid {holder['pid']} on "), line
        assert f"owner {holder['owner']}, since " in line and line.endswith(" (up to 30 s; --lock-timeout)\n"), line
        time.sleep(1)  # it waits on: the line is not said again
    finally:
        release.touch()
        assert finish(first, first_argv).returncode == 0
    done = finish(second, argv)
    assert done.returncode == 0, done
    assert step(done, "eagle3-whitelist")["status"] == "changed"  # stdout: still one JSON document
    assert "waiting" not in done.stderr, done  # said once


def test_a_run_waits_for_the_lock_then_goes_on(sandbox: Sandbox) -> None:
    spec = sandbox.file(TOY_SPECULATIVE)
    before = sha256(spec)
    sandbox.state.mkdir(mode=0o700)
    with open(sandbox.state / "lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        argv = sandbox.argv("apply", TOY, "--steps", "eagle3-whitelist", "--lock-timeout", "30", "--json")
        waiting = start_patchkit(*argv)
        time.sleep(1.5)
        assert waiting.poll() is None, finish(waiting, argv)
        assert sha256(spec) == before
        fcntl.flock(held, fcntl.LOCK_UN)
    done = finish(waiting, argv)
    assert done.returncode == 0, done
    assert step(done, "eagle3-whitelist")["status"] == "changed"
    assert sha256(spec) != before
