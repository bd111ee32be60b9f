"""apply / plan / status / rollback / history against a real local host.

Each test gets its own sandbox host (tests/helpers.py): copies of the hand-written fixture
packages in fixtures/pkgs, a pip-less venv that imports them, and a private state dir.
The real `patchkit` executable does the work; the tests assert what is on disk.
"""

from __future__ import annotations

import ast
import difflib
import subprocess
import time
from pathlib import Path

from tests.helpers import (  # noqa: F401 - sandbox_fixture: the `sandbox` fixture
    TOY_MODEL,
    TOY_SPECULATIVE,
    Sandbox,
    host,
    mode,
    recipe,
    sandbox_fixture,
    sha256,
    step,
)

TOY = recipe("toyllm_eagle3.yaml")
GATED = recipe("toyllm_gated.yaml")
BROKEN = recipe("brokenllm.yaml")
PRUNE = recipe("toyllm_prune.yaml")

ORIGINAL_TARGETS = ["llama", "qwen", "minicpm", "gpt_oss", "hunyuan_vl", "hunyuan_v1_dense", "afmoe"]


def whitelist(path: Path) -> list[object]:
    """The value of `eagle3_target_supported` in SpeculativeConfig._verify_args, by meaning."""
    tree = ast.parse(path.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "SpeculativeConfig")
    method = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "_verify_args")
    for node in ast.walk(method):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "eagle3_target_supported" for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise AssertionError(f"no eagle3_target_supported in {path}")


def added_and_removed(old: str, new: str) -> tuple[list[str], list[str]]:
    added, removed = [], []
    for line in difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0):
        if line.startswith("+") and not line.startswith("+++"):
            added.append(line[1:])
        elif line.startswith("-") and not line.startswith("---"):
            removed.append(line[1:])
    return added, removed


def private_tree(root: Path) -> None:
    """Every folder under the state dir is 0700, every file 0600."""
    assert mode(root) == 0o700, root
    for path in root.rglob("*"):
        expected = 0o700 if path.is_dir() else 0o600
        assert mode(path) == expected, f"{path} is {oct(mode(path))}, expected {oct(expected)}"


def accepts(sb: Sandbox, model_type: str) -> bool:
    """Does the patched toyllm, imported by the sandbox's own interpreter, accept model_type?"""
    code = (
        "import sys\n"
        "from toyllm.config import ModelConfig, SpeculativeConfig\n"
        "try:\n"
        "    SpeculativeConfig('eagle3', ModelConfig(sys.argv[1]))._verify_args()\n"
        "except ValueError:\n"
        "    sys.exit(1)\n"
    )
    proc = subprocess.run([str(sb.python), "-c", code, model_type], capture_output=True, text=True, cwd="/", check=False)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode == 0


# ---------------------------------------------------------------------------- plan


def test_plan_prints_a_unified_diff_and_writes_nothing(sandbox: Sandbox) -> None:
    spec = sandbox.file(TOY_SPECULATIVE)
    before = {p: sha256(p) for p in sandbox.pkgs.rglob("*.py")}

    shown = sandbox.run("plan", TOY)

    assert shown.returncode == 0, shown
    assert f"--- a{spec}" in shown.stdout and f"+++ b{spec}" in shown.stdout, shown
    assert '+                "kimi_k2",' in shown.stdout, shown
    assert '+                "deepseek_v3",' in shown.stdout, shown
    assert "@@ " in shown.stdout

    planned = sandbox.run("apply", TOY, "--dry-run", json_out=True)  # the same as plan
    assert planned.returncode == 0, planned
    doc = planned.json()
    assert doc["dry_run"] is True
    patch = step(planned, "eagle3-whitelist")
    assert patch["status"] == "changed"
    assert patch["file"] == str(spec)
    assert patch["sha256_before"] == before[spec]
    assert patch["sha256_after"] != before[spec]
    assert patch["diff"].startswith(f"--- a{spec}\n+++ b{spec}\n")
    assert patch["backup"] is None

    assert {p: sha256(p) for p in sandbox.pkgs.rglob("*.py")} == before
    assert sandbox.run_records("toyllm_eagle3") == []
    assert sandbox.backups() == []


# ---------------------------------------------------------------------------- apply


