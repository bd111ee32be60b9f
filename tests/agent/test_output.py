"""What a pipe and a terminal get: plain lines when stdout is not a terminal (no colour, no
box, nothing cut), the table on a terminal (a real pty) with run ids whole, history as fields."""

from __future__ import annotations

import os
import pty
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

from tests.helpers import PATCHKIT, TOY_SPECULATIVE, Sandbox, recipe, sandbox_fixture  # noqa: F401 - fixture

TOY = recipe("toyllm_eagle3.yaml")
BOX = re.compile("[\u2500-\u257f\u2026]")  # box drawing, and the ellipsis a cut leaves


def test_piped_output_is_plain_lines_that_say_what_the_json_says(sandbox: Sandbox) -> None:
    doc = sandbox.run("plan", TOY, json_out=True).json()
    piped = sandbox.run("plan", TOY)
    assert piped.returncode == 0, piped
    assert "\x1b" not in piped.stdout and not BOX.search(piped.stdout), piped.stdout
    lines = piped.stdout.splitlines()
    for host, result in doc["hosts"].items():
        for step in result["steps"]:
            assert f"{host}\t{step['name']}\t{step['status']}\t{step['message']}" in lines, step
    assert lines.count("--- a" + str(sandbox.file(TOY_SPECULATIVE))) == 1  # each diff once


def _on_a_terminal(argv: list[str], columns: int = 80) -> str:
    """Run patchkit with a pty as its stdout (what a person at a terminal sees)."""
    leader, follower = pty.openpty()
    env = {**os.environ, "COLUMNS": str(columns), "TERM": "xterm"}
    proc = subprocess.Popen([PATCHKIT, *argv], stdout=follower, stderr=subprocess.DEVNULL, env=env)
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    proc.wait(timeout=60)
    os.close(leader)
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.decode("utf-8", "replace"))


def test_history_gives_whole_run_ids_on_a_terminal_and_in_a_pipe_and_fields_in_json(sandbox: Sandbox) -> None:
    assert sandbox.run("apply", TOY).returncode == 0
    assert sandbox.run("rollback", TOY).returncode == 0
    doc = sandbox.run("history", None, json_out=True).json()
    assert doc["schema_version"] == 3 and "steps" not in doc["hosts"]["local"]
    runs = doc["hosts"]["local"]["runs"]
    assert [r["command"] for r in runs] == ["apply", "rollback"]
    apply_run, rollback_run = runs
    assert apply_run["recipe"] == "toyllm_eagle3" and apply_run["status"] == "changed"
    assert apply_run["started"].endswith("Z") and "eagle3-whitelist" in apply_run["changed_steps"]
    assert rollback_run["rollback_of"] == apply_run["run_id"]
    ids = [r["run_id"] for r in runs]

    piped = sandbox.run("history")
    assert all(any(line.startswith(f"local\t{run_id}\t") for line in piped.stdout.splitlines()) for run_id in ids)

    shown = _on_a_terminal(sandbox.argv("history"))
    assert "\u2502" in shown  # the table is drawn on a terminal
    assert all(run_id in shown for run_id in ids), shown  # whole, on one line
    assert "\u2026" not in shown


