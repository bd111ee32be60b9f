"""Data that crosses a boundary: step/host/run results (JSON output) and journal records."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

StepStatus = Literal["changed", "ok", "skipped", "failed"]
StateStatus = Literal["applied", "pending", "drifted", "stale", "not-applicable", "failed"]


class Check(BaseModel):
    name: str
    ok: bool
    detail: str = ""


class FileChange(BaseModel):
    """One file of a step that changes several (a multi-file `diff` edit): what `file`,
    `sha256_before/after`, `backup` and `diff` are for a single-file step."""

    file: str
    sha256_before: str | None = None
    sha256_after: str | None = None
    backup: str | None = None
    diff: str | None = None
    message: str = ""
    # A file the diff adds: the folders patchkit made for it, deepest first (rollback removes
    # them again when they are empty). None: a file the diff changes, or a record from before it.
    created_dirs: list[str] | None = None


class StepResult(BaseModel):
    name: str
    kind: str
    status: StepStatus | StateStatus
    message: str = ""
    diff: str | None = None
    file: str | None = None
    sha256_before: str | None = None
    sha256_after: str | None = None
    package_version: str | None = None
    backup: str | None = None
    checks: list[Check] = Field(default_factory=list)
    restored: bool | None = None  # after a failed verification: is the original back?
    # False in the intent record written before a change; True once its checks passed and were
    # recorded. A run cut off in between leaves False: "pending verification", never "applied".
    # None: a record from before this field (its run finished, so it was verified).
    verified: bool | None = None
    details: dict[str, Any] | None = None  # kind-specific: files a deploy wrote, bytes sent...
    files: list[FileChange] | None = None  # a patch step changing several files (then `file` is None)
    # The folder the step's files were confined to when it changed them (a patch: its package's),
    # the one rollback and a later verification hold them to. None: not a patch, or a record
    # from before it was journaled (the agent then derives it: refuse_leaving_root).
    root: str | None = None
    upstream: str | None = None  # the step's `upstream:` and `why:`, journaled with the change
    why: str | None = None


class HostResult(BaseModel):
    status: StepStatus | Literal["drifted", "pending", "applied", "stale"]
    message: str = ""
    steps: list[StepResult] = Field(default_factory=list)
    exec_requests: int = 0
    warnings: list[str] = Field(default_factory=list)  # e.g. a login shell's banner, skipped (host/agent/client.py)
    notices: list[str] = Field(default_factory=list)  # what the user should know, e.g. changes a container loses
    batch: str | None = None  # "2/3": the rollout batch the host ran in (--serial)
    transport: str | None = None  # local | ssh | openssh | podman | docker | k8s ...: how it was reached
    address: str | None = None
    seconds: float | None = None  # wall time of this host's work, connection included
    # history: the runs of the host's journal, each as fields (run_id, command, recipe, status,
    # started, finished, steps, ...), oldest first; its JSON leaves out `steps`, which the
    # terminal and pipe views draw a row per run from
    runs: list[dict[str, Any]] | None = None


# 1: before schema_version, totals and timings; 2: history's runs were `steps`; 3: history's runs are `runs`
REPORT_SCHEMA_VERSION = 3


class RunReport(BaseModel):
    schema_version: int = REPORT_SCHEMA_VERSION
    recipe: str
    run_id: str
    dry_run: bool
    command: str
    hosts: dict[str, HostResult]
    totals: dict[str, int] = Field(default_factory=dict)  # hosts by status, and "hosts": how many
    seconds: float | None = None  # wall time of the whole run
    warnings: list[str] = Field(default_factory=list)  # about the run as a whole (nothing_patched)

    def count(self) -> "RunReport":
        """Fill `totals` and `warnings` from the hosts."""
        totals: dict[str, int] = {"hosts": len(self.hosts)}
        for result in self.hosts.values():
            totals[result.status] = totals.get(result.status, 0) + 1
        self.totals = totals
        self.warnings = nothing_patched(self.hosts)
        return self


# A patch step's skip for its `versions:` (run/steps/context.py version_gate): PACKAGE VERSION is outside RANGE
OUTSIDE_VERSIONS = re.compile(r"(?P<package>\S+) (?P<version>\S+) is outside (?P<versions>.+)")


def nothing_patched(hosts: dict[str, HostResult]) -> list[str]:
    """A warning per patch step that every host skipped for its `versions:`: the run succeeds
    (each host is as the recipe asks), yet no host got that fix, which is seldom what was meant."""
    seen: dict[str, list[re.Match[str] | None]] = {}
    for result in hosts.values():
        for step in result.steps:
            if step.kind == "patch":
                seen.setdefault(step.name, []).append(
                    OUTSIDE_VERSIONS.fullmatch(step.message) if step.status == "skipped" else None)
    warnings = []
    for name, skips in seen.items():
        if skips and all(skips):
            first = skips[0]
            assert first is not None
            found = ", ".join(sorted({m["version"] for m in skips if m}))
            warnings.append(f"no host is in {name}'s versions {first['package']} {first['versions']} "
                            f"({found} found): nothing was patched by it")
    return warnings


# kind name -> did a journaled result of that kind change the host? Filled by run/steps/registry.py
# from each kind's `changed` (this module is below the kinds: it cannot import them).
CHANGES_HOST: dict[str, Callable[[StepResult], bool]] = {}


class RunRecord(BaseModel):
    """One run on one host, as kept in that host's journal."""

    run_id: str
    kind: Literal["apply", "rollback"]
    recipe: str
    recipe_sha256: str
    host: str
    user: str = ""
    patchkit_version: str
    started: float
    finished: float | None = None
    status: str = "running"
    steps: list[StepResult] = Field(default_factory=list)
    rollback_of: str | None = None
    rolled_back_by: str | None = None
    rolled_back_steps: list[str] = Field(default_factory=list)
    extra: dict[str, Any] = Field(default_factory=dict)

    def changed_steps(self) -> list[StepResult]:
        """Steps that changed something we can undo (a patched file, deployed files, a server),
        as each step's kind judges it (StepKind.changed); a kind no longer known changed nothing."""
        if not CHANGES_HOST:
            raise RuntimeError("no step kinds registered: import patchkit.run.steps.registry before reading a journal")
        return [s for s in self.steps if s.kind in CHANGES_HOST and CHANGES_HOST[s.kind](s)]

    def live_steps(self) -> list[StepResult]:
        """Changed steps whose change has not been rolled back."""
        return [s for s in self.changed_steps() if s.name not in self.rolled_back_steps]


