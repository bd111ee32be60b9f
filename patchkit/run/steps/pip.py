"""The pip step: a pinned version of a distribution in the target environment.

`python -m pip install NAME==VERSION`, run by the target interpreter with the index options
the recipe gives and nothing else; journaled with the version it replaced, and rolled back to
that version (or uninstalled when there was none). Its host ops live in host/remote/pip.py.
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Callable, NotRequired, TypedDict

from packaging.version import InvalidVersion, Version
from pydantic import Field, field_validator

from patchkit.base.errors import HostError
from patchkit.host.agent.files import HOST
from patchkit.host.agent.protocol import Op, PythonRun
from patchkit.recipe.model import KindSpec, Step
from patchkit.run.results import RunRecord, StepResult
from patchkit.run.steps.context import HostContext
from patchkit.run.steps.kind import Planned, StepKind
from patchkit.run.steps.staleness import FileEdit

_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")  # a distribution name (PEP 508)


class PipStep(KindSpec):
    """Ensure a pinned version of a distribution: `python -m pip install NAME==VERSION` by the
    target interpreter; rollback puts back the version it replaced (or uninstalls)."""

    package: str = Field(description="distribution name, e.g. transformers")
    version: str = Field(description="the exact version to have installed, e.g. 4.57.1")
    index_url: str | None = Field(None, description="pip --index-url")
    find_links: list[str] = Field(default_factory=list, description="pip --find-links, each (a folder on the host or a URL)")
    no_index: bool = Field(False, description="pip --no-index: only the find_links")
    timeout_s: float = Field(900, gt=0, description="for pip, and again for reading the installed version")

    @field_validator("package")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(f"{value!r} is not a distribution name")
        return value

    @field_validator("version")
    @classmethod
    def _exact(cls, value: str) -> str:
        try:
            Version(value)
        except InvalidVersion:
            raise ValueError(f"{value!r} is not a version like 4.57.1 (a pip step pins one exact version)") from None
        return value

    def options(self) -> list[str]:
        """pip's options for these fields, each value in its option's word: a value that looks
        like an option is still only that option's value."""
        index = [f"--index-url={self.index_url}"] if self.index_url else []
        return index + [f"--find-links={link}" for link in self.find_links] + (["--no-index"] if self.no_index else [])

    def command(self, python: str) -> str:
        return shlex.join([python, "-m", "pip", "install", f"{self.package}=={self.version}", *self.options()])


class PipVersionArgs(TypedDict):
    name: str
    timeout_s: float


class PipVersionReply(TypedDict):
    version: str | None  # None: not installed
    python: str


class PipInstallArgs(TypedDict):
    name: str
    version: str | None  # None: uninstall
    options: list[str]
    timeout_s: float


class PipInstallReply(TypedDict):
    run: PythonRun
    version: str | None  # installed afterwards
    error: NotRequired[str]


PIP_VERSION: Op[PipVersionArgs, PipVersionReply] = Op("pip_version")
PIP_INSTALL: Op[PipInstallArgs, PipInstallReply] = Op("pip_install")


def same(found: str | None, wanted: str | None) -> bool:
    if found is None or wanted is None:
        return found is wanted
    try:
        return Version(found) == Version(wanted)
    except InvalidVersion:
        return found == wanted


def _shown(version: str | None) -> str:
    return version if version is not None else "not installed"


