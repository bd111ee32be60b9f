"""`patchkit bundle` and the bundle it writes, run by a plain interpreter on this machine.

The releases are real toy wheels in a find-links folder (tests/agent/test_release_test.py's),
pip pointed at it alone. A "container" here is a venv whose site-packages holds one release's
files as pip would install them (the wheel unpacked, RECORD and all); the bundle is run as
`python fix.pyz ... -- COMMAND` by that venv's interpreter, and what it did is read off the
disk, the journal, and patchkit status/history/rollback. The podman tier
(tests/containers/test_bundle_containers.py) runs the same bundles in real containers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import zipfile
from pathlib import Path

import pytest

from patchkit.run.journal import backup_name
from tests.agent.test_release_test import RELEASES, build_wheel, pip_sees_only
from tests.helpers import make_venv, run_patchkit, sha256

SPECULATIVE = "toyllm/config/speculative.py"
PASSING_VERIFY = "import inspect, toyllm.config.speculative as s; assert 'kimi_k2' in inspect.getsource(s)"


def bundle_recipe(folder: Path, verify: str = PASSING_VERIFY, name: str = "toyfix", versions: str = ">=0.10.1,<0.22",
                  extra: str = "") -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(f"""name: {name}
steps:
  - name: preflight
    check: {{package: toyllm, python: "import toyllm; print('toyllm imports')"}}
  - name: whitelist
    patch:
      package: toyllm
      versions: "{versions}"
      modules: [toyllm.config.speculative, toyllm.config]
      edit:
        list_insert:
          names: [eagle3_target_supported, aux_hidden_states_supported]
          within: SpeculativeConfig._verify_args
          values: [kimi_k2, deepseek_v3]
          after: afmoe
    verify:
      import: [toyllm.config.speculative]
      python: {json.dumps(verify)}
{extra}""")
    return path


@pytest.fixture(name="toy", scope="module")
def toy_fixture(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The toy releases, one cache, the recipe and its bundle (built once for the module)."""
    root = tmp_path_factory.mktemp("bundle")
    links = root / "links"
    links.mkdir()
    for version in RELEASES:
        build_wheel(links, version)
    env = pip_sees_only(links, root / "cache")
    recipe = bundle_recipe(root)
    built = run_patchkit("bundle", str(recipe), "-o", str(root / "fix.pyz"), env=env, timeout=180)
    assert built.returncode == 0, built
    return {"root": root, "links": links, "env": env, "recipe": recipe, "bundle": root / "fix.pyz", "built": built}


def installed(root: Path, links: Path, version: str) -> Path:
    """A venv whose site-packages holds toyllm `version` as pip installs it; its python."""
    site = root / "site"
    with zipfile.ZipFile(links / f"toyllm-{version}-py3-none-any.whl") as wheel:
        wheel.extractall(site)
    return make_venv(root, [site])


def run_bundle(python: Path, bundle: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), str(bundle), *args], capture_output=True, text=True, timeout=timeout,
                          check=False, cwd="/")


def server(python: Path, marker: Path, code: int = 0) -> list[str]:
    """A stand-in for `vllm serve`: notes its pid and what it imports, exits with `code`."""
    program = ("import os, sys, toyllm.config.speculative as s; "
               f"open({str(marker)!r}, 'w').write('%d %s' % (os.getpid(), 'kimi_k2' in open(s.__file__).read())); "
               f"sys.exit({code})")
    return [str(python), "-c", program]


