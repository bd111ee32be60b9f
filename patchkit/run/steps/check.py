"""The check step: a Python assertion run by the target interpreter."""

from __future__ import annotations

from typing import Any, Callable

from pydantic import Field, model_validator

from patchkit.host.agent.protocol import CHECK, LOCATE, Request
from patchkit.base.errors import HostError
from patchkit.recipe.model import PackageGate, Step
from patchkit.run.results import Check, RunRecord, StepResult
from patchkit.run.steps.context import HostContext, gate, locate_args
from patchkit.run.steps.kind import Planned, StepKind
from patchkit.run.steps.release_reads import ReleaseReads, is_plain_relative, with_version_files
from patchkit.run.steps.staleness import FileEdit


class CheckStep(PackageGate):
    python: str = Field(description=("Python source run by the target interpreter; it passes when it exits 0. "
                                      "The recipe's variables are a JSON object in the environment variable "
                                      "PATCHKIT_VARS"))
    message: str | None = Field(None, description="what a failure means, shown with the reason")
    timeout_s: float = Field(300, gt=0)
    reads: list[str] = Field(default_factory=list, description=(
        "the package's files the program reads, relative to the folder holding the package (a `*` "
        "stays within one folder, e.g. sglang/srt/models/*.py), for a program that reads source and "
        "imports none of the package: `patchkit test` then runs it on each release's files"))

    @model_validator(mode="after")
    def _reads_in_package(self) -> "CheckStep":
        for rel in self.reads:
            if not self.package:
                raise ValueError("`reads` names files of `package`: give the package")
            if not is_plain_relative(rel) or rel.split("/")[0] != self.package:
                raise ValueError(f"reads: {rel!r} is not a path inside package {self.package!r} "
                                 f"(like {self.package}/sub/*.py)")
        return self


class CheckKind(StepKind[CheckStep, bool]):
    """A check changes nothing: its plan is its gate, its apply runs it, it has no state to undo."""

    name = "check"
    spec_model = CheckStep
    undo_last = False
    not_tested = "not testable offline (it runs code with the target interpreter; patchkit plan runs it on a host)"

    def release_reads(self, spec: CheckStep) -> ReleaseReads | None:
        if not spec.reads or not spec.package:
            return None
        return ReleaseReads(spec.package, spec.versions, with_version_files(spec.package, set(spec.reads)),
                            refused="cannot pass the check", ok=None)

    async def plan_on_release(self, ctx: HostContext, step: Step, spec: CheckStep) -> Planned[bool]:
        """A check's verdict is its run: it reads the release's files and writes nothing."""
        planned = await self.plan(ctx, step, spec)
        if not planned.data:
            return planned
        dry_run, ctx.dry_run = ctx.dry_run, False
        try:
            return Planned(await self.apply(ctx, step, spec, planned), True)
        finally:
            ctx.dry_run = dry_run

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