def test_apply_changes_verifies_backs_up_and_journals_then_is_idempotent(sandbox: Sandbox) -> None:
    spec = sandbox.file(TOY_SPECULATIVE)
    spec.chmod(0o640)  # an unusual mode, to see that the write keeps it
    original = spec.read_bytes()
    original_sha = sha256(spec)
    assert not accepts(sandbox, "kimi_k2")

    applied = sandbox.run("apply", TOY, json_out=True)

    assert applied.returncode == 0, applied
    doc = applied.json()
    assert doc["dry_run"] is False and doc["recipe"] == "toyllm_eagle3"
    assert host(applied)["status"] == "changed"
    patch = step(applied, "eagle3-whitelist")
    assert patch["status"] == "changed", patch
    assert step(applied, "eagle3-preflight")["status"] == "ok"
    assert step(applied, "fp32-dtype")["status"] == "changed"

    # The list has our elements, after "afmoe"; nothing else in the file moved.
    assert whitelist(spec) == ORIGINAL_TARGETS + ["kimi_k2", "deepseek_v3"]
    added, removed = added_and_removed(original.decode(), spec.read_text())
    assert removed == []
    assert added == ['                "kimi_k2",', '                "deepseek_v3",']
    assert "# Hunyuan family" in spec.read_text() and '"minicpm",  # MiniCPM-4' in spec.read_text()
    assert mode(spec) == 0o640

    # Hashes in the report are the hashes on disk.
    assert patch["file"] == str(spec)
    assert patch["sha256_before"] == original_sha
    assert patch["sha256_after"] == sha256(spec)
    assert {c["name"]: c["ok"] for c in patch["checks"]} == {"read-back": True, "syntax": True, "import": True}
    # The other step's single-quoted tuple keeps its quote style.
    assert "_FLOAT16_DTYPES = ('float16', 'bfloat16', 'float32')  # single quotes on purpose" in \
        sandbox.file(TOY_MODEL).read_text()

    # The backup is the original, private, in the host's state dir (not site-packages).
    backup = Path(patch["backup"])
    assert backup.is_file() and backup.is_relative_to(sandbox.state)
    assert backup.read_bytes() == original
    assert len(sandbox.backups()) == 2
    private_tree(sandbox.state)

    # The journal has the run, with the same facts.
    records = {r["run_id"]: r for r in sandbox.run_records("toyllm_eagle3")}
    record = records[doc["run_id"]]
    assert record["kind"] == "apply" and record["status"] == "changed"
    journaled = {s["name"]: s for s in record["steps"]}["eagle3-whitelist"]
    assert journaled["status"] == "changed"
    assert (journaled["sha256_before"], journaled["sha256_after"]) == (original_sha, sha256(spec))
    assert journaled["backup"] == str(backup)

    # The patched package really accepts the new model types.
    assert accepts(sandbox, "kimi_k2") and accepts(sandbox, "deepseek_v3")

    # Second apply: nothing to do, nothing written, no new backup.
    patched = spec.read_bytes()
    backups = sandbox.backups()
    again = sandbox.run("apply", TOY, json_out=True)
    assert again.returncode == 0, again
    assert host(again)["status"] == "ok"
    assert step(again, "eagle3-whitelist")["status"] == "ok"
    assert step(again, "fp32-dtype")["status"] == "ok"
    assert step(again, "eagle3-whitelist")["diff"] is None
    assert spec.read_bytes() == patched
    assert sandbox.backups() == backups


# ---------------------------------------------------------------------------- status


def test_status_pending_applied_drifted(sandbox: Sandbox) -> None:
    spec = sandbox.file(TOY_SPECULATIVE)
    original = spec.read_text()
    only = ("--steps", "eagle3-whitelist")

    pending = sandbox.run("status", TOY, *only, json_out=True)
    assert pending.returncode == 3, pending
    assert step(pending, "eagle3-whitelist")["status"] == "pending"
    assert spec.read_text() == original  # status writes nothing

    assert sandbox.run("apply", TOY, *only).returncode == 0
    applied = sandbox.run("status", TOY, *only, json_out=True)
    assert applied.returncode == 0, applied
    assert step(applied, "eagle3-whitelist")["status"] == "applied"

    # Behind patchkit's back: a comment appended; our values are still there.
    spec.write_text(spec.read_text() + "# tuned by hand\n")
    commented = sandbox.run("status", TOY, *only, json_out=True)
    assert commented.returncode == 3, commented
    assert step(commented, "eagle3-whitelist")["status"] == "drifted"

    # Behind patchkit's back: the list rewritten without our values.
    spec.write_text(original.replace('"afmoe",\n', '"afmoe",  # no kimi here\n'))
    gone = sandbox.run("status", TOY, *only)
    assert gone.returncode == 3, gone
    assert "drifted" in gone.stdout


