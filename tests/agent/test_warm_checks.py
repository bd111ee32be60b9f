"""The checks of a run share warm target processes, and still see what a fresh one sees.

Against a real local host (the toyllm fixture package) through the real `patchkit`
executable: after a write, the verify program runs in a child of the process that ran the
import check (the patched modules are already imported, from the files written); a check
step's imports are remembered in the state dir and preloaded by the next run's warm parent,
which never serves the checked package from its own cache, even when a hint names it; a
program that changes the interpreter it runs in changes nothing the next check sees; a crash
of a verify program is its check's failure with its output quoted; where fork is missing the
checks run one fresh interpreter each, as before.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.agent.test_verify_python import SPEC, whitelist_recipe
from tests.helpers import Sandbox, host_agent, sandbox_fixture, step  # noqa: F401 - the `sandbox` fixture

HINTS = "warm-imports.json"
# An import by a name given at run time: the parent cannot read it ahead, the check's child
# imports it and reports it (a hint for the next session's parent).
IMPORTED_LATE = "import sys\n__import__"

# Before it imports anything: what the process it runs in has imported already.
SEES_THE_IMPORT_CHECK = """\
import sys
loaded = sorted(m for m in sys.modules if m.startswith("toyllm"))
assert "toyllm.config" in sys.modules, "a fresh interpreter: %s" % loaded
from toyllm.config import ModelConfig, SpeculativeConfig
SpeculativeConfig("eagle3", ModelConfig("kimi_k2"))._verify_args()
print("imported before the program: " + ", ".join(loaded))
"""


def check_recipe(folder: Path, name: str, steps: str) -> str:
    path = folder / f"{name}.yaml"
    path.write_text(f"name: {name}\nsteps:\n{steps}")
    return str(path)


def check_step(name: str, program: str, package: str | None = None) -> str:
    body = "".join("        " + line + "\n" for line in program.splitlines())
    return (f"  - name: {name}\n    check:\n" + (f"      package: {package}\n" if package else "")
            + "      python: |\n" + body)


def hints(sandbox: Sandbox) -> list[str]:
    """Every name the hints file keeps, for any check."""
    doc = json.loads((sandbox.state / HINTS).read_text())
    assert len(doc) == 1, doc  # one interpreter
    return [name for names in list(doc.values())[0].values() for name in names]


def test_the_verify_program_runs_where_the_import_check_imported_the_patched_modules(sandbox: Sandbox,
                                                                                      tmp_path: Path) -> None:
    recipe = whitelist_recipe(tmp_path, program=SEES_THE_IMPORT_CHECK)
    got = step(sandbox.run("apply", recipe, json_out=True), "eagle3-whitelist")
    assert got["status"] == "changed", got
    said = {c["name"]: c for c in got["checks"]}
    assert said["import"]["ok"] and said["python"]["ok"], got["checks"]
    assert said["python"]["detail"].startswith("imported before the program: toyllm, "), said
    assert "toyllm.config," in said["python"]["detail"], said
    assert b'"kimi_k2"' in sandbox.file(SPEC).read_bytes()


def test_a_check_steps_imports_are_preloaded_next_run_but_the_checked_package_is_always_fresh(
        sandbox: Sandbox, tmp_path: Path) -> None:
    """A check step with no package imports toyllm: its names (toyllm's among them) become hints.
    The next run's warm parent preloads them for that check, then the patch of toyllm must not be
    checked against the parent's unpatched copy: its verify program (vLLM-like validation, in
    the child of the import check) accepts the added model types only if the patched file was
    imported."""
    probe = check_step("probe", f"{IMPORTED_LATE}('toyllm.config.speculative')\n{IMPORTED_LATE}('fractions')\n"
                                "print('probed')")
    first = sandbox.run("apply", check_recipe(tmp_path, "probe", probe), json_out=True)
    assert first.returncode == 0, first.json()["hosts"]["local"]["steps"]
    assert "toyllm.config.speculative" in hints(sandbox) and "fractions" in hints(sandbox)

    original = sandbox.file(SPEC).read_bytes()
    recipe = Path(whitelist_recipe(tmp_path))
    recipe.write_text(recipe.read_text().replace("steps:\n", "steps:\n" + probe, 1))
    done = sandbox.run("apply", str(recipe), json_out=True)
    assert done.returncode == 0, [(s["name"], s["message"]) for s in done.json()["hosts"]["local"]["steps"]]
    assert step(done, "probe")["status"] == "ok"
    got = step(done, "eagle3-whitelist")
    assert got["status"] == "changed", got
    assert "EAGLE-3 accepts kimi_k2, deepseek_v3" in {c["name"]: c for c in got["checks"]}["python"]["detail"]
    assert sandbox.file(SPEC).read_bytes() != original


def test_hints_never_name_the_package_a_check_reads_fresh(sandbox: Sandbox, tmp_path: Path) -> None:
    probe = check_step("probe", f"{IMPORTED_LATE}('toyllm.config.speculative')\n{IMPORTED_LATE}('fractions')\n"
                                "print('probed')", package="toyllm")
    assert sandbox.run("apply", check_recipe(tmp_path, "probe", probe)).returncode == 0
    names = hints(sandbox)
    assert "fractions" in names, " ".join(names)
    assert not [n for n in names if n.split(".")[0] == "toyllm"], names


def test_a_program_that_changes_its_interpreter_changes_nothing_the_next_check_sees(sandbox: Sandbox,
                                                                                   tmp_path: Path) -> None:
    spoil = ("import json, os, sys, toyllm.config as c\n"
             "c.ModelConfig = None\njson.dumps = None\nos.environ['SPOILED'] = '1'\n"
             "sys.modules['toyllm.config.speculative'] = None\nprint('spoiled')")
    clean = ("import json, os, toyllm.config as c, toyllm.config.speculative\n"
             "assert c.ModelConfig is not None and json.dumps({}) == '{}' and 'SPOILED' not in os.environ\n"
             "print('clean')")
    steps = check_step("spoil", spoil, "toyllm") + check_step("clean", clean, "toyllm")
    for run in (1, 2):  # the second run with the first one's hints preloaded
        done = sandbox.run("apply", check_recipe(tmp_path, "spoil", steps), json_out=True)
        assert done.returncode == 0, (run, done)
        assert step(done, "clean")["message"] == "passed: clean", (run, step(done, "clean"))


def test_a_verify_program_that_crashes_fails_its_check_with_its_output_quoted(sandbox: Sandbox,
                                                                               tmp_path: Path) -> None:
    original = sandbox.file(SPEC).read_bytes()
    program = ("import os, signal, sys\nprint('about to crash', flush=True)\n"
               "sys.stderr.write('last words\\n'); sys.stderr.flush()\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    got = step(sandbox.run("apply", whitelist_recipe(tmp_path, program=program), json_out=True), "eagle3-whitelist")
    assert got["status"] == "failed" and got["restored"] is True, got
    assert got["message"].startswith("verify program failed: last words"), got["message"]
    assert {c["name"]: c for c in got["checks"]}["python"]["detail"] == "last words"
    assert sandbox.file(SPEC).read_bytes() == original


def test_the_import_checks_timeout_holds_when_a_verify_program_follows(sandbox: Sandbox, tmp_path: Path) -> None:
    (sandbox.pkgs / "toyllm" / "slow.py").write_text("import time\ntime.sleep(60)\n")
    recipe = Path(whitelist_recipe(tmp_path, timeout_s=2))
    recipe.write_text(recipe.read_text().replace("import: [toyllm.config]", "import: [toyllm.config, toyllm.slow]"))
    original = sandbox.file(SPEC).read_bytes()
    got = step(sandbox.run("apply", str(recipe), json_out=True, timeout=50), "eagle3-whitelist")
    assert got["status"] == "failed" and got["restored"] is True, got
    assert got["message"].startswith("import check timed out after 2.0s: toyllm.config, toyllm.slow"), got["message"]
    assert [c["name"] for c in got["checks"]] == ["read-back", "syntax", "import"], got["checks"]
    assert sandbox.file(SPEC).read_bytes() == original


def test_without_fork_each_check_is_a_fresh_interpreter(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    agent = host_agent()
    program = {"code": ("import sys\nassert 'toyllm.config' not in sys.modules, 'not fresh'\n"
                        "import toyllm.config\nprint('fresh')"), "variables": {}, "timeout_s": 60}
    monkeypatch.setattr(agent.sys, "executable", str(sandbox.python))
    monkeypatch.delattr(os, "fork")
    checks: list[dict[str, object]] = []
    assert agent.check_in_one_process(["toyllm.config"], 60, checks, None, program) is None
    assert [(c["name"], c["ok"]) for c in checks] == [("import", True), ("python", True)], checks
    assert checks[1]["detail"].startswith("fresh (")
    assert agent.WARM_STATE["parent"] is None  # no warm parent without fork


def test_an_import_failure_fails_the_step_before_its_verify_program_runs(sandbox: Sandbox, tmp_path: Path) -> None:
    """The program would pass; the import check of the same process fails first, and says why."""
    (sandbox.pkgs / "toyllm" / "broken.py").write_text("raise RuntimeError('toyllm.broken cannot load')\n")
    recipe = Path(whitelist_recipe(tmp_path, program="print('never run')\n"))
    recipe.write_text(recipe.read_text().replace("import: [toyllm.config]", "import: [toyllm.config, toyllm.broken]"))
    original = sandbox.file(SPEC).read_bytes()
    got = step(sandbox.run("apply", str(recipe), json_out=True), "eagle3-whitelist")
    assert got["status"] == "failed" and got["restored"] is True, got
    assert got["message"].startswith("import check failed: RuntimeError: toyllm.broken cannot load"), got["message"]
    assert [c["name"] for c in got["checks"]] == ["read-back", "syntax", "import"], got["checks"]
    assert sandbox.file(SPEC).read_bytes() == original


def test_a_package_a_check_reads_fresh_is_imported_anew_even_when_its_modules_did_not_change(
        sandbox: Sandbox, tmp_path: Path) -> None:
    """toyllm.flag reads a data file at import. A check that names no package imports it (so the
    next run's warm parent preloads it), a second check changes the data file (no module, no
    folder of a module changes), and a check of package toyllm must see the new value."""
    (sandbox.pkgs / "toyllm" / "data").mkdir()
    flag = sandbox.pkgs / "toyllm" / "data" / "flag.txt"
    flag.write_text("old")
    (sandbox.pkgs / "toyllm" / "flag.py").write_text(
        "import os\nwith open(os.path.join(os.path.dirname(__file__), 'data', 'flag.txt')) as f:\n"
        "    VALUE = f.read()\n")
    probe = check_step("probe", f"{IMPORTED_LATE}('toyllm.flag')\nprint(sys.modules['toyllm.flag'].VALUE)")
    assert sandbox.run("apply", check_recipe(tmp_path, "probe", probe)).returncode == 0
    assert "toyllm.flag" in hints(sandbox)
    flag.write_text("old")
    switch = check_step("switch", f"open({str(flag)!r}, 'w').write('new')\nprint('switched')")
    sees = check_step("sees", "import toyllm.flag\nprint(toyllm.flag.VALUE)", package="toyllm")
    done = sandbox.run("apply", check_recipe(tmp_path, "switch", probe + switch + sees), json_out=True)
    assert done.returncode == 0, done
    assert step(done, "probe")["message"] == "passed: old"
    assert step(done, "sees")["message"] == "passed: new"


def test_a_forked_program_ends_as_a_fresh_interpreter_ends(sandbox: Sandbox, tmp_path: Path) -> None:
    """Its atexit functions run and its buffered output is flushed; sys.exit's message is its error."""
    program = ("import atexit, sys\nsys.stdout.write('buffered, no newline')\n"
               "atexit.register(lambda: sys.stderr.write('atexit ran\\n'))\nsys.exit('it says no')\n")
    got = step(sandbox.run("apply", whitelist_recipe(tmp_path, program=program), json_out=True), "eagle3-whitelist")
    assert got["status"] == "failed", got
    assert got["message"].startswith("verify program failed: atexit ran;"), got["message"]
    assert {c["name"]: c for c in got["checks"]}["python"]["detail"] == "it says no\natexit ran"
    passing = ("import atexit, io, sys\n"  # block-buffered whatever PYTHONUNBUFFERED says
               "sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, 'w', closefd=False)))\n"
               "atexit.register(print, 'said at exit')\n")
    got = step(sandbox.run("apply", whitelist_recipe(tmp_path, program=passing), json_out=True), "eagle3-whitelist")
    assert got["status"] == "changed", got
    assert {c["name"]: c for c in got["checks"]}["python"]["detail"].startswith("said at exit ("), got["checks"]


