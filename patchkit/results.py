"""Data that crosses a boundary: step/host/run results (JSON output) and journal records."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

StepStatus = Literal["changed", "ok", "skipped", "failed"]
StateStatus = Literal["applied", "pending", "drifted", "not-applicable", "failed"]


class Check(BaseModel):
    name: str
    ok: bool
    detail: str = ""


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


class HostResult(BaseModel):
    status: StepStatus | Literal["drifted", "pending", "applied"]
    message: str = ""
    steps: list[StepResult] = Field(default_factory=list)
    exec_requests: int = 0
    warnings: list[str] = Field(default_factory=list)  # e.g. a login shell's banner, skipped (agent/client.py)
    notices: list[str] = Field(default_factory=list)  # what the user should know, e.g. changes a container loses


class RunReport(BaseModel):
    recipe: str
    run_id: str
    dry_run: bool
    command: str
    hosts: dict[str, HostResult]


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
        """Steps that changed something we can undo (a patched file, deployed files, a server)."""
        return [s for s in self.steps
                if s.status in ("changed", "failed") and s.kind == "launch" and (s.details or {}).get("servers")
                or s.status == "changed" and s.file and s.backup]

    def live_steps(self) -> list[StepResult]:
        """Changed steps whose change has not been rolled back."""
        return [s for s in self.changed_steps() if s.name not in self.rolled_back_steps]


def host_status(steps: list[StepResult]) -> StepStatus:
    statuses = {s.status for s in steps}
    if "failed" in statuses:
        return "failed"
    if "changed" in statuses:
        return "changed"
    if statuses and statuses <= {"skipped"}:
        return "skipped"
    return "ok"