def test_version_gate_outside_range_is_skipped_with_reason(sandbox: Sandbox) -> None:
    spec = sandbox.file(TOY_SPECULATIVE)
    before = sha256(spec)

    status = sandbox.run("status", GATED, json_out=True)
    assert status.returncode == 0, status
    gated = step(status, "eagle3-whitelist")
    assert gated["status"] == "not-applicable"
    assert "0.16.0" in gated["message"] and ">=0.18,<0.22" in gated["message"]

    applied = sandbox.run("apply", GATED, json_out=True)
    assert applied.returncode == 0, applied
    assert host(applied)["status"] == "skipped"
    skipped = step(applied, "eagle3-whitelist")
    assert skipped["status"] == "skipped"
    assert "toyllm 0.16.0 is outside >=0.18,<0.22" in skipped["message"]
    assert sha256(spec) == before
    assert sandbox.backups() == []


def test_a_patch_no_host_is_in_the_versions_of_is_warned_though_the_run_succeeds(sandbox: Sandbox) -> None:
    warning = ("no host is in eagle3-whitelist's versions toyllm >=0.18,<0.22 (0.16.0 found): "
               "nothing was patched by it")
    shown = sandbox.run("apply", GATED)
    assert shown.returncode == 0, shown  # each host is as the recipe asks: not a failure
    assert shown.stdout.splitlines()[-1] == f"hosts: 1 skipped · warning: {warning}", shown
    assert f"patchkit: warning: {warning}" in shown.stderr.splitlines(), shown

    doc = sandbox.run("apply", GATED, json_out=True)
    assert doc.returncode == 0 and doc.json()["warnings"] == [warning], doc
    assert f"patchkit: warning: {warning}" in doc.stderr.splitlines(), doc

    # A step some host got is no warning.
    applied = sandbox.run("apply", TOY, json_out=True)
    assert applied.returncode == 0 and applied.json()["warnings"] == [], applied
    assert "warning" not in applied.stderr, applied


# ---------------------------------------------------------------------------- rollback


def test_rollback_restores_originals_then_has_nothing_left(sandbox: Sandbox) -> None:
    spec, model = sandbox.file(TOY_SPECULATIVE), sandbox.file(TOY_MODEL)
    originals = {spec: spec.read_bytes(), model: model.read_bytes()}
    applied = sandbox.run("apply", TOY, json_out=True)
    assert applied.returncode == 0, applied
    apply_id = applied.json()["run_id"]
    assert all(p.read_bytes() != data for p, data in originals.items())

    rolled = sandbox.run("rollback", TOY, json_out=True)
    assert rolled.returncode == 0, rolled
    assert host(rolled)["status"] == "changed"
    assert {s["name"]: s["status"] for s in host(rolled)["steps"]} == {"eagle3-whitelist": "changed",
                                                                       "fp32-dtype": "changed"}
    assert all(p.read_bytes() == data for p, data in originals.items())

    second = sandbox.run("rollback", TOY)
    assert second.returncode == 0, second
    assert "nothing to roll back" in second.stdout
    assert all(p.read_bytes() == data for p, data in originals.items())

    history = sandbox.run("history", None, json_out=True)
    assert history.returncode == 0, history
    runs = {r["run_id"]: r for r in host(history)["runs"]}
    assert runs[apply_id]["command"] == "apply"
    assert runs[rolled.json()["run_id"]]["command"] == "rollback"
    assert runs[rolled.json()["run_id"]]["rollback_of"] == apply_id
    # Listed oldest first, in the order the runs happened.
    kinds = [r["command"] for r in host(history)["runs"]]
    assert kinds == ["apply", "rollback"], history


def changed_lines(diff: str) -> tuple[list[str], list[str]]:
    """(removed, added) lines of a unified diff, headers aside."""
    lines = [line for line in diff.splitlines() if not line.startswith(("---", "+++"))]
    return [line[1:] for line in lines if line.startswith("-")], [line[1:] for line in lines if line.startswith("+")]


