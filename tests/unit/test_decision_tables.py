"""Pure decisions as tables: which places an edit's locator chooses (none / one / occurrence N
/ all / ambiguous), the package gate's version verdict, and what `status` says of a deploy.
Each row is one decision; no host, no subprocess."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from patchkit.host.agent.protocol import LocateReply, ManifestReply
from patchkit.edits import Edit
from patchkit.edits.testing import assert_edit
from patchkit.recipe.model import step_model
from patchkit.run.results import HostResult, RunRecord, StepResult, host_status, nothing_patched
from patchkit.run.steps.context import Gate, version_gate
from patchkit.run.steps.deploy import status_deploy

# ------------------------------------------------------------------ the locator's choice

THREE = "x = 0\ndef f():\n    x = 0\nclass C:\n    x = 0\n"  # one target, three places (three scopes)
ONE = "y = 1\nx = 0\n"


def lines_set(source: str, *changed: int) -> str:
    """`source` with `x = 0` set to `x = 1` on these (1-based) places of it."""
    out, seen = [], 0
    for line in source.splitlines(keepends=True):
        if line.strip() == "x = 0":
            seen += 1
            if seen in changed:
                line = line.replace("x = 0", "x = 1")
        out.append(line)
    return "".join(out)


LOCATOR_TABLE: list[tuple[str, str, dict[str, Any], str, str | None, str]] = [
    # (row, source, how the places are chosen, verdict, places changed: result, words in the message)
    ("no place", "y = 0\n", {}, "not_found", None, "no assignment to x"),
    ("one place", ONE, {}, "changed", lines_set(ONE, 1), "set x = 1 (was 0)"),
    ("one place, in place", "x = 1\n", {}, "already", "x = 1\n", "already in place"),
    ("several: ambiguous", THREE, {}, "not_found", None, "is ambiguous: it matches 3 places"),
    ("several, within picks one", THREE, {"within": "f"}, "changed", lines_set(THREE, 2), "set x = 1"),
    ("occurrence 2 of 3", THREE, {"occurrence": 2}, "changed", lines_set(THREE, 2), "(occurrence 2 of 3)"),
    ("occurrence 1 of 1", ONE, {"occurrence": 1}, "changed", lines_set(ONE, 1), "(occurrence 1 of 1)"),
    ("occurrence past the last", THREE, {"occurrence": 4}, "not_found", None,
     "occurrence 4 asked, but the assignment to x matches 3 places"),
    ("occurrence, in place", lines_set(THREE, 3), {"occurrence": 3}, "already", lines_set(THREE, 3),
     "already in place"),
    ("all of 3", THREE, {"all": True}, "changed", lines_set(THREE, 1, 2, 3), "(3 of 3 places changed (all: true))"),
    ("all, one already", lines_set(THREE, 2), {"all": True}, "changed", lines_set(THREE, 1, 2, 3),
     "(2 of 3 places changed (all: true), 1 already in place)"),
    ("all of 1", ONE, {"all": True}, "changed", lines_set(ONE, 1), "set x = 1 (was 0)"),
    ("all, none", "y = 0\n", {"all": True}, "not_found", None, "no assignment to x"),
]


@pytest.mark.parametrize("source, choose, verdict, after, words", [row[1:] for row in LOCATOR_TABLE],
                         ids=[row[0] for row in LOCATOR_TABLE])
def test_the_locator_chooses(source: str, choose: dict[str, Any], verdict: str, after: str | None,
                             words: str) -> None:
    params = {"names": ["x"], "value": 1, **choose}
    if verdict == "not_found":
        result = Edit.model_validate({"set_value": params}).apply(source)
        assert (result.verdict, result.source) == ("not_found", source), result.message
    else:
        assert after is not None
        result = assert_edit("set_value", source, after, **params)
        assert result.verdict == verdict
    assert words in result.message, result.message


def test_all_and_occurrence_do_not_mix() -> None:
    with pytest.raises(ValueError, match="give `occurrence` or `all`, not both"):
        Edit.model_validate({"set_value": {"names": ["x"], "value": 1, "all": True, "occurrence": 1}})


# ------------------------------------------------------------------ the gate's version verdict

def located(version: str | None = "0.16.0", found: bool = True) -> LocateReply:
    return {"found": True, "root": "/site/vllm", "version": version} if found else {"found": False}


GATE_TABLE: list[tuple[str, LocateReply, str | None, Gate]] = [
    # (row, what locate found, the recipe's versions, the verdict)
    ("no package", located(found=False), ">=0.10", Gate(None, fail="package vllm is not importable by /py "
                                                                    "(set python in the inventory or -e python=PATH)")),
    ("no versions asked", located("0.16.0"), None, Gate("0.16.0")),
    ("no versions asked, none read", located(None), None, Gate(None)),
    ("inside", located("0.16.0"), ">=0.10.1,<0.22", Gate("0.16.0")),
    ("at the lower bound", located("0.10.1"), ">=0.10.1,<0.22", Gate("0.10.1")),
    ("at the upper bound", located("0.22"), ">=0.10.1,<0.22", Gate("0.22", skip="vllm 0.22 is outside >=0.10.1,<0.22")),
    ("above", located("0.32.0"), ">=0.10.1,<0.22", Gate("0.32.0", skip="vllm 0.32.0 is outside >=0.10.1,<0.22")),
    ("a pre-release inside", located("0.16.0rc1"), ">=0.10.1,<0.22", Gate("0.16.0rc1")),
    ("a local build", located("0.16.0+cpu"), "==0.16.0", Gate("0.16.0+cpu")),
    ("version unreadable", located(None), ">=0.10", Gate(None, fail="cannot read the version of vllm at /site/vllm")),
    ("version unparsable", located("dev-build"), ">=0.10",
     Gate("dev-build", fail="vllm reports an unparsable version 'dev-build'")),
]


@pytest.mark.parametrize("found, versions, verdict", [row[1:] for row in GATE_TABLE], ids=[row[0] for row in GATE_TABLE])
def test_the_gate_decides(found: LocateReply, versions: str | None, verdict: Gate) -> None:
    assert version_gate("vllm", found, versions, "/py") == verdict


def _gated(version: str, versions: str = ">=0.17") -> StepResult:
    """A patch step's result as the gate makes it for `version`."""
    verdict = version_gate("vllm", located(version), versions, "/py")
    return StepResult(name="fix", kind="patch", status="skipped" if verdict.skip else "changed",
                      message=verdict.skip or "")