def test_the_bundle_applies_verified_then_execs_the_command_and_status_history_rollback_read_its_journal(
        toy: dict[str, object], tmp_path: Path) -> None:
    python = installed(tmp_path / "host", toy["links"], "0.16.0")  # type: ignore[arg-type]
    target = tmp_path / "host" / "site" / SPECULATIVE
    original = target.read_bytes()
    state, marker = tmp_path / "state", tmp_path / "served"
    proc = subprocess.Popen([str(python), str(toy["bundle"]), "--state-dir", str(state), "--",
                             *server(python, marker, code=7)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 7, err  # the server's exit code: it replaced the bundle's process
    pid, patched_seen = marker.read_text().split()
    assert int(pid) == proc.pid and patched_seen == "True", err  # exec'd (same pid), after the patch
    assert "whitelist: changed" in err and "verified (read-back, syntax, import, python)" in err, err
    # Byte for byte what `patchkit apply` writes on a twin of the host.
    twin = installed(tmp_path / "twin", toy["links"], "0.16.0")  # type: ignore[arg-type]
    applied = run_patchkit("apply", str(toy["recipe"]), "-e", f"python={twin}", "--state-dir", str(tmp_path / "s2"))
    assert applied.returncode == 0, applied
    assert target.read_bytes() == (tmp_path / "twin" / "site" / SPECULATIVE).read_bytes() != original
    # The journal: one apply run, the original backed up, read by the CLI like any other run.
    (record_file,) = (state / "runs" / "toyfix").glob("*.json")
    record = json.loads(record_file.read_text())
    whitelist = next(s for s in record["steps"] if s["name"] == "whitelist")
    assert record["kind"] == "apply" and record["status"] == "changed" and whitelist["verified"] is True
    assert Path(whitelist["backup"]).read_bytes() == original and whitelist["file"] == str(target)
    (twin_record,) = (tmp_path / "s2" / "runs" / "toyfix").glob("*.json")
    twin_whitelist = next(s for s in json.loads(twin_record.read_text())["steps"] if s["name"] == "whitelist")
    assert whitelist["message"] == twin_whitelist["message"]  # as apply journals it, nothing a plan adds
    assert whitelist["diff"] == twin_whitelist["diff"].replace(str(tmp_path / "twin"), str(tmp_path / "host"))
    assert oct(state.stat().st_mode & 0o777) == "0o700" and oct(record_file.stat().st_mode & 0o777) == "0o600"
    on_host = ["-e", f"python={python}", "--state-dir", str(state)]
    status = run_patchkit("status", str(toy["recipe"]), *on_host, "--json")
    assert status.returncode == 0, status
    steps = {s["name"]: s for s in status.json()["hosts"]["local"]["steps"]}
    assert steps["whitelist"]["status"] == "applied" and record["run_id"] in steps["whitelist"]["message"]
    history = run_patchkit("history", *on_host)
    assert history.returncode == 0 and record["run_id"] in history.stdout and "changed whitelist" in history.stdout
    rollback = run_patchkit("rollback", str(toy["recipe"]), *on_host)
    assert rollback.returncode == 0, rollback
    assert target.read_bytes() == original


def test_a_second_start_is_ok_fast_and_writes_nothing(toy: dict[str, object], tmp_path: Path) -> None:
    python = installed(tmp_path / "host", toy["links"], "0.16.0")  # type: ignore[arg-type]
    state = tmp_path / "state"
    first = run_bundle(python, toy["bundle"], "--state-dir", str(state), "--", "true")  # type: ignore[arg-type]
    assert first.returncode == 0, first.stderr
    target = tmp_path / "host" / "site" / SPECULATIVE
    before = (target.stat().st_mtime_ns, sorted(p.name for p in state.rglob("*")))
    started = time.monotonic()
    second = run_bundle(python, toy["bundle"], "--state-dir", str(state), "--", "true")  # type: ignore[arg-type]
    took = time.monotonic() - started
    assert second.returncode == 0, second.stderr
    assert "toyfix: in place (whitelist ok)" in second.stderr and "changed" not in second.stderr
    assert took < 1.0, f"a start with the fix in place took {took:.2f} s"
    assert (target.stat().st_mtime_ns, sorted(p.name for p in state.rglob("*"))) == before


@pytest.mark.parametrize("version", ["0.9.0", "0.22.0"])
def test_a_release_the_bundle_was_not_built_for_refuses_before_the_command(toy: dict[str, object], tmp_path: Path,
                                                                           version: str) -> None:
    python = installed(tmp_path / "host", toy["links"], version)  # type: ignore[arg-type]
    target = tmp_path / "host" / "site" / SPECULATIVE
    original, marker = target.read_bytes(), tmp_path / "served"
    done = run_bundle(python, toy["bundle"], "--state-dir", str(tmp_path / "state"), "--",  # type: ignore[arg-type]
                      *server(python, marker))
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"patchkit-bundle: refused: toyllm {version} is not "
                                                                   "a release this bundle was built for"), done.stderr
    assert "0.10.1, 0.10.2, 0.16.0, 0.18.0" in done.stderr and f"{python} not started" in done.stderr
    assert not marker.exists() and target.read_bytes() == original and not (tmp_path / "state").exists()
    # --on-unknown run: the command starts, unpatched, with a warning that says so.
    loud = run_bundle(python, toy["bundle"], "--state-dir", str(tmp_path / "state"),  # type: ignore[arg-type]
                      "--on-unknown=run", "--", *server(python, marker))
    assert loud.returncode == 0 and f"WARNING: starting {python} UNPATCHED" in loud.stderr, loud.stderr
    assert marker.read_text().endswith("False") and target.read_bytes() == original


def test_an_installed_file_the_bundle_does_not_know_refuses(toy: dict[str, object], tmp_path: Path) -> None:
    python = installed(tmp_path / "host", toy["links"], "0.16.0")  # type: ignore[arg-type]
    target = tmp_path / "host" / "site" / SPECULATIVE
    target.write_text(target.read_text().replace('"afmoe",', '"afmoe",  # edited by hand'))
    edited, marker = target.read_bytes(), tmp_path / "served"
    done = run_bundle(python, toy["bundle"], "--", *server(python, marker))  # type: ignore[arg-type]
    assert done.returncode == 1 and not marker.exists() and target.read_bytes() == edited
    assert f"toyllm 0.16.0: {target} hashes to " in done.stderr and "which no build of this bundle knows" in done.stderr


def test_a_failing_verify_leaves_the_original_bytes_and_the_command_unstarted(toy: dict[str, object],
                                                                               tmp_path: Path) -> None:
    recipe = bundle_recipe(tmp_path, verify="import sys; sys.exit('the verify program says no')", name="nofix")
    built = run_patchkit("bundle", str(recipe), "-o", str(tmp_path / "nofix.pyz"), env=toy["env"],  # type: ignore[arg-type]
                         timeout=120)
    assert built.returncode == 0, built
    python = installed(tmp_path / "host", toy["links"], "0.16.0")  # type: ignore[arg-type]
    target = tmp_path / "host" / "site" / SPECULATIVE
    original, marker, state = target.read_bytes(), tmp_path / "served", tmp_path / "state"
    done = run_bundle(python, tmp_path / "nofix.pyz", "--state-dir", str(state), "--", *server(python, marker))
    assert done.returncode == 1 and not marker.exists()
    assert "verify program failed: SystemExit: the verify program says no" in done.stderr or \
        "the verify program says no" in done.stderr, done.stderr
    assert "original restored" in done.stderr and f"step whitelist failed; {python} not started" in done.stderr
    assert target.read_bytes() == original
    (record_file,) = (state / "runs" / "nofix").glob("*.json")
    record = json.loads(record_file.read_text())
    whitelist = next(s for s in record["steps"] if s["name"] == "whitelist")
    assert record["status"] == "failed" and whitelist["status"] == "failed" and whitelist["restored"] is True
    assert whitelist["sha256_after"] == whitelist["sha256_before"] == sha256(target)


def test_a_state_dir_another_user_may_write_is_refused_before_anything_changes(toy: dict[str, object],
                                                                               tmp_path: Path) -> None:
    python = installed(tmp_path / "host", toy["links"], "0.16.0")  # type: ignore[arg-type]
    target = tmp_path / "host" / "site" / SPECULATIVE
    original, marker, state = target.read_bytes(), tmp_path / "served", tmp_path / "state"
    state.mkdir()
    state.chmod(0o777)
    done = run_bundle(python, toy["bundle"], "--state-dir", str(state), "--", *server(python, marker))  # type: ignore[arg-type]
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert f"state folder {state} is writable by others" in done.stderr
    assert target.read_bytes() == original and not marker.exists() and list(state.iterdir()) == []


@pytest.mark.parametrize("args, said", [
    ([], "no command to start after --"),
    (["--"], "no command to start after --"),
    (["--on-unknown", "maybe", "--", "true"], "--on-unknown maybe: refuse or run"),
    (["--colour", "--", "true"], "unknown option --colour"),
    (["--state-dir"], "--state-dir needs a value"),
])
def test_a_bad_bundle_command_line_is_one_line_and_the_usage(toy: dict[str, object], tmp_path: Path,
                                                             args: list[str], said: str) -> None:
    python = installed(tmp_path / "host", toy["links"], "0.16.0")  # type: ignore[arg-type]
    done = run_bundle(python, toy["bundle"], *args)  # type: ignore[arg-type]
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"patchkit-bundle: {said}") and "(usage: python BUNDLE.pyz" in done.stderr
    assert "kimi_k2" not in (tmp_path / "host" / "site" / SPECULATIVE).read_text()