def test_a_module_written_while_the_parent_imported_it_is_imported_anew(sandbox: Sandbox, tmp_path: Path) -> None:
    """`sidecar.mod`, when a process imports it after a first one did, rewrites its own file (as
    the agent's next step may write while the parent imports after a check): the parent read the
    old text but finds the new file, and its folder, as they are after its import. The next
    check must see what a fresh import sees."""
    (sandbox.pkgs / "sidecar").mkdir()
    (sandbox.pkgs / "sidecar" / "__init__.py").write_text("")
    source = sandbox.pkgs / "sidecar" / "mod.py"
    first = tmp_path / "imported-once"
    source.write_text(
        "import os\nVALUE = 'old'\n"
        f"if os.path.exists({str(first)!r}) and VALUE == 'old':\n"
        f"    with open({str(source)!r} + '.tmp', 'w') as f:\n"
        "        f.write(\"VALUE = 'newer'\\n\")\n"
        f"    os.replace({str(source)!r} + '.tmp', {str(source)!r})\n"
        f"open({str(first)!r}, 'w').close()\n")
    reads = f"{IMPORTED_LATE}('sidecar.mod')\nprint(sys.modules['sidecar.mod'].VALUE)"
    done = sandbox.run("apply", check_recipe(tmp_path, "sidecar", check_step("first", reads, "toyllm")
                                             + check_step("second", reads, "toyllm")), json_out=True)
    assert done.returncode == 0, done
    assert step(done, "first")["message"] == "passed: old", done
    assert "VALUE = 'newer'" in source.read_text()  # the parent's import rewrote it
    assert step(done, "second")["message"] == "passed: newer", done


