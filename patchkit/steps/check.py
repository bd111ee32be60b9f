"""The check step: a Python assertion run by the target interpreter."""

from __future__ import annotations

from patchkit.errors import HostError
from patchkit.recipe import Step
from patchkit.results import Check, StepResult
from patchkit.steps.context import HostContext, gate


async def run_check(ctx: HostContext, step: Step) -> StepResult:
    spec = step.check
    assert spec is not None
    result = StepResult(name=step.name, kind="check", status="failed")
    verdict, _ = await gate(ctx, spec.package, spec.versions)
    result.package_version = verdict.version
    if verdict.fail or verdict.skip:
        result.status = "failed" if verdict.fail else "skipped"
        result.message = verdict.fail or verdict.skip or ""
        return result
    if ctx.dry_run:
        result.status, result.message = "skipped", "checks run on apply, not in plan"
        return result
    try:
        outcome = await ctx.agent.call("check", code=spec.python, timeout_s=spec.timeout_s, timeout=spec.timeout_s + 60)
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