def test_rollback_shows_the_diff_it_made_not_the_one_it_undid(sandbox: Sandbox) -> None:
    spec = sandbox.file(TOY_SPECULATIVE)
    original = spec.read_text()
    applied = sandbox.run("apply", TOY, json_out=True)
    assert applied.returncode == 0, applied
    forward = step(applied, "eagle3-whitelist")["diff"]
    removed, added = changed_lines(forward)
    assert added, forward

    rolled = sandbox.run("rollback", TOY, json_out=True)
    assert rolled.returncode == 0, rolled
    assert spec.read_text() == original
    back = step(rolled, "eagle3-whitelist")["diff"]
    # From the file as patched to the file as restored: what the apply added goes, what it took comes back.
    assert changed_lines(back) == (added, removed), back
    assert back.splitlines()[:2] == forward.splitlines()[:2]  # the same file, a/ then b/
    hunk = next(line for line in back.splitlines() if line.startswith("@@"))
    old_range, new_range = hunk.split()[1:3]
    forward_hunk = next(line for line in forward.splitlines() if line.startswith("@@"))
    assert (old_range[1:], new_range[1:]) == (forward_hunk.split()[2][1:], forward_hunk.split()[1][1:])
    # The terminal's report (plain, piped) shows the same reverse diff, not the apply's.
    assert sandbox.run("apply", TOY).returncode == 0
    shown = sandbox.run("rollback", TOY)
    assert shown.returncode == 0, shown
    assert f"# local/eagle3-whitelist\n{back.rstrip()}\n" in shown.stdout, shown
    assert forward.rstrip() not in shown.stdout, shown
    # And the reviewer's page.
    assert sandbox.run("apply", TOY).returncode == 0
    page = sandbox.root / "rollback.md"
    reviewed = sandbox.run("rollback", TOY, "--markdown", str(page))
    assert reviewed.returncode == 0, reviewed
    assert back.rstrip() in page.read_text(), page.read_text()
    assert forward.rstrip() not in page.read_text()
    assert spec.read_text() == original


def test_rollback_refuses_a_drifted_file_unless_forced(sandbox: Sandbox) -> None:
    spec = sandbox.file(TOY_SPECULATIVE)
    original = spec.read_bytes()
    assert sandbox.run("apply", TOY, "--steps", "eagle3-whitelist").returncode == 0
    spec.write_bytes(spec.read_bytes() + b"# tuned by hand\n")
    drifted = spec.read_bytes()

    refused = sandbox.run("rollback", TOY, json_out=True)
    assert refused.returncode == 1, refused
    failed = step(refused, "eagle3-whitelist")
    assert failed["status"] == "failed"
    assert str(spec) in failed["message"] and "drifted" in failed["message"]
    assert spec.read_bytes() == drifted

    forced = sandbox.run("rollback", TOY, "--force")
    assert forced.returncode == 0, forced
    assert spec.read_bytes() == original


def test_rollback_run_picks_the_named_run(sandbox: Sandbox) -> None:
    spec, model = sandbox.file(TOY_SPECULATIVE), sandbox.file(TOY_MODEL)
    spec_original, model_original = spec.read_bytes(), model.read_bytes()
    first = sandbox.run("apply", TOY, "--steps", "fp32-dtype", json_out=True)
    second = sandbox.run("apply", TOY, "--steps", "eagle3-whitelist", json_out=True)
    assert (first.returncode, second.returncode) == (0, 0), (first, second)
    spec_patched = spec.read_bytes()

    older = sandbox.run("rollback", TOY, "--run", first.json()["run_id"])
    assert older.returncode == 0, older
    assert model.read_bytes() == model_original
    assert spec.read_bytes() == spec_patched  # the other run's change stays

    unknown = sandbox.run("rollback", TOY, "--run", "19990101T000000Z-000000")
    assert unknown.returncode == 1, unknown
    assert "19990101T000000Z-000000" in unknown.stdout

    newest = sandbox.run("rollback", TOY, json_out=True)  # default: the newest live change
    assert newest.returncode == 0, newest
    assert host(newest)["message"] == f"rollback of run {second.json()['run_id']}"
    assert spec.read_bytes() == spec_original


# ---------------------------------------------------------------------------- failed verification