# What a check's child finds imported before its own first import (printed as JSON).
FOUND_BEFORE = """\
import json, sys
found = {m: m in sys.modules for m in %r}
import toyllm.config
print(json.dumps(found, sort_keys=True))
"""


def read_ahead_sandbox(sandbox: Sandbox, top: str) -> None:
    """toyllm.config.model imports `top` lines at column 0, `wave` only in a docstring's example
    and `tabnanny` and `filecmp` only inside a function: the first check on a host (no hints yet)
    must find what the column-0 lines import already imported by the warm parent, nothing else."""
    model = sandbox.pkgs / "toyllm" / "config" / "model.py"
    model.write_text(top + '"""Example:\n\nimport wave\n"""\n\n\ndef later():\n    import tabnanny\n'
                     '    from filecmp import cmp\n\n\n' + model.read_text())


def found_before(done: Any, name: str) -> dict[str, bool]:
    message = step(done, name)["message"]
    assert message.startswith("passed: {"), message
    return json.loads(message[len("passed: "):])


def test_a_hosts_first_check_finds_the_modules_its_package_imports_at_top_level_imported(
        sandbox: Sandbox, tmp_path: Path) -> None:
    read_ahead_sandbox(sandbox, "import colorsys\n")
    program = FOUND_BEFORE % (["colorsys", "wave", "tabnanny", "filecmp", "toyllm", "toyllm.config.model"],)
    assert not (sandbox.state / HINTS).exists()
    done = sandbox.run("apply", check_recipe(tmp_path, "ahead", check_step("sees", program, "toyllm")), json_out=True)
    assert done.returncode == 0, done
    assert found_before(done, "sees") == {"colorsys": True, "wave": False, "tabnanny": False, "filecmp": False,
                                          "toyllm": False, "toyllm.config.model": False}