def test_version_and_options_before_the_command(sandbox: Sandbox) -> None:
    from patchkit import __version__
    from tests.helpers import run_patchkit

    version = run_patchkit("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"patchkit {__version__}", version
    before = run_patchkit("-v", "--json", "-i", str(sandbox.inventory), "plan", TOY, "-e", f"python={sandbox.python}")
    assert before.returncode == 0, before
    assert before.json()["hosts"]["local"]["status"] == "changed"  # --json before the command was read
    typo = run_patchkit("-v", "plna", TOY)
    assert typo.returncode == 2 and "invalid choice: 'plna'" in typo.stderr, typo


def test_bash_completion_from_the_parser_completes_commands_and_options(tmp_path: Any) -> None:
    from tests.helpers import run_patchkit

    bash = run_patchkit("completion", "bash")
    assert bash.returncode == 0, bash
    (tmp_path / "patchkit.bash").write_text(bash.stdout)

    def complete(*words: str) -> list[str]:
        words_list = " ".join(shlex.quote(w) for w in ("patchkit", *words))
        probe = (f'source {shlex.quote(str(tmp_path / "patchkit.bash"))}; COMP_WORDS=({words_list}); '
                 f'COMP_CWORD={len(words)}; _patchkit; printf "%s\\n" "${{COMPREPLY[@]}}"')
        out = subprocess.run(["bash", "--norc", "-c", probe], capture_output=True, text=True, check=True)
        return out.stdout.split()

    assert complete("ro") == ["rollback"]
    assert "--html" in complete("plan", "--h") and "--markdown" in complete("status", "--m")
    assert complete("history", "--for") == []  # rollback's --force is not history's
    assert "--force" in complete("rollback", "--for")
    for shell in ("zsh", "fish"):
        other = run_patchkit("completion", shell)
        assert other.returncode == 0 and "rollback" in other.stdout and "html" in other.stdout, other


def test_every_json_report_validates_against_patchkit_schema_report(sandbox: Sandbox) -> None:
    import json

    import jsonschema

    from tests.helpers import run_patchkit

    schema = json.loads(run_patchkit("schema", "--report").stdout)
    docs = {}
    for command, args in (("plan", [TOY]), ("apply", [TOY]), ("status", [TOY]), ("rollback", [TOY]),
                          ("history", []), ("audit", ["toyllm"])):
        result = sandbox.run(command, *args, json_out=True)
        docs[command] = result.json()
        jsonschema.validate(docs[command], schema)
    apply_doc = docs["apply"]
    assert apply_doc["schema_version"] == 3 and apply_doc["totals"] == {"hosts": 1, "changed": 1}
    assert apply_doc["seconds"] > 0 and apply_doc["hosts"]["local"]["seconds"] > 0
    assert apply_doc["hosts"]["local"]["transport"] == "local"
    assert docs["status"]["totals"]["hosts"] == 1

    usage = run_patchkit("plan", TOY, "--json", "--steps", "no-such-step")
    assert usage.returncode == 2, usage
    error = usage.json()  # a usage error is one JSON document on stdout too
    assert error["exit_code"] == 2 and "no-such-step" in error["error"]["message"]
    bad = run_patchkit("plan", "--json", "--no-such-flag", TOY)
    assert bad.returncode == 2 and "--no-such-flag" in bad.json()["error"]["message"], bad


def test_history_keeps_only_the_runs_of_a_recipe_and_since_a_moment(sandbox: Sandbox, tmp_path: Path) -> None:
    other = tmp_path / "other.yaml"
    other.write_text(Path(TOY).read_text().replace("name: toyllm_eagle3", "name: other_recipe", 1))
    assert "name: other_recipe" in other.read_text()
    assert sandbox.run("apply", TOY, "--steps", "eagle3-whitelist").returncode == 0
    assert sandbox.run("status", str(other)).returncode in (0, 3)  # status journals nothing
    assert sandbox.run("apply", str(other), "--steps", "eagle3-whitelist").returncode == 0  # `ok`, journaled
    every = sandbox.run("history", None, json_out=True).json()["hosts"]["local"]["runs"]
    assert [r["recipe"] for r in every] == ["toyllm_eagle3", "other_recipe"], every

    mine = sandbox.run("history", None, "--recipe", "other_recipe", json_out=True).json()["hosts"]["local"]["runs"]
    assert [r["recipe"] for r in mine] == ["other_recipe"], mine
    recent = sandbox.run("history", None, "--since", "1h", json_out=True).json()["hosts"]["local"]["runs"]
    assert len(recent) == 2, recent
    future = sandbox.run("history", None, "--since", "2999-01-01", json_out=True).json()["hosts"]["local"]["runs"]
    assert future == [], future
    bad = sandbox.run("history", None, "--since", "yesterday")
    assert bad.returncode == 2 and bad.stderr.startswith("patchkit: ") and "'yesterday' is neither" in bad.stderr, bad
