"""Journal records as models (patchkit/run/results.py): the deploy's files and the launch's servers
read from journals written before these models existed, and written back unchanged.

The fixtures in fixtures/journals/ are run records as the code before the models wrote them
(a deploy of two files, one replacing a file, one in a new folder, and a launch; then a
second apply that replaced the running server with a new command; a single-file patch run and
a multi-file diff run as the code before the one file-change pipeline wrote them, which
tests/agent/test_old_journals.py also status and roll back)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from patchkit.run.results import DeployedFile, LaunchDetails, LaunchServer, RunRecord, deployed_files
from tests.helpers import REPO

JOURNALS = sorted((REPO / "fixtures" / "journals").glob("*.json"))


@pytest.mark.parametrize("path", JOURNALS, ids=[p.stem for p in JOURNALS])
def test_a_journal_written_before_the_models_loads_and_writes_back_byte_for_byte(path: Path) -> None:
    raw = json.loads(path.read_text())
    record = RunRecord.model_validate(raw)
    dumped = record.model_dump(mode="json")
    olds = raw["steps"] + [f for s in raw["steps"] for f in s.get("files") or []]
    news = dumped["steps"] + [f for s in dumped["steps"] for f in s.get("files") or []]
    for old, new in zip(olds, news):  # fields added to steps (and their files) since: at their defaults
        added = set(new) - set(old)
        assert all(new[key] is None for key in added), added
        for key in added:
            del new[key]
    assert dumped == raw
    kinds = set()
    for step in record.steps:
        details = step.details or {}
        if step.kind == "deploy" and "files" in details:
            files = deployed_files(step)
            assert [f.as_json() for f in files] == details["files"]
            kinds.add("deploy")
        if step.kind == "launch" and "servers" in details:
            launch = LaunchDetails.model_validate(details)
            assert launch.as_json() == details
            assert all(isinstance(s, LaunchServer) for s in launch.servers)
            kinds.add("launch")
        if step.kind == "patch" and step.status == "changed":
            assert step.files or (step.file and step.backup and step.sha256_before and step.sha256_after)
            kinds.add("patch")
    assert kinds == {"deploy", "launch"} or kinds in ({"launch"}, {"patch"})


def test_the_fixtures_hold_what_the_models_read() -> None:
    first = RunRecord.model_validate(json.loads((REPO / "fixtures/journals/deploy-launch-apply.json").read_text()))
    files = deployed_files(first.steps[0])
    replaced, created = files
    assert replaced.backup and replaced.sha256_before and replaced.mode_before == 0o644
    assert created.backup is None and created.sha256_before is None and created.created_dirs
    assert not replaced.planned and not created.planned  # finished runs' files carry no `planned` key
    second = RunRecord.model_validate(json.loads((REPO / "fixtures/journals/launch-replaced-apply.json").read_text()))
    launch = LaunchDetails.model_validate(second.steps[1].details)
    assert launch.replaced is not None and launch.replaced.pid != launch.servers[0].pid
    assert launch.replaced.command_hash != launch.servers[0].command_hash


def test_an_intent_record_keeps_planned_and_a_completed_one_says_so() -> None:
    planned = {"rel": "a.bin", "path": "/m/a.bin", "sha256_after": "ab" * 32, "sha256_before": None,
               "mode_before": None, "backup": None, "resumed_from": 0, "created_dirs": [], "planned": True}
    entry = DeployedFile.model_validate(planned)
    assert entry.planned and entry.as_json() == planned
    entry.planned = False
    assert entry.as_json() == {**planned, "planned": False}


def test_keys_a_model_does_not_know_survive_and_nothing_is_added() -> None:
    newer = {"rel": "a", "path": "/a", "sha256_after": "cd" * 32, "owner": "someone"}  # a newer patchkit's key
    assert DeployedFile.model_validate(newer).as_json() == newer
    old_server = {"name": "web", "pid": 7, "argv": ["serve"], "env": {"TOKEN": "x"}, "log": "/l", "command_hash": "h"}
    server = LaunchServer.model_validate(old_server)
    assert server.as_json() == old_server
    assert "env_names" not in server.model_fields_set  # rollback takes the names from `env` then