def test_a_name_read_ahead_that_imports_the_checked_package_is_left_to_the_check(sandbox: Sandbox,
                                                                                 tmp_path: Path) -> None:
    """toyplug imports toyllm: the parent that imported it ahead holds the checked package and
    refuses; the next one imports what else was read ahead, not toyplug (the check imports it
    itself, from a fresh toyllm)."""
    (sandbox.pkgs / "toyplug.py").write_text("import toyllm\nPLUGGED = True\n")
    read_ahead_sandbox(sandbox, "import toyplug\nimport colorsys\n")
    program = FOUND_BEFORE % (["colorsys", "toyplug", "toyllm"],)
    done = sandbox.run("apply", check_recipe(tmp_path, "plug", check_step("sees", program, "toyllm")), json_out=True)
    assert done.returncode == 0, done
    assert found_before(done, "sees") == {"colorsys": True, "toyplug": False, "toyllm": False}


def test_a_name_read_ahead_whose_import_hangs_costs_one_checks_timeout_once(sandbox: Sandbox,
                                                                            tmp_path: Path) -> None:
    """The program imports `sleepy` (its import hangs) only on a branch it does not take: the
    parent reading ahead hangs in it; after the check's timeout the agent ends that parent and
    runs the checks of the session in fresh interpreters (the second check waits for none)."""
    (sandbox.pkgs / "sleepy.py").write_text("import time\ntime.sleep(120)\n")
    program = "import sys\nif len(sys.argv) > 5:\n    import sleepy\nimport toyllm.config\nprint('fine')\n"
    steps = "".join(check_step(name, program, "toyllm").replace("    check:\n", "    check:\n      timeout_s: 6\n")
                    for name in ("first", "second"))
    started = time.monotonic()
    done = sandbox.run("apply", check_recipe(tmp_path, "sleepy", steps), json_out=True, timeout=100)
    took = time.monotonic() - started
    assert done.returncode == 0, done
    assert [step(done, n)["message"] for n in ("first", "second")] == ["passed: fine"] * 2
    assert 6 <= took < 15, took  # one timeout waited, not one per attempt and check (24 s)


