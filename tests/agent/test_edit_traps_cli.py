"""Through the real CLI and agent: a file that declares latin-1 gets latin-1 bytes, and the
interpreter imports the value the recipe wrote; `value: no` for a bool is refused in one line
before anything is written."""

from __future__ import annotations

import difflib
import subprocess
from pathlib import Path

from tests.helpers import Sandbox, sandbox_fixture, sha256, step  # noqa: F401 - the `sandbox` fixture

NAMES = "toyllm/config/names.py"
LATIN1_HEAD = b"# -*- coding: latin-1 -*-\n"


def write_recipe(folder: Path, module: str, edit: str) -> str:
    path = folder / "recipe.yaml"
    path.write_text(
        "name: traps\n"
        "steps:\n"
        "  - name: edit\n"
        "    patch:\n"
        "      package: toyllm\n"
        f"      modules: [{module}]\n"
        "      edit:\n"
        f"        {edit}\n"
        "    verify:\n"
        f"      import: [{module}]\n", encoding="utf-8")
    return str(path)


def imported(sandbox: Sandbox, module: str, name: str) -> str:
    """ascii() of `module.name` as the host's interpreter imports it."""
    shown = subprocess.run([str(sandbox.python), "-c", f"import {module} as m; print(ascii(m.{name}))"],
                           capture_output=True, text=True, timeout=60, cwd="/", check=True)
    return shown.stdout.strip()


def test_a_latin1_file_is_written_in_latin1_and_imports_the_value(sandbox: Sandbox, tmp_path: Path) -> None:
    sandbox.file(NAMES).write_bytes(LATIN1_HEAD + b'NAME = "plain"\n')
    recipe = write_recipe(tmp_path, "toyllm.config.names", 'set_value: {names: [NAME], value: "naïve"}')

    planned = sandbox.run("plan", recipe, json_out=True)
    assert planned.returncode == 0, planned
    assert '+NAME = "naïve"' in step(planned, "edit")["diff"]

    applied = sandbox.run("apply", recipe, json_out=True)
    assert applied.returncode == 0, applied
    done = step(applied, "edit")
    assert done["status"] == "changed" and done["verified"] is True, done
    assert sandbox.file(NAMES).read_bytes() == LATIN1_HEAD + b'NAME = "na\xefve"\n'
    assert done["sha256_after"] == sha256(sandbox.file(NAMES))
    assert imported(sandbox, "toyllm.config.names", "NAME") == ascii("naïve")

    assert step(sandbox.run("plan", recipe, json_out=True), "edit")["status"] == "ok"
    status = sandbox.run("status", recipe, json_out=True)
    assert status.returncode == 0, status
    assert step(status, "edit")["status"] == "applied"


def test_a_character_latin1_cannot_hold_is_refused_naming_file_encoding_and_character(
        sandbox: Sandbox, tmp_path: Path) -> None:
    sandbox.file(NAMES).write_bytes(LATIN1_HEAD + b'NAME = "plain"\n')
    before = sandbox.file(NAMES).read_bytes()
    recipe = write_recipe(tmp_path, "toyllm.config.names", 'set_value: {names: [NAME], value: "œuvre"}')

    applied = sandbox.run("apply", recipe)
    assert applied.returncode == 1, applied
    assert f"{sandbox.file(NAMES)}: 'œ' (U+0153, line 2) cannot be written in latin-1, the encoding the file " \
           "declares; nothing changed" in applied.stdout
    assert "Traceback" not in applied.stderr
    assert sandbox.file(NAMES).read_bytes() == before
    assert sandbox.backups() == []


SAMPLING = "toyllm/config/sampling.py"
SAMPLING_CODE = ("class SamplingParams:\n"
                 "    def __init__(self, detokenize: bool = True) -> None:\n"
                 "        self.detokenize = detokenize\n")
DETOKENIZE = "target: default, within: SamplingParams.__init__, arg: detokenize"


