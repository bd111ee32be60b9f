"""The check step: a Python assertion run by the target interpreter."""

from __future__ import annotations

from typing import Any, Callable

from pydantic import Field

from patchkit.host.agent.protocol import CHECK, LOCATE, Request
from patchkit.base.errors import HostError
from patchkit.recipe.model import PackageGate, Step
from patchkit.run.results import Check, RunRecord, StepResult
from patchkit.run.steps.context import HostContext, gate, locate_args
from patchkit.run.steps.kind import Planned, StepKind
from patchkit.run.steps.staleness import FileEdit


class CheckStep(PackageGate):
    python: str = Field(description=("Python source run by the target interpreter; it passes when it exits 0. "
                                      "The recipe's variables are a JSON object in the environment variable "
                                      "PATCHKIT_VARS"))
    message: str | None = Field(None, description="what a failure means, shown with the reason")
    timeout_s: float = Field(300, gt=0)


class CheckKind(StepKind[CheckStep, bool]):
    """A check changes nothing: its plan is its gate, its apply runs it, it has no state to undo."""

    name = "check"
    spec_model = CheckStep
    undo_last = False
    not_tested = "not testable offline (it runs code with the target interpreter; patchkit plan runs it on a host)"

    def facts(self, step: Step, spec: CheckStep, shown: Callable[[Any], Any], dry_run: bool) -> list[tuple[str, str]]:
        return [("check (runs on apply; a plan does not run it)" if dry_run else "check", str(shown(spec.python)))]

    def file_edits(self, done: StepResult, undone: StepResult | None) -> list[FileEdit]:
        return []

    def measured(self, done: StepResult) -> list[tuple[str, str]]:
        return []  # its checks are shown for every kind

    def first_reads(self, spec: CheckStep) -> list[Request[Any]]:
        return [LOCATE(locate_args(spec.package, []))] if spec.package else []  # the gate's

    async def plan(self, ctx: HostContext, step: Step, spec: CheckStep) -> Planned[bool]:
        """data: True when the gate lets the check run (apply runs it; a plan never does)."""
        result = StepResult(name=step.name, kind=self.name, status="failed")
        verdict, _ = await gate(ctx, spec.package, spec.versions)
        result.package_version = verdict.version
        if verdict.fail or verdict.skip:
            result.status = "failed" if verdict.fail else "skipped"
            result.message = verdict.fail or verdict.skip or ""
            return Planned(result, False)
        result.status, result.message = "skipped", "checks run on apply, not in plan"
        return Planned(result, True)

    async def apply(self, ctx: HostContext, step: Step, spec: CheckStep, planned: Planned[bool]) -> StepResult:
        if ctx.dry_run or not planned.data:
            return planned.result
        result = planned.result.model_copy(update={"status": "failed", "message": ""})
        try:
            outcome = await ctx.agent.call(CHECK({"code": spec.python, "timeout_s": spec.timeout_s,
                                                  "variables": ctx.loaded.variables, "package": spec.package}),
                                           reply_wait=spec.timeout_s + 60)
        except HostError as exc:
            result.message = str(exc)
            return result
        ok = outcome["returncode"] == 0
        result.checks = [Check(name="python", ok=ok, detail=outcome["stderr"] or outcome["stdout"])]
        if ok:
            result.status = "ok"
            result.message = "passed" + (f": {outcome['stdout'].splitlines()[-1]}" if outcome["stdout"] else "")
            return result
        if outcome["timed_out"]:
            reason = f"timed out after {spec.timeout_s}s"
        else:
            lines = outcome["stderr"].splitlines()
            reason = lines[-1] if lines else f"exit status {outcome['returncode']}"
        result.message = f"{spec.message}: {reason}" if spec.message else reason
        return result

    async def state(self, ctx: HostContext, step: Step, spec: CheckStep, planned: Planned[bool],
                    records: list[RunRecord]) -> StepResult:
        return StepResult(name=step.name, kind=self.name, status="not-applicable",
                          message="a check has no state; apply runs it")

    async def undo(self, ctx: HostContext, done: StepResult, target: RunRecord) -> StepResult:
        return StepResult(name=done.name, kind=self.name, status="ok", message="a check changes nothing")

    def changed(self, done: StepResult) -> bool:
        return False