NOTHING_PATCHED_TABLE: list[tuple[str, list[list[StepResult]], list[str]]] = [
    # (row, each host's steps, the run's warnings)
    ("every host outside", [[_gated("0.16.0")], [_gated("0.15.1")]],
     ["no host is in fix's versions vllm >=0.17 (0.15.1, 0.16.0 found): nothing was patched by it"]),
    ("one host inside", [[_gated("0.16.0")], [_gated("0.17.0")]], []),
    ("skipped for another reason", [[StepResult(name="fix", kind="patch", status="skipped", message="not asked")]], []),
    ("a host without the step", [[_gated("0.16.0")], []],
     ["no host is in fix's versions vllm >=0.17 (0.16.0 found): nothing was patched by it"]),
    ("not a patch", [[StepResult(name="fix", kind="exec", status="skipped", message="vllm 0.1 is outside >=1")]], []),
]


@pytest.mark.parametrize("steps, warnings", [row[1:] for row in NOTHING_PATCHED_TABLE],
                         ids=[row[0] for row in NOTHING_PATCHED_TABLE])
def test_a_patch_no_host_is_in_the_versions_of_is_warned(steps: list[list[StepResult]], warnings: list[str]) -> None:
    hosts = {f"h{i}": HostResult(status=host_status(s), steps=s) for i, s in enumerate(steps)}
    assert nothing_patched(hosts) == warnings