def test_value_no_for_a_bool_is_refused_in_plan_and_apply(sandbox: Sandbox, tmp_path: Path) -> None:
    sandbox.file(SAMPLING).write_text(SAMPLING_CODE)
    before = sandbox.file(SAMPLING).read_bytes()
    recipe = write_recipe(tmp_path, "toyllm.config.sampling", f"set_value: {{{DETOKENIZE}, value: no}}")
    assert sandbox.run("validate", recipe).returncode == 0  # the recipe is well formed; the code decides
    refusal = (f"{sandbox.file(SAMPLING)}: set_value detokenize: value \"no\" is a string where the code has a bool; "
               "did you mean false? (say type: str to keep the string)")

    for command in ("plan", "apply"):
        shown = sandbox.run(command, recipe, json_out=True)
        assert shown.returncode == 1, shown
        result = step(shown, "edit")
        assert (result["status"], result["message"]) == ("failed", refusal), result
        terminal = sandbox.run(command, recipe)
        assert terminal.returncode == 1, terminal
        assert [line for line in terminal.stdout.splitlines() if "detokenize" in line] == \
            [f"local\tedit\tfailed\t{refusal}"]
        assert "Traceback" not in terminal.stderr
    assert sandbox.file(SAMPLING).read_bytes() == before
    assert sandbox.backups() == []

    kept = write_recipe(tmp_path, "toyllm.config.sampling", f"set_value: {{{DETOKENIZE}, value: no, type: str}}")
    applied = sandbox.run("apply", kept, json_out=True)
    assert applied.returncode == 0, applied
    assert "warning" not in step(applied, "edit")["message"]
    assert imported(sandbox, "toyllm.config.sampling", "SamplingParams().detokenize") == ascii("no")


def test_a_change_of_type_is_warned_of_in_plan_and_apply(sandbox: Sandbox, tmp_path: Path) -> None:
    sandbox.file(SAMPLING).write_text(SAMPLING_CODE)
    recipe = write_recipe(tmp_path, "toyllm.config.sampling", f"set_value: {{{DETOKENIZE}, value: auto}}")
    warning = "(warning: the code has a bool there, the new value is a string: say type: str if that is meant)"
    planned = sandbox.run("plan", recipe)
    assert planned.returncode == 0, planned
    assert warning in planned.stdout
    applied = sandbox.run("apply", recipe, json_out=True)
    assert applied.returncode == 0, applied
    assert step(applied, "edit")["message"].startswith(
        "set the default of detokenize = 'auto' (was True) in SamplingParams.__init__ " + warning)


def test_a_diff_reads_and_writes_latin1_files_in_latin1(sandbox: Sandbox, tmp_path: Path) -> None:
    """A diff over two files (the unit pipeline of several files): one edited, one added."""
    sandbox.file(NAMES).write_bytes(LATIN1_HEAD + b'CAFE = "caf\xe9"\nNAME = "plain"\n')
    old = sandbox.file(NAMES).read_bytes().decode("latin-1")
    added = LATIN1_HEAD.decode() + 'GREETING = "olé"\n'
    diff = "".join(difflib.unified_diff(old.splitlines(True), old.replace('"plain"', '"naïve"').splitlines(True),
                                        f"a/{NAMES}", f"b/{NAMES}"))
    diff += "".join(difflib.unified_diff([], added.splitlines(True), "/dev/null", "b/toyllm/config/added.py"))
    (tmp_path / "fix.patch").write_text(diff, encoding="utf-8")
    recipe = tmp_path / "fix.yaml"
    recipe.write_text("name: latin\nsteps:\n  - name: edit\n    patch:\n      package: toyllm\n"
                      "      edit: {diff: {file: fix.patch}}\n"
                      "    verify: {import: [toyllm.config.names, toyllm.config.added]}\n")

    applied = sandbox.run("apply", str(recipe), json_out=True)
    assert applied.returncode == 0, applied
    assert step(applied, "edit")["status"] == "changed"
    assert sandbox.file(NAMES).read_bytes() == LATIN1_HEAD + b'CAFE = "caf\xe9"\nNAME = "na\xefve"\n'
    assert sandbox.file("toyllm/config/added.py").read_bytes() == LATIN1_HEAD + b'GREETING = "ol\xe9"\n'
    assert imported(sandbox, "toyllm.config.names", "NAME") == ascii("naïve")
    assert imported(sandbox, "toyllm.config.added", "GREETING") == ascii("olé")
    assert step(sandbox.run("status", str(recipe), json_out=True), "edit")["status"] == "applied"