def test_import_check_failing_without_the_patch_too_says_so(sandbox: Sandbox, tmp_path: Path) -> None:
    """A target environment that is broken already (a module its package imports is missing):
    the patch is not what fails, and the message says so; the file is restored all the same."""
    package = sandbox.pkgs / "envbroken"
    package.mkdir()
    (package / "__init__.py").write_text("")
    target = package / "cache.py"
    target.write_text("import patchkit_test_missing_module\n\nBACKENDS = ['disk']\n")
    original = target.read_bytes()
    recipe_file = tmp_path / "envbroken.yaml"
    recipe_file.write_text(
        "name: envbroken\n"
        "steps:\n"
        "  - name: add-backend\n"
        "    patch:\n"
        "      package: envbroken\n"
        "      modules: [envbroken.cache]\n"
        "      edit:\n"
        "        list_insert:\n"
        "          names: [BACKENDS]\n"
        "          values: [memory]\n"
        "    verify:\n"
        "      import: [envbroken.cache]\n"
    )

    applied = sandbox.run("apply", str(recipe_file), json_out=True)

    assert applied.returncode == 1, applied
    failed = step(applied, "add-backend")
    assert failed["message"].startswith(
        "import check failed: ModuleNotFoundError: No module named 'patchkit_test_missing_module'; "
        "it also fails without the patch (the environment, not the patch); original restored"), failed
    assert failed["restored"] is True
    assert target.read_bytes() == original
    shown = sandbox.run("apply", str(recipe_file))
    assert shown.returncode == 1, shown
    assert "it also fails without the patch" in shown.stdout, shown
    assert target.read_bytes() == original



def test_failed_import_check_restores_the_original(sandbox: Sandbox) -> None:
    target = sandbox.file("brokenllm/config/speculative.py")
    original = target.read_bytes()
    target.chmod(0o600)

    applied = sandbox.run("apply", BROKEN, json_out=True)

    assert applied.returncode == 1, applied
    assert host(applied)["status"] == "failed"
    failed = step(applied, "eagle3-whitelist")
    assert failed["status"] == "failed"
    assert "import check failed" in failed["message"]
    assert "EAGLE3_TARGETS has 4 entries" in failed["message"]  # the reason, from the target
    assert "also fails without the patch" not in failed["message"]  # the patch broke it: the original imports
    assert failed["restored"] is True
    assert target.read_bytes() == original
    assert mode(target) == 0o600
    assert failed["sha256_after"] == sha256(target)

    records = sandbox.run_records("brokenllm_whitelist")
    assert len(records) == 1
    assert records[0]["status"] == "failed"
    assert records[0]["steps"][0]["status"] == "failed"

    # The package imports again (no stale bytecode of the failed version left behind).
    proc = subprocess.run([str(sandbox.python), "-c", "import brokenllm.config.speculative"],
                          capture_output=True, text=True, cwd="/", check=False)
    assert proc.returncode == 0, proc.stderr
    # Not ours: status says pending, not drifted.
    status = sandbox.run("status", BROKEN, json_out=True)
    assert status.returncode == 3, status
    assert step(status, "eagle3-whitelist")["status"] == "pending"


# ---------------------------------------------------------------------------- journal pruning


def test_journal_pruning_keeps_the_live_changes_backup(sandbox: Sandbox) -> None:
    spec = sandbox.file(TOY_SPECULATIVE)
    original = spec.read_bytes()

    runs = [sandbox.run("apply", PRUNE, json_out=True) for _ in range(4)]
    assert [r.returncode for r in runs] == [0] * 4, runs
    assert [host(r)["status"] for r in runs] == ["changed", "ok", "ok", "ok"]
    live = runs[0].json()["run_id"]

    # keep_runs: 3 would drop the oldest run, but it holds the only way back to the original.
    kept = [r["run_id"] for r in sandbox.run_records("toyllm_prune")]
    assert kept == [r.json()["run_id"] for r in runs]
    assert [b.parent.name for b in sandbox.backups()] == [live]

    rolled = sandbox.run("rollback", PRUNE, json_out=True)
    assert rolled.returncode == 0, rolled
    assert spec.read_bytes() == original

    # Rolled back, that backup is no longer protected: the next apply prunes down to 3 runs.
    again = sandbox.run("apply", PRUNE, json_out=True)
    assert again.returncode == 0 and host(again)["status"] == "changed", again
    kept = [r["run_id"] for r in sandbox.run_records("toyllm_prune")]
    assert kept == [runs[-1].json()["run_id"], rolled.json()["run_id"], again.json()["run_id"]]
    assert [b.parent.name for b in sandbox.backups()] == [again.json()["run_id"]]
    assert Path(step(again, "eagle3-whitelist")["backup"]).read_bytes() == original


TWO_STEPS_ONE_FILE = """\
name: two_steps_one_file
steps:
  - name: first
    patch:
      package: toyllm
      modules: [toyllm.config.speculative]
      edit: {list_insert: {names: [eagle3_target_supported], values: [kimi_k2], after: afmoe}}
  - name: second
    patch:
      package: toyllm
      modules: [toyllm.config.speculative]
      edit: {list_insert: {names: [eagle3_target_supported], values: [deepseek_v3], after: kimi_k2}}
"""