# ------------------------------------------------------------------ status of a deploy

DEST = "/models/d"
OLD, NEW, OTHER = "1" * 64, "2" * 64, "3" * 64
STEP = step_model().model_validate({"name": "ship", "deploy": {"src": "./d", "dest": DEST}})


def manifest(**files: str) -> ManifestReply:
    return {"exists": bool(files), "is_dir": True, "dest": DEST, "parts": {},
            "files": {rel: {"size": 1, "sha256": sha, "mode": 0o644} for rel, sha in files.items()}}


def deploy_run(run_id: str, in_progress: bool = False, rolled_back: bool = False, **files: str) -> RunRecord:
    details: dict[str, Any] = {"files": [{"rel": rel, "path": f"{DEST}/{rel}", "sha256_after": sha}
                                         for rel, sha in files.items()]}
    if in_progress:
        details["in_progress"] = True
    step = StepResult(name="ship", kind="deploy", status="changed", file=DEST, details=details,
                      backup=f"/state/backups/{run_id}/ship")
    return RunRecord(run_id=run_id, kind="apply", recipe="r", recipe_sha256="0" * 64, host="h",
                     patchkit_version="0", started=0.0, steps=[step],
                     rolled_back_steps=["ship"] if rolled_back else [])


def plan(status: str, message: str = "1 file to send") -> StepResult:
    return StepResult(name="ship", kind="deploy", status=status, file=DEST, message=message)


DEPLOY_TABLE: list[tuple[str, StepResult, ManifestReply | None, list[RunRecord], str, str]] = [
    # (row, the plan, the host's manifest, journal records, status, words in the message)
    ("plan failed", plan("failed", "source is not valid"), None, [], "failed", "source is not valid"),
    ("never deployed, files to send", plan("changed"), manifest(), [], "pending", "1 file to send"),
    ("deployed by us, unchanged", plan("ok", "in place"), manifest(a=NEW), [deploy_run("r1", a=NEW)], "applied",
     "deployed by patchkit; in place"),
    ("in place, not by us", plan("ok", "in place"), manifest(a=NEW), [], "applied",
     "not deployed by patchkit: nothing to roll back"),
    ("changed on the host since", plan("changed"), manifest(a=OTHER), [deploy_run("r1", a=NEW)], "drifted",
     f"1 file(s) changed on the host since patchkit deployed them: {DEST}/a"),
    ("removed on the host since", plan("changed"), manifest(), [deploy_run("r1", a=NEW)], "drifted",
     "1 file(s) changed on the host"),
    ("new source, host untouched", plan("changed"), manifest(a=NEW), [deploy_run("r1", a=NEW), ], "pending",
     "the source changed since the last deploy"),
    ("newest deploy wins", plan("ok", "in place"), manifest(a=NEW),
     [deploy_run("r1", a=OLD), deploy_run("r2", a=NEW)], "applied", "deployed by patchkit"),
    ("rolled back", plan("changed"), manifest(a=OLD), [deploy_run("r1", rolled_back=True, a=NEW)], "pending",
     "1 file to send"),
    ("cut off while deploying", plan("ok", "in place"), manifest(a=NEW), [deploy_run("r1", in_progress=True, a=NEW)],
     "pending", "run r1 was cut off while deploying"),
]


@pytest.mark.parametrize("planned, remote, records, status, words", [row[1:] for row in DEPLOY_TABLE],
                         ids=[row[0] for row in DEPLOY_TABLE])
def test_status_of_a_deploy(planned: StepResult, remote: ManifestReply | None, records: list[RunRecord],
                            status: str, words: str) -> None:
    out = asyncio.run(status_deploy(STEP, (planned, [], remote), records))
    assert out.status == status, out
    assert words in out.message, out.message
