"""When upstream has a step's change: the installed release is past the step's version range,
or the release itself ships the edit (in place, in files exactly as its RECORD lists them)."""

from __future__ import annotations

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from patchkit.base.errors import HostError
from patchkit.recipe.model import PackageGate, Step
from patchkit.run.journal import live_change
from patchkit.run.results import StepResult
from patchkit.run.steps.context import HostContext

_UPPER = ("<", "<=", "==", "===", "~=")


def past_range(version: str, versions: str) -> bool:
    """Is `version` above the range (not merely outside it): it fails an upper bound."""
    try:
        installed = Version(version)
    except InvalidVersion:
        return False
    for spec in SpecifierSet(versions):
        if spec.operator not in _UPPER or spec.contains(installed, prereleases=True):
            continue
        try:
            bound = Version(spec.version.rstrip(".*"))
        except InvalidVersion:
            continue
        if installed >= bound:
            return True
    return False


def with_upstream_note(result: StepResult, step: Step, spec: PackageGate) -> StepResult:
    """status of a step with `upstream:` on a release past its range: the fix is upstream, the step can go."""
    if (result.status != "not-applicable" or not step.upstream or not spec.versions
            or not result.package_version or not past_range(result.package_version, spec.versions)):
        return result
    result.message = (f"{result.message}; the fix is upstream ({step.upstream}): {spec.package} "
                      f"{result.package_version} is past {spec.versions}, this step can go")
    return result


def released_with_it(package: str, version: str) -> str:
    return f"{package} {version} already has this change: the step is not needed here"


async def with_release_note(ctx: HostContext, package: str, result: StepResult, paths: list[str]) -> StepResult:
    """plan/apply of a step already in place: when its files are byte for byte what the installed
    distribution's RECORD lists (so no one patched them, patchkit included), the release ships
    the change. One agent call, made only for a step in place, and on apply only when the
    journal (read already) has no change of the step's in place: a re-apply costs no round
    trip more. A host without RECORD says nothing."""
    if result.status != "ok" or not result.package_version or not paths:
        return result
    if not ctx.dry_run and live_change(await ctx.records(), result.name, result.file) is not None:
        return result  # patchkit's own change
    from patchkit.run.installed import installed

    try:
        dist = await installed(ctx.agent, package, only=paths)
    except HostError:
        return result  # not installed from a wheel: nothing vouches for the files
    if dist.listed >= len(paths) and not dist.changed:
        result.message += "; " + released_with_it(package, result.package_version)
    return result