def test_two_steps_on_one_file_each_see_the_file_as_the_step_before_left_it(sandbox: Sandbox) -> None:
    recipe_file = sandbox.root / "two_steps.yaml"
    recipe_file.write_text(TWO_STEPS_ONE_FILE)

    applied = sandbox.run("apply", str(recipe_file), json_out=True)

    assert applied.returncode == 0, applied
    assert [s["status"] for s in host(applied)["steps"]] == ["changed", "changed"], applied
    assert whitelist(sandbox.file(TOY_SPECULATIVE)) == ORIGINAL_TARGETS + ["kimi_k2", "deepseek_v3"]
    again = sandbox.run("apply", str(recipe_file), json_out=True)
    assert [s["status"] for s in host(again)["steps"]] == ["ok", "ok"], again


def test_a_run_cut_off_after_the_write_can_still_be_rolled_back(sandbox: Sandbox) -> None:
    """The step is journaled before the host writes: the control side dying while the host
    verifies (here: a slow import check) leaves a record that rollback can act on."""
    (sandbox.pkgs / "slow_check.py").write_text("import time\ntime.sleep(3)\n")
    recipe_file = sandbox.root / "slow.yaml"
    recipe_file.write_text(TWO_STEPS_ONE_FILE.split("  - name: second")[0].replace("two_steps_one_file", "slow")
                           + "    verify: {import: [slow_check]}\n")
    spec = sandbox.file(TOY_SPECULATIVE)
    original = spec.read_bytes()

    proc = sandbox.start("apply", str(recipe_file))
    deadline = time.monotonic() + 30
    while b'"kimi_k2"' not in spec.read_bytes() and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.kill()  # the control side dies while the host runs the import check
    proc.wait()
    assert b'"kimi_k2"' in spec.read_bytes()

    undone = sandbox.run("rollback", str(recipe_file), json_out=True)  # waits for the lock: the check ends
    assert undone.returncode == 0, undone
    assert host(undone)["status"] == "changed", undone
    assert spec.read_bytes() == original


def test_rollback_refuses_a_corrupt_backup_and_leaves_the_file_alone(sandbox: Sandbox) -> None:
    spec = sandbox.file(TOY_SPECULATIVE)
    assert sandbox.run("apply", TOY, "--steps", "eagle3-whitelist").returncode == 0
    patched = spec.read_bytes()
    [backup] = sandbox.backups()
    backup.write_bytes(backup.read_bytes().replace(b"afmoe", b"AFMOE"))  # bit rot in the journal

    undone = sandbox.run("rollback", TOY, json_out=True)

    assert undone.returncode == 1, undone
    assert "corrupt" in step(undone, "eagle3-whitelist")["message"], undone
    assert spec.read_bytes() == patched
    assert not [p for p in spec.parent.iterdir() if p.name.endswith(".patchkit-tmp")]


# ---------------------------------------------------------------------------- an interpreter that prints


def test_an_interpreter_that_prints_at_start_is_skipped_and_reported(sandbox: Sandbox) -> None:
    """A .pth that prints on stdout (one line looks like the agent's first reply) and stderr
    whenever the host's python starts: apply, status and rollback work on the local transport,
    each run reports what it skipped, and nothing of it is parsed."""
    site = next((sandbox.python.parent.parent / "lib").glob("python3*/site-packages"))
    (site / "noisy.pth").write_text(
        'import sys; print(\'{"id": 1, "ok": true}\'); print("site banner"); sys.stderr.write("site on stderr\\n")\n')
    spec = sandbox.file(TOY_SPECULATIVE)
    original = sha256(spec)

    runs = [sandbox.run("apply", TOY, json_out=True), sandbox.run("status", TOY, json_out=True),
            sandbox.run("rollback", TOY, json_out=True)]
    assert [r.returncode for r in runs] == [0, 0, 0], runs
    assert host(runs[0])["status"] == "changed" and host(runs[2])["status"] == "changed", runs
    assert "applied" in {s["status"] for s in host(runs[1])["steps"]}, runs[1]
    assert sha256(spec) == original
    for result in runs:
        warnings = host(result)["warnings"]
        assert any("on stdout before the agent started" in w and '\'{"id": 1, "ok": true}\'' in w
                   and "'site banner'" in w for w in warnings), result
        assert any("on stderr" in w and "'site on stderr'" in w for w in warnings), result
        assert "agent.output_skipped" in result.stderr and "host=local" in result.stderr, result
