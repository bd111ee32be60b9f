"""The runner's decisions against FakeAgent (patchkit/host/testing.py), a fake host agent in
memory: plan -> apply -> status -> rollback in sequence, a failed step stopping the steps
after it, a rollback undoing newest first, a broken journal stopping the run. No host and no
subprocess: each run takes milliseconds. The same flows against the real agent (local and
SSH) are in test_apply_local.py, test_faults.py and test_ssh.py."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from patchkit.fleet.inventory import HostSpec
from patchkit.run.journal import Journal, new_run_id
from patchkit.recipe.model import LoadedRecipe, load_recipe
from patchkit.run.results import HostResult
from patchkit.run.runner import Options, Runner, Session
from patchkit.host.testing import FakeAgent, FakePackage, FakeTransport

STATE = "/fake/state"
FILES = {name: f"/site/toy/{name}.py" for name in ("alpha", "beta", "gamma")}
NOTHING_TO_ROLL_BACK = "nothing to roll back: no applied change of toy in the journal"
ORIGINAL = {path: b"ITEMS = [\"a\"]\n" for path in FILES.values()}

RECIPE = """
name: toy
steps:
""" + "".join(f"""
  - name: {name}
    patch:
      package: toy
      modules: [toy.{name}]
      edit: {{list_insert: {{names: [ITEMS], values: [b]}}}}
    verify: {{import: [toy.{name}]}}
""" for name in FILES) + """
  - name: check
    check: {python: "import toy"}