def test_the_build_says_which_releases_are_left_out_and_the_bundle_is_stdlib_only(toy: dict[str, object],
                                                                                 tmp_path: Path) -> None:
    err = toy["built"].stderr  # type: ignore[attr-defined]
    assert "toyllm 0.9.0, 0.10.0, 0.22.0: not in the bundle (outside every step's versions)" in err
    assert "4 releases (0.10.1, 0.10.2, 0.16.0, 0.18.0)" in err
    with zipfile.ZipFile(toy["bundle"]) as z:  # type: ignore[arg-type]
        assert sorted(z.namelist()) == ["__main__.py", "bundle.json", "bundle.py", "core.py"]
        doc = json.loads(z.read("bundle.json"))
    assert sorted(doc["steps"][1]["releases"]) == ["0.10.1", "0.10.2", "0.16.0", "0.18.0"]
    # -I -S: no site-packages, no user site, no PYTHON* variables: the standard library alone.
    done = subprocess.run(["python3", "-I", "-S", str(toy["bundle"]), "--help"], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0 and done.stdout.startswith("usage: python BUNDLE.pyz"), done.stderr
    assert "--on-unknown run" in done.stdout


def test_a_recipe_with_secrets_or_no_patch_step_is_a_usage_error(toy: dict[str, object], tmp_path: Path) -> None:
    recipe = tmp_path / "secret.yaml"
    recipe.write_text("name: secret\nvars: {token: abc}\nsecrets: [token]\nsteps:\n"
                      "  - name: c\n    check: {python: 'print(1)'}\n")
    done = run_patchkit("bundle", str(recipe), "-o", str(tmp_path / "x.pyz"), env=toy["env"])  # type: ignore[arg-type]
    assert done.returncode == 2 and "secret variables (token)" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "x.pyz").exists()
    for versions, said in [("installed", "--versions installed is for patchkit test"),
                           ("~=x", "--versions '~=x': expected a specifier")]:
        done = run_patchkit("bundle", str(toy["recipe"]), "-o", str(tmp_path / "x.pyz"), "--versions", versions,
                            env=toy["env"])  # type: ignore[arg-type]
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and said in done.stderr, done.stderr
    recipe.write_text("name: nopatch\nsteps:\n  - name: c\n    check: {python: 'print(1)'}\n")
    done = run_patchkit("bundle", str(recipe), "-o", str(tmp_path / "x.pyz"), env=toy["env"])  # type: ignore[arg-type]
    assert done.returncode == 2 and "has no patch step: nothing to bundle" in done.stderr
    assert not (tmp_path / "x.pyz").exists()