def host_status(steps: list[StepResult]) -> StepStatus | Literal["stale"]:
    statuses = {s.status for s in steps}
    if "failed" in statuses:
        return "failed"
    if "stale" in statuses:  # a server left running older code (--no-restart): not converged
        return "stale"
    if "changed" in statuses:
        return "changed"
    if statuses and statuses <= {"skipped"}:
        return "skipped"
    return "ok"


# ---------------------------------------------------------------- what a step's details keep
# A deploy's and a launch's journaled details, as models. StepResult.details stays the JSON
# they were read from and are written back as (`as_json`): the keys a record was made or read
# with, nothing added, and keys these models do not know kept (extra="allow"), so journals
# written before them (or by a newer patchkit) round-trip unchanged.

class DeployedFile(BaseModel):
    """One file a deploy step wrote (`details.files`): what rollback checks and puts back.
    `planned`: named in the intent record before the transfer, by a run that may have died
    before the file landed."""

    model_config = ConfigDict(extra="allow", defer_build=True)  # deploy/launch only: built at first use

    rel: str
    path: str
    sha256_after: str
    sha256_before: str | None = None  # None: there was no file (rollback removes it)
    backup: str | None = None
    mode_before: int | None = None
    resumed_from: int = 0  # bytes of an interrupted transfer's part file kept
    created_dirs: list[str] = Field(default_factory=list)  # deepest first: removed with the file, if empty
    planned: bool = False

    def as_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_unset=True)


def deployed_files(step: StepResult) -> list[DeployedFile]:
    """The files a journaled deploy step wrote (or planned to)."""
    return [DeployedFile.model_validate(f) for f in (step.details or {}).get("files", [])]


class LaunchServer(BaseModel):
    """A server a launch step started, as its record on the host has it (`details.servers`,
    `details.replaced`): argv as shown (secrets redacted), env by name only."""

    model_config = ConfigDict(extra="allow", defer_build=True)  # deploy/launch only: built at first use

    name: str
    pid: int
    proc_start: int | None = None
    argv: list[str]
    env_names: list[str] = Field(default_factory=list)
    env: dict[str, str] | None = None  # only in records from before env values were kept out of them
    cwd: str | None = None
    log: str
    command_hash: str
    salt: str | None = None
    started: float | None = None
    run_id: str | None = None  # the run that started it (staleness.py)

    def as_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_unset=True)


class LaunchDetails(BaseModel):
    """What a launch step that started servers keeps (its StepResult.details)."""

    model_config = ConfigDict(extra="allow", defer_build=True)  # deploy/launch only: built at first use

    servers: list[LaunchServer] = Field(default_factory=list)  # running when the step ended
    replaced: LaunchServer | None = None  # what ran under the step's name before: rollback restarts it
    log: str | None = None
    startup_s: float | None = None
    spec_decode: dict[str, Any] | None = None  # measured: acceptance, tokens/s
    baseline: dict[str, Any] | None = None
    speedup: float | None = None
    kept: str | None = None  # speculative | baseline
    gate_failed: bool | None = None
    stopped_after_failure: bool | None = None
    stop: str | None = None

    def as_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_unset=True)
