"""When upstream made a patch step obsolete: its history over the releases tested.

Each release tested says one of three things of the step's edit (inside the step's range or,
planned without the range, outside it): the release *needs* it (the edit would change it),
*has* it (already in place without patching), or has *no target* for it (the edit finds
nothing to change). A release that could not be tested, or whose edit was refused for
another reason, says nothing and is left out.

From that, oldest release first:
- upstream since R: the first release that has the change after the last one that needs it
  (a change reverted later is not "upstream": a has-run followed by a needs-release is listed
  in `reverted`, and the report counts from after the revert);
- gone since R: the first release of the trailing run of releases with no target, after one
  that had it (a target that comes back later is no "gone": only the trailing run counts);
- the narrower `versions:`: up to the first release that no longer needs the edit (upstream
  since, else gone since), from the step's own lower bound, unless the releases tested prove
  it wrong (it admits a release tested before the first that needs the edit, or not that
  one; no bound admits every release): then from the first that needs it.
  Suggested when it admits other tested releases than the step's own range does.

Bounds are releases tested: with a sparse `--versions`, "since 0.18.0" means "between the
last release tested that needs it, named beside it, and 0.18.0".

Pure: cells in, a History out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

State = Literal["needs", "has", "absent"]
NEEDS: State = "needs"
HAS: State = "has"
ABSENT: State = "absent"


@dataclass
class Release:
    version: str
    state: State | None  # None: nothing learned (not tested, or refused for another reason)


@dataclass
class Revert:
    """The change in place on some releases, then needed again."""

    releases: list[str]  # the run that had it
    needed_again: str  # the first release after them that needs the edit again

    def text(self) -> str:
        where = self.releases[0] if len(self.releases) == 1 else f"{self.releases[0]}..{self.releases[-1]}"
        return f"in place in {where}, needed again in {self.needed_again}"


@dataclass
class History:
    first_needed: str | None = None  # the oldest release that needs the edit
    last_needed: str | None = None  # the newest
    upstream_since: str | None = None
    gone_since: str | None = None
    last_present: str | None = None  # the newest release with the target before gone_since
    reverted: list[Revert] = field(default_factory=list)
    suggested_versions: str | None = None  # None: the step's range is right for the releases tested
    versions: str | None = None  # the step's own range
    known: int = 0  # releases that said something

    @property
    def summary(self) -> str:
        """`upstream since 0.18.0, gone since 0.22.0`; empty when neither happened."""
        parts = []
        if self.upstream_since:
            parts.append(f"upstream since {self.upstream_since}")
        if self.gone_since:
            parts.append(f"gone since {self.gone_since}")
        return ", ".join(parts)

    def text(self) -> str:
        """The summary with the releases that bound it, the reverts, and the suggested range."""
        if not self.known or (not self.summary and not self.reverted and not self.suggested_versions
                               and self.last_needed):
            return ""
        head = self.summary or ("needed on the newest release tested" if self.last_needed else
                                "never needed on the releases tested")
        bounds = []
        if self.upstream_since and self.last_needed:
            bounds.append(f"{self.last_needed} needs the edit")
        if self.gone_since and self.last_present:
            bounds.append(f"{self.last_present} still has its target")
        if bounds:
            head += f" (the releases tested before: {', '.join(bounds)})"
        if self.reverted:
            head += "; reverted upstream: " + ", ".join(r.text() for r in self.reverted)
        if self.suggested_versions:
            head += f"; suggested versions: \"{self.suggested_versions}\" (the step has {self.versions or 'none'})"
        return head

    def as_json(self) -> dict[str, Any]:
        return {"summary": self.summary, "upstream_since": self.upstream_since, "gone_since": self.gone_since,
                "first_needed": self.first_needed, "last_needed": self.last_needed,
                "last_present": self.last_present,
                "reverted": [{"releases": r.releases, "needed_again": r.needed_again} for r in self.reverted],
                "suggested_versions": self.suggested_versions, "text": self.text()}


def history(releases: list[Release], versions: str | None) -> History:
    """The step's history over `releases` (oldest first), against its range `versions`."""
    known = [r for r in releases if r.state is not None]
    out = History(versions=versions, known=len(known))
    needed = [i for i, r in enumerate(known) if r.state == NEEDS]
    if needed:
        out.first_needed, out.last_needed = known[needed[0]].version, known[needed[-1]].version
    after = needed[-1] + 1 if needed else 0
    out.upstream_since = next((r.version for r in known[after:] if r.state == HAS), None)
    trailing = len(known)
    while trailing > 0 and known[trailing - 1].state == ABSENT:
        trailing -= 1
    if 0 < trailing < len(known):  # a run of releases with no target, after one that had it
        out.gone_since, out.last_present = known[trailing].version, known[trailing - 1].version
    run: list[str] = []
    for r in known:
        if r.state == HAS:
            run.append(r.version)
        elif r.state == NEEDS and run:
            out.reverted.append(Revert(run, r.version))
            run = []
        elif r.state == NEEDS:
            run = []
    if not needed:  # no range to suggest: the text says the step is needed nowhere
        return out
    end = out.upstream_since or out.gone_since
    own = ",".join(str(s) for s in SpecifierSet(versions or "") if s.operator in (">", ">="))
    if _admitted(known[:needed[0]], own) or not _admitted(known[needed[0]:needed[0] + 1], own):
        # The step's lower bound (none: every release) admits a release tested before the
        # first that needs the edit, or not that one: the releases tested say where it starts.
        own = f">={out.first_needed}"
    narrower = ",".join(([own] if own else []) + ([f"<{end}"] if end else []))
    if _admitted(known, narrower) != _admitted(known, versions):
        out.suggested_versions = narrower
    return out


def _admitted(releases: list[Release], spec: str | None) -> list[str]:
    if spec is None:
        return [r.version for r in releases]
    specifier = SpecifierSet(spec, prereleases=True)
    out = []
    for r in releases:
        try:
            if Version(r.version) in specifier:
                out.append(r.version)
        except InvalidVersion:
            continue
    return out