def test_the_bundle_names_backups_as_the_journal_does() -> None:
    from tests.helpers import host_agent

    agent = host_agent()
    namespace = dict(vars(agent))
    source = (Path(__file__).resolve().parents[2] / "patchkit" / "host" / "remote" / "bundle.py").read_text()
    exec(compile(source, "bundle.py", "exec"), namespace)
    for step, path in [("whitelist", "/usr/lib/python3/site-packages/vllm/config/speculative.py"),
                       ("a%b", "/x/100%/y.py"), ("s", "/" + "/".join(["deep" * 20] * 5) + "/serving.py"),
                       ("é", "/opt/ü/ß.py")]:
        assert namespace["bundle_backup_name"](step, path) == backup_name(step, path)


def test_two_steps_on_one_file_apply_in_order_and_a_second_start_knows_both_in_place(toy: dict[str, object],
                                                                                     tmp_path: Path) -> None:
    """The second step edits what the first wrote: the first is in place once both are."""
    recipe = bundle_recipe(tmp_path, name="twofix", extra="""  - name: minimax
    patch:
      package: toyllm
      versions: ">=0.16,<0.17"
      modules: [toyllm.config.speculative]
      edit:
        list_insert:
          names: [eagle3_target_supported]
          within: SpeculativeConfig._verify_args
          values: [minimax]
          after: deepseek_v3
""")
    built = run_patchkit("bundle", str(recipe), "-o", str(tmp_path / "two.pyz"), env=toy["env"],  # type: ignore[arg-type]
                         timeout=120)
    assert built.returncode == 0, built
    python = installed(tmp_path / "host", toy["links"], "0.16.0")  # type: ignore[arg-type]
    target = tmp_path / "host" / "site" / SPECULATIVE
    state = tmp_path / "state"
    first = run_bundle(python, tmp_path / "two.pyz", "--state-dir", str(state), "--", "true")
    assert first.returncode == 0, first.stderr
    assert "whitelist: changed" in first.stderr and "minimax: changed" in first.stderr
    text = target.read_text()
    assert text.index('"afmoe",') < text.index('"kimi_k2",') < text.index('"deepseek_v3",') < text.index('"minimax",')
    second = run_bundle(python, tmp_path / "two.pyz", "--state-dir", str(state), "--", "true")
    assert second.returncode == 0 and "in place (whitelist ok, minimax ok)" in second.stderr, second.stderr
    # On 0.10.x the second step is outside its range: skipped there, the first still applies.
    old = installed(tmp_path / "old", toy["links"], "0.10.2")  # type: ignore[arg-type]
    done = run_bundle(old, tmp_path / "two.pyz", "--state-dir", str(tmp_path / "state-old"), "--", "true")
    assert done.returncode == 0 and "whitelist: changed" in done.stderr and "minimax: skipped" in done.stderr, \
        done.stderr