def test_a_check_waits_for_no_more_than_one_module_the_parent_learned(sandbox: Sandbox, tmp_path: Path) -> None:
    """The first check imports slow_a, slow_b and slow_c by name (2 s each): the parent learns
    them and imports them after that check, while the agent goes on; the second check is asked
    for long before the parent could import all three, and is served after at most the one it
    was importing (which one depends on when it was asked), never after slow_c."""
    names = ("slow_a", "slow_b", "slow_c")
    for name in names:
        (sandbox.pkgs / f"{name}.py").write_text("import time\ntime.sleep(2)\n")
    first = "".join(f"__import__('{name}')\n" for name in names) + "print('imported')"  # by name: learned
    second = FOUND_BEFORE % (list(names),)
    done = sandbox.run("apply", check_recipe(tmp_path, "slow", check_step("first", first, "toyllm")
                                             + check_step("second", second, "toyllm")), json_out=True)
    assert done.returncode == 0, done
    found = found_before(done, "second")
    assert not found["slow_c"] and sum(found.values()) <= 1, found


def test_a_checks_hints_are_imported_ahead_of_that_check_only(sandbox: Sandbox, tmp_path: Path) -> None:
    """`learns` imports colorsys by name (no reading ahead sees it): its first run learns it, the
    next run of `learns` finds it imported before the program starts; a run of another check
    (`other`) does not (the whitelist alone need not wait for what the preflight imports)."""
    learns = FOUND_BEFORE % (["colorsys"],) + "__import__('colorsys')\n"
    other = FOUND_BEFORE % (["colorsys", "toyllm"],)
    learning = check_recipe(tmp_path, "learns", check_step("learns", learns, "toyllm"))
    assert found_before(sandbox.run("apply", learning, json_out=True), "learns") == {"colorsys": False}
    assert "colorsys" in hints(sandbox)
    done = sandbox.run("apply", check_recipe(tmp_path, "other", check_step("other", other, "toyllm")), json_out=True)
    assert found_before(done, "other") == {"colorsys": False, "toyllm": False}
    assert found_before(sandbox.run("apply", learning, json_out=True), "learns") == {"colorsys": True}
