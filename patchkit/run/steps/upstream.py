"""A step's `upstream:` fix, once the installed release is past the step's version range."""

from __future__ import annotations

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from patchkit.recipe.model import PackageGate, Step
from patchkit.run.results import StepResult

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