@pytest.mark.parametrize("verdict", ["passes", "fails"])
def test_a_start_cut_off_before_its_checks_were_recorded_is_settled_by_the_next(toy: dict[str, object],
                                                                                tmp_path: Path, verdict: str) -> None:
    """Killed while its verify program ran: the file holds the patch, the journal says unverified.
    The next start runs the checks before it calls the fix in place; failing, it puts the original back."""
    hang, refuse = tmp_path / "hang", tmp_path / "refuse"
    verify = (f"import os, sys, time\nif os.path.exists({str(hang)!r}): time.sleep(120)\n"
              f"if os.path.exists({str(refuse)!r}): sys.exit('refused by the test')\n")
    recipe = bundle_recipe(tmp_path, verify=verify, name="cutfix")
    built = run_patchkit("bundle", str(recipe), "-o", str(tmp_path / "cut.pyz"), env=toy["env"],  # type: ignore[arg-type]
                         timeout=120)
    assert built.returncode == 0, built
    python = installed(tmp_path / "host", toy["links"], "0.16.0")  # type: ignore[arg-type]
    target = tmp_path / "host" / "site" / SPECULATIVE
    original, state, marker = target.read_bytes(), tmp_path / "state", tmp_path / "served"
    hang.touch()
    proc = subprocess.Popen([str(python), str(tmp_path / "cut.pyz"), "--state-dir", str(state), "--",
                             *server(python, marker)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    deadline = time.monotonic() + 60
    while "kimi_k2" not in target.read_text():  # written; its checks are running (the verify program hangs)
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    (record_file,) = (state / "runs" / "cutfix").glob("*.json")
    assert next(s for s in json.loads(record_file.read_text())["steps"] if s["name"] == "whitelist")["verified"] is False
    hang.unlink()
    if verdict == "fails":
        refuse.touch()
    done = run_bundle(python, tmp_path / "cut.pyz", "--state-dir", str(state), "--", *server(python, marker))
    cut = json.loads(record_file.read_text())
    if verdict == "passes":
        assert done.returncode == 0 and marker.read_text().endswith("True"), done.stderr
        assert "was cut off before its checks were recorded: verified now" in done.stderr
        assert next(s for s in cut["steps"] if s["name"] == "whitelist")["verified"] is True
        status = run_patchkit("status", str(recipe), "-e", f"python={python}", "--state-dir", str(state), "--json")
        assert {s["name"]: s["status"] for s in status.json()["hosts"]["local"]["steps"]}["whitelist"] == "applied"
    else:
        assert done.returncode == 1 and not marker.exists(), done.stderr
        assert "and its change fails" in done.stderr and "refused by the test" in done.stderr
        assert target.read_bytes() == original and cut["rolled_back_steps"] == ["whitelist"]


def test_a_module_the_interpreter_loads_from_another_file_is_refused_as_ambiguous(toy: dict[str, object],
                                                                                  tmp_path: Path) -> None:
    """speculative/ beside speculative.py: `import` takes the package folder; the bundle's file
    is not what the server would run, so nothing is written and the server does not start."""
    python = installed(tmp_path / "host", toy["links"], "0.16.0")  # type: ignore[arg-type]
    target = tmp_path / "host" / "site" / SPECULATIVE
    original, marker = target.read_bytes(), tmp_path / "served"
    shadow = target.parent / "speculative" / "__init__.py"
    shadow.parent.mkdir()
    shadow.write_bytes(original)
    done = run_bundle(python, toy["bundle"], "--", *server(python, marker))  # type: ignore[arg-type]
    assert done.returncode == 1 and not marker.exists(), done.stderr
    assert f"the target is ambiguous: {python} loads toyllm.config.speculative from {shadow}, not from {target}" \
        in done.stderr
    assert target.read_bytes() == original == shadow.read_bytes()


@pytest.mark.parametrize("elsewhere", ["another venv's script", "a checkout in the working folder"])
def test_a_command_whose_python_imports_the_package_from_elsewhere_is_refused(toy: dict[str, object], tmp_path: Path,
                                                                             elsewhere: str) -> None:
    """The server's interpreter must load the files the bundle patches: a console script whose #!
    names another venv's Python, or `python -c`/`-m` started in a folder holding a `toyllm/`
    checkout (the working folder comes first on their path), is refused before anything is written."""
    python = installed(tmp_path / "host", toy["links"], "0.16.0")  # type: ignore[arg-type]
    target = tmp_path / "host" / "site" / SPECULATIVE
    original, marker, cwd = target.read_bytes(), tmp_path / "served", tmp_path / "work"
    cwd.mkdir()
    if elsewhere == "another venv's script":
        other = installed(tmp_path / "other", toy["links"], "0.16.0")  # type: ignore[arg-type]
        script = tmp_path / "bin" / "toy-serve"
        script.parent.mkdir()
        script.write_text(f"#!{other}\n" + server(other, marker)[2].replace("; ", "\n") + "\n")
        script.chmod(0o755)
        command, loads_from = [str(script)], tmp_path / "other" / "site" / "toyllm"
    else:
        (cwd / "toyllm").mkdir()
        (cwd / "toyllm" / "__init__.py").write_text("")
        command, loads_from = server(python, marker), cwd / "toyllm"
    done = subprocess.run([str(python), str(toy["bundle"]), "--state-dir", str(tmp_path / "state"), "--", *command],
                          capture_output=True, text=True, timeout=60, check=False, cwd=cwd)
    assert done.returncode == 1 and not marker.exists(), done.stderr
    assert f"which imports toyllm from {loads_from}, not {tmp_path / 'host' / 'site' / 'toyllm'}" in done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert target.read_bytes() == original and not (tmp_path / "state").exists()