"""


@pytest.fixture
def recipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LoadedRecipe:
    monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(tmp_path / "cache"))  # the edit cache: not the user's
    path = tmp_path / "toy.yaml"
    path.write_text(RECIPE)
    return load_recipe(path)


@pytest.fixture
def host() -> FakeAgent:
    modules = {f"toy.{name}": path for name, path in FILES.items()}
    return FakeAgent(files=dict(ORIGINAL), packages={"toy": FakePackage("/site/toy", "1.0", modules)})


def run(agent: FakeAgent, recipe: LoadedRecipe, command: str, **options: Any) -> HostResult:
    """One command on the fake host, as the CLI runs it (plan: apply --dry-run)."""
    if command == "plan":
        command, options["dry_run"] = "apply", True
    runner = Runner(recipe, Options(**options), new_run_id(), command)
    session = Session(HostSpec(name="fake"), FakeTransport(), agent, Journal(agent, STATE))  # type: ignore[arg-type]
    result: HostResult = asyncio.run(getattr(runner, command)(session))
    time.sleep(2e-6)  # run ids sort by their start time, to the microsecond
    return result


def statuses(result: HostResult) -> dict[str, str]:
    return {step.name: step.status for step in result.steps}


def patched(agent: FakeAgent) -> set[str]:
    return {name for name, path in FILES.items() if agent.files[path] != ORIGINAL[path]}


def test_plan_apply_status_apply_again_rollback(host: FakeAgent, recipe: LoadedRecipe) -> None:
    plan = run(host, recipe, "plan")
    assert statuses(plan) == {"alpha": "changed", "beta": "changed", "gamma": "changed", "check": "skipped"}
    assert "+ITEMS = [\"a\", \"b\"]" in (plan.steps[0].diff or "")
    assert patched(host) == set() and host.journal == {} and not host.ops("apply_files", "journal_write")

    status = run(host, recipe, "status")
    assert status.status == "pending" and statuses(status)["alpha"] == "pending"

    applied = run(host, recipe, "apply")
    assert applied.status == "changed", applied
    assert statuses(applied) == {"alpha": "changed", "beta": "changed", "gamma": "changed", "check": "ok"}
    assert patched(host) == set(FILES)
    [record] = host.runs("toy")
    assert record["status"] == "changed" and [s["verified"] for s in record["steps"][:3]] == [True] * 3

    status = run(host, recipe, "status")
    assert status.status == "ok" and statuses(status)["alpha"] == "applied"

    again = run(host, recipe, "apply")
    assert statuses(again) == {"alpha": "ok", "beta": "ok", "gamma": "ok", "check": "ok"}
    assert len(host.ops("apply_files")) == 3  # nothing written the second time

    rolled = run(host, recipe, "rollback")
    assert rolled.status == "changed" and patched(host) == set()
    assert run(host, recipe, "status").status == "pending"
    assert run(host, recipe, "rollback").message == NOTHING_TO_ROLL_BACK


def test_a_failed_step_stops_the_steps_after_it_and_a_plan_goes_on(host: FakeAgent, recipe: LoadedRecipe) -> None:
    host.failing_imports.add("toy.beta")
    planned = run(host, recipe, "plan")  # a plan reads only: it shows every step
    assert statuses(planned)["gamma"] == "changed"

    applied = run(host, recipe, "apply")
    assert applied.status == "failed"
    assert statuses(applied) == {"alpha": "changed", "beta": "failed", "gamma": "skipped", "check": "skipped"}
    assert "import check failed" in applied.steps[1].message and "original restored" in applied.steps[1].message
    assert applied.steps[2].message == "not run: step beta failed"
    assert patched(host) == {"alpha"}
    assert [args["files"][0]["path"] for _, args in host.ops("apply_files")] == [FILES["alpha"], FILES["beta"]]  # never gamma
    assert not host.ops("check")
    [record] = host.runs("toy")
    assert record["status"] == "failed" and [s["status"] for s in record["steps"]][:2] == ["changed", "failed"]

    rolled = run(host, recipe, "rollback")  # the change that did land is undone
    assert statuses(rolled) == {"alpha": "changed"} and patched(host) == set()


def test_a_plan_shows_every_problem_at_once(host: FakeAgent, recipe: LoadedRecipe) -> None:
    host.files[FILES["beta"]] = b"OTHER = 1\n"  # no ITEMS: the target is not found
    planned = run(host, recipe, "plan")
    assert statuses(planned) == {"alpha": "changed", "beta": "failed", "gamma": "changed", "check": "skipped"}
    assert "target not found" in planned.steps[1].message
    applied = run(host, recipe, "apply")  # an apply stops there
    assert statuses(applied) == {"alpha": "changed", "beta": "failed", "gamma": "skipped", "check": "skipped"}


def test_a_failed_check_fails_the_host_after_the_patches(host: FakeAgent, recipe: LoadedRecipe) -> None:
    host.check_returncodes["import toy"] = 1
    applied = run(host, recipe, "apply")
    assert applied.status == "failed" and statuses(applied)["check"] == "failed"
    assert "the fake says no" in applied.steps[3].message
    assert patched(host) == set(FILES)  # a check undoes nothing


def test_rollback_undoes_newest_first_and_a_drifted_file_alone_is_refused(
        host: FakeAgent, recipe: LoadedRecipe) -> None:
    run(host, recipe, "apply")
    host.files[FILES["beta"]] = b"ITEMS = ['someone else']\n"
    host.calls.clear()

    rolled = run(host, recipe, "rollback")
    assert [step.name for step in rolled.steps] == ["gamma", "beta", "alpha"]
    assert [args["path"] for _, args in host.ops("restore")] == [FILES["gamma"], FILES["beta"], FILES["alpha"]]
    assert statuses(rolled) == {"gamma": "changed", "beta": "failed", "alpha": "changed"}
    assert "drifted" in rolled.steps[1].message and rolled.status == "failed"
    assert patched(host) == {"beta"}

    forced = run(host, recipe, "rollback", force=True)  # only what is left: beta
    assert statuses(forced) == {"beta": "changed"}
    assert patched(host) == set()
    assert run(host, recipe, "rollback").message == NOTHING_TO_ROLL_BACK


def test_rollback_of_named_steps_leaves_the_others_for_later(host: FakeAgent, recipe: LoadedRecipe) -> None:
    run(host, recipe, "apply")
    first = run(host, recipe, "rollback", steps=["beta"])
    assert statuses(first) == {"beta": "changed"} and patched(host) == {"alpha", "gamma"}
    rest = run(host, recipe, "rollback")
    assert [step.name for step in rest.steps] == ["gamma", "alpha"] and patched(host) == set()


def test_a_journal_that_takes_no_more_records_stops_the_run(host: FakeAgent, recipe: LoadedRecipe) -> None:
    host.fail_journal_write = 2  # the record after alpha's intent (alpha's own result) does not land
    applied = run(host, recipe, "apply")
    assert applied.status == "failed"
    assert "the journal takes no more records" in applied.message and "in place: alpha" in applied.message
    assert patched(host) == {"alpha"}  # named by its intent record, which did land
    assert [args["files"][0]["path"] for _, args in host.ops("apply_files")] == [FILES["alpha"]]

    # as the real agent: once a journal write failed, every op that changes the host is refused
    from patchkit.host.agent.client import AgentRefused
    from patchkit.host.agent.protocol import READ, RESTORE

    async def after_the_failure() -> tuple[Any, Any]:
        read = await (await host.send(READ({"path": FILES["beta"]}))).result()
        with pytest.raises(AgentRefused, match="a journal write of this run failed earlier"):
            await (await host.send(RESTORE({"path": FILES["alpha"], "backup_path": "/b", "expected_sha256": "x"}))).result()
        return read, host.journal_broken

    read, why = asyncio.run(after_the_failure())
    assert read["exists"] and why and "No space left on device" in why


def test_the_fake_answers_as_the_real_agent_does(tmp_path: Path) -> None:
    """The same requests to the real agent (a local process) and to FakeAgent: the same reply
    keys, and the same refusals, so the runner sees one shape from both."""
    import base64
    import sys

    from patchkit.host.agent.client import AgentClient, AgentRefused
    from patchkit.host.agent.protocol import APPLY_FILES, HASH, JOURNAL_LIST, JOURNAL_WRITE, LOCK, READ, RESTORE
    from patchkit.host.transport.local import LocalTransport
    from patchkit.host.testing import sha256

    target, backup, missing = str(tmp_path / "m.py"), str(tmp_path / "state" / "backups" / "r" / "m.py"), str(tmp_path / "none.py")
    old, new = b"X = 1\n", b"X = 2\n"

    async def exchange(agent: Any) -> list[Any]:
        out: list[Any] = []
        out.append(await agent.call(LOCK({"state_dir": str(tmp_path / "state"), "timeout_s": 5, "owner": "t"})))
        out.append(await agent.call(READ({"path": target})))
        out.append(await agent.call(READ({"path": missing})))
        out.append(await agent.call(HASH({"paths": [target, missing]})))
        one = {"path": target, "expected_sha256": sha256(old), "content_b64": base64.b64encode(new).decode(),
               "backup_path": backup}
        out.append(await agent.call(APPLY_FILES({"files": [one], "verify_imports": [], "import_timeout_s": 30})))
        broken = {**one, "expected_sha256": sha256(new), "backup_path": backup + ".2",
                  "content_b64": base64.b64encode(b"X = (\n").decode()}
        out.append(await agent.call(APPLY_FILES({"files": [broken], "verify_imports": [], "import_timeout_s": 30})))
        try:
            await agent.call(RESTORE({"path": target, "backup_path": backup, "expected_current": "0" * 64,
                                      "original_sha256": sha256(old), "force": False,
                                      "root": str(tmp_path), "state_dir": str(tmp_path / "state")}))
        except AgentRefused as exc:
            out.append(("refused", "drifted" in str(exc)))
        out.append(await agent.call(RESTORE({"path": target, "backup_path": backup, "expected_current": sha256(new),
                                             "original_sha256": sha256(old), "force": False,
                                             "root": str(tmp_path), "state_dir": str(tmp_path / "state")})))
        out.append(await agent.call(RESTORE({"path": target, "backup_path": backup, "expected_current": sha256(new),
                                             "original_sha256": sha256(old), "force": False,
                                             "root": str(tmp_path), "state_dir": str(tmp_path / "state")})))
        record = {"run_id": "r1", "recipe": "toy"}
        out.append(await agent.call(JOURNAL_WRITE({"state_dir": str(tmp_path / "state"), "recipe": "toy",
                                                   "run_id": "r1", "record": record})))
        out.append(await agent.call(JOURNAL_LIST({"state_dir": str(tmp_path / "state"), "recipe": "toy"})))
        return out

    def shape(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: shape(v) for k, v in value.items() if k not in ("path", "state_dir", "detail")} \
                if all(isinstance(k, str) and not k.startswith("/") for k in value) else sorted(value)
        if isinstance(value, list):
            return [shape(v) for v in value]
        return type(value).__name__ if not isinstance(value, (bool, tuple)) else value

    async def real() -> list[Any]:
        Path(target).write_bytes(old)
        agent = await AgentClient.start(LocalTransport(), sys.executable, "local")
        try:
            await agent.started(sys.executable)
            return await exchange(agent)
        finally:
            await agent.close()

    from_real = asyncio.run(real())
    fake = FakeAgent(files={target: old})
    from_fake = asyncio.run(exchange(fake))
    assert shape(from_fake) == shape(from_real)
    assert len(from_real) == 11 and from_real[6] == ("refused", True) and from_real[5]["ok"] is False
    assert fake.files[target] == old == Path(target).read_bytes()