def _reason(run: PythonRun) -> str:
    """pip's own word on a failure: its last ERROR line, else its last line."""
    lines = [line.strip() for line in (run["stderr"] + "\n" + run["stdout"]).splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR:")]
    if run["timed_out"]:
        return f"timed out after {run['seconds']} s"
    return (errors or lines or [f"exit status {run['returncode']}"])[-1]


class PipKind(StepKind[PipStep, "str | None"]):
    """data: the version installed when planned (None: none)."""

    name = "pip"
    spec_model = PipStep
    undo_last = False
    not_tested = "skipped (a pip step installs on a host: nothing of a release to test)"
    host_files = ((HOST, "pip.py"),)

    def facts(self, step: Step, spec: PipStep, shown: Callable[[Any], Any], dry_run: bool) -> list[tuple[str, str]]:
        return [("installs", str(shown(spec.command("python"))))]

    def measured(self, done: StepResult) -> list[tuple[str, str]]:
        details = done.details or {}
        before, after = details.get("version_before"), details.get("version_after")
        return [("version", f"{_shown(before)} -> {_shown(after)}")] if before != after else []

    def file_edits(self, done: StepResult, undone: StepResult | None) -> list[FileEdit]:
        """The distribution's files, as one: a server that imported the version before is stale."""
        details = done.details or {}
        return [FileEdit(f"the installed {details.get('package')}", details.get("version_before"),
                         details.get("version_after"))]

    async def _installed(self, ctx: HostContext, package: str, timeout_s: float) -> PipVersionReply:
        return await ctx.agent.call(PIP_VERSION({"name": package, "timeout_s": timeout_s}), reply_wait=timeout_s + 60)

    async def plan(self, ctx: HostContext, step: Step, spec: PipStep) -> Planned[str | None]:
        result = StepResult(name=step.name, kind=self.name, status="failed")
        try:
            found = await self._installed(ctx, spec.package, spec.timeout_s)
        except HostError as exc:
            result.message = str(exc)
            return Planned(result, None)
        now = found["version"]
        command = ctx.loaded.redactor.text(spec.command(found["python"]))
        result.package_version = now
        result.details = {"package": spec.package, "version_before": now, "version_after": spec.version,
                          "command": command}
        if same(now, spec.version):
            result.status, result.message = "ok", f"{spec.package} {now} is installed"
        else:
            result.status = "changed"
            result.message = f"{spec.package} {_shown(now)} -> {spec.version}: {command}"
        return Planned(result, now)

    async def apply(self, ctx: HostContext, step: Step, spec: PipStep, planned: Planned[str | None]) -> StepResult:
        if ctx.dry_run or planned.result.status != "changed":
            return planned.result
        result = planned.result.model_copy(deep=True)
        await ctx.record_intent(result.model_copy(update={"verified": False}))
        before = planned.data
        try:
            reply = await ctx.agent.call(PIP_INSTALL({"name": spec.package, "version": spec.version,
                                                      "options": spec.options(), "timeout_s": spec.timeout_s}),
                                         reply_wait=2 * spec.timeout_s + 60)
        except HostError as exc:
            result.status, result.message = "failed", str(exc)
            return result
        after = reply["version"]
        assert result.details is not None
        result.details["version_after"] = after
        result.package_version = after
        if reply["run"]["returncode"] != 0 or not same(after, spec.version):
            left = "" if same(after, before) else f" ({spec.package} is now {_shown(after)})"
            result.status = "failed"
            result.message = ctx.loaded.redactor.text(
                f"pip install {spec.package}=={spec.version} failed: {_reason(reply['run'])}{left}")
            return result
        result.status, result.verified = "changed", True
        result.message = f"installed {spec.package} {after} (was {_shown(before)})"
        return result

    async def state(self, ctx: HostContext, step: Step, spec: PipStep, planned: Planned[str | None],
                    records: list[RunRecord]) -> StepResult:
        result = planned.result.model_copy()
        if result.status == "failed":
            return result
        now = planned.data
        ours = [s for r in sorted(records, key=lambda r: r.run_id) if r.kind == "apply"
                and r.recipe == ctx.loaded.recipe.name for s in r.live_steps() if s.name == step.name and s.kind == self.name]
        installed = (ours[-1].details or {}).get("version_after") if ours else None
        if same(now, spec.version):
            result.status, result.message = "applied", f"{spec.package} {now} is installed"
        elif ours:
            result.status = "drifted"
            result.message = f"{spec.package} is {_shown(now)}, not the {installed} patchkit installed"
        else:
            result.status = "pending"
            result.message = f"{spec.package} is {_shown(now)}; apply installs {spec.version}"
        return result

    async def undo(self, ctx: HostContext, done: StepResult, target: RunRecord) -> StepResult:
        details = done.details or {}
        package, before, after = str(details.get("package")), details.get("version_before"), details.get("version_after")
        out = StepResult(name=done.name, kind=self.name, status="failed", details=dict(details))
        now_step = self.step_now(ctx, done)
        spec = PipStep.of(now_step) if now_step else None
        timeout_s = spec.timeout_s if spec else PipStep.model_fields["timeout_s"].default
        try:
            now = (await self._installed(ctx, package, timeout_s))["version"]
            if same(now, before):
                out.status, out.message = "ok", f"{package} is {_shown(before)} already"
                return out
            if not same(now, after) and not ctx.force:
                out.message = (f"drifted: {package} is {_shown(now)}, not the {after} run {target.run_id} installed; "
                               "not rolled back (--force rolls back anyway)")
                return out
            reply = await ctx.agent.call(PIP_INSTALL({"name": package, "version": before,
                                                      "options": spec.options() if spec else [],
                                                      "timeout_s": timeout_s}), reply_wait=2 * timeout_s + 60)
        except HostError as exc:
            out.message = str(exc)
            return out
        out.details = {"package": package, "version_before": now, "version_after": reply["version"]}
        if not same(reply["version"], before):
            out.message = ctx.loaded.redactor.text(
                f"could not put back {package} {_shown(before)}: {_reason(reply['run'])} "
                f"({package} is {_shown(reply['version'])})")
            return out
        out.status = "changed"
        out.message = f"put back {package} {before}" if before is not None else f"uninstalled {package}"
        return out

    def changed(self, done: StepResult) -> bool:
        return done.status == "changed"
