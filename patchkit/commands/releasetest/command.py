"""`patchkit test RECIPE`: every patch step on every release of its package, before any host.

releases (index.py: pip lists them, fetches each wheel once, keeps the files a step can
touch) -> plans (plan.py: the real agent over each release's files) -> the matrix
(matrix.py). Patch steps on one distribution are planned together, release by release, in
the recipe's order. With `--versions installed`, the releases are the hosts' own: their
files are read through the agent (nothing written) and planned the same way.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import posixpath
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from patchkit.base import cache
from patchkit.base.errors import HostError, UsageError
from patchkit.fleet.inventory import HostSpec
from patchkit.commands.outfile import OutputError, write_output
from patchkit.recipe.model import LoadedRecipe, Step
from patchkit.commands.releasetest import index, outcome_cache
from patchkit.commands.releasetest.matrix import (
    StepMatrix,
    Verdicts,
    as_json,
    cell_of,
    exit_code,
    render,
    verdicts,
)
from patchkit.commands.releasetest.plan import StepOutcome, plan_release, version_record
from patchkit.commands.releasetest.touchable import release_reads
from patchkit.base.reveal import Reveal
from patchkit.run.steps.context import EditCache
from patchkit.run.steps.patch import PatchStep
from patchkit.run.steps.release_reads import is_pattern


@dataclass
class TestOptions:
    steps: list[str] | None = None
    dist: str | None = None
    versions: str | None = None  # a specifier, "all" (None: all) or "installed"
    jobs: int = 4
    strict: bool = False
    json: bool = False
    python: str | None = None  # -e python=: the interpreter of --versions installed
    html: str | None = None  # --html FILE: the reviewer's page (commands/releasetest/review.py)
    markdown: str | None = None  # --markdown FILE, or - for stdout (instead of the table)


class Wanted:
    """Which releases `--versions` asks for: a specifier (`>=0.14,<0.20`), or a list of exact
    releases (`0.10.1,0.16.0,0.32.0`: items without an operator); None: all of them."""

    def __init__(self, text: str | None) -> None:
        self.text = text
        self.exact: set[Version] | None = None
        self.spec: SpecifierSet | None = None
        if text in (None, "all"):
            return
        items = [item.strip() for item in (text or "").split(",")]
        try:
            if all(item[:1].isdigit() for item in items):
                self.exact = {Version(item) for item in items}
            else:
                self.spec = SpecifierSet(text or "", prereleases=True)
        except (InvalidSpecifier, InvalidVersion):
            raise UsageError(f"--versions {text!r}: expected a specifier like '>=0.14,<0.20', releases like "
                             "'0.10.1,0.16.0', all, or installed") from None

    def __contains__(self, version: str) -> bool:
        if self.exact is not None:
            return Version(version) in self.exact
        return self.spec is None or Version(version) in self.spec


def _say(text: str) -> None:
    print(f"patchkit: {text}", file=sys.stderr, flush=True)


def run(loaded: LoadedRecipe, options: TestOptions, hosts: Callable[[], list[HostSpec]]) -> int:
    if options.jobs < 1:
        raise UsageError(f"--jobs {options.jobs}: at least 1")
    cache.check()  # another user's cache folder: refused before anything is fetched
    if options.dist is not None:
        index.check_dist(options.dist)
    steps = loaded.recipe.select(options.steps)
    wanted = Wanted(None if options.versions == "installed" else options.versions)
    groups: dict[str, list[Step]] = {}
    for step in steps:
        if reads := release_reads(step):
            groups.setdefault(options.dist or reads.package, []).append(step)
    try:
        if options.versions == "installed":
            outcomes, released = asyncio.run(_installed(loaded, groups, hosts(), options))
        else:
            outcomes, released = asyncio.run(_releases(loaded, groups, wanted, options))
    except HostError as exc:
        _say(str(exc))
        return 1
    diffs: dict[str, str] = {}
    matrices = []
    for step in steps:
        reads = release_reads(step)
        if not reads:
            matrices.append(StepMatrix(step, None))
            continue
        dist = options.dist or reads.package
        matrix = StepMatrix(step, dist)
        for label, version, host in released[dist]:
            outcome, error = outcomes[(dist, label)]
            matrix.cells.append(cell_of(version, outcome.get(step.name) if outcome else None, error, diffs, host))
        matrices.append(matrix)
    found = verdicts(matrices)
    versions = {dist: [version for _, version, _ in rows] for dist, rows in released.items()}
    unwritten = None
    try:
        _write_review(loaded, matrices, diffs, found, versions, options)
    except OutputError as exc:  # said after the matrix: what was asked for but not written fails the run
        unwritten = str(exc)
    if options.json:
        print(json.dumps(as_json(loaded.recipe.name, matrices, diffs, found, versions), indent=2))
    elif options.markdown != "-":
        shown = Reveal()  # the table shows recipe and diff text: its hidden characters made visible
        table = shown(render(loaded.recipe.name, matrices, diffs, found, versions))
        warning = shown.warning("matrix")
        print((f"{warning}\n" if warning else "") + table)
    if unwritten:
        _say(unwritten)
        return 1
    return exit_code(found, options.strict)


def _write_review(loaded: LoadedRecipe, matrices: list[StepMatrix], diffs: dict[str, str], found: Verdicts,
                  versions: dict[str, list[str]], options: TestOptions) -> None:
    """--html FILE / --markdown FILE|-: the matrix as a reviewer's page."""
    if not options.html and not options.markdown:
        return
    from patchkit.commands.releasetest.review import (
        build_matrix_review,
        render_html,
        render_markdown,
    )

    review = build_matrix_review(loaded, matrices, diffs, found, versions)
    if options.html:
        write_output(options.html, render_html(review), "--html")
    if options.markdown == "-":
        sys.stdout.write(render_markdown(review))
    elif options.markdown:
        write_output(options.markdown, render_markdown(review), "--markdown")


Outcomes = dict[tuple[str, str], tuple[dict[str, StepOutcome] | None, str | None]]
Released = dict[str, list[tuple[str, str, str | None]]]  # dist -> (label, version, host) oldest first


async def _releases(loaded: LoadedRecipe, groups: dict[str, list[Step]], wanted_releases: Wanted,
                    options: TestOptions) -> tuple[Outcomes, Released]:
    edits = EditCache()
    fetching = asyncio.Semaphore(options.jobs)
    planning = asyncio.Semaphore(max(1, min(options.jobs, os.cpu_count() or 1)))
    outcomes: Outcomes = {}
    released: Released = {}

    async def one(dist: str, steps: list[Step], wanted: list[str], version: str) -> None:
        async with fetching:
            files = await index.fetch(dist, version, wanted, _say)
        if files.root is None:
            outcomes[(dist, version)] = (None, files.error)
            return
        absent = [r.package for s in steps if (r := release_reads(s)) and not (files.root / r.package).is_dir()
                  and not (files.root / f"{r.package}.py").is_file()]
        if absent:  # the agent would say "not importable by python ...": true, but not the point here
            outcomes[(dist, version)] = (None, (f"the wheel of {dist} {version} holds no package {absent[0]} "
                                               "(is --dist right?)"))
            return
        key = outcome_cache.key_of(steps, files.root, wanted, version) if outcome_cache.cacheable(steps) else None
        kept = outcome_cache.load(key) if key else None
        if kept is not None:
            outcomes[(dist, version)] = (kept, None)
            return
        async with planning:
            try:
                # Each release's agent on a loop of its own thread: an edit computed for one
                # release (CPU, seconds on a big file) never holds up another's replies.
                planned = await asyncio.to_thread(asyncio.run, plan_release(version, files.root, wanted, steps,
                                                                            loaded, edits, known=True))
                outcomes[(dist, version)] = (planned, None)
                if key:
                    outcome_cache.store(key, planned, loaded.redactor)
            except HostError as exc:
                outcomes[(dist, version)] = (None, f"planning on {dist} {version}: {exc}")
            except Exception as exc:  # noqa: BLE001 - a bug must cost its release, not the matrix
                outcomes[(dist, version)] = (None, (f"internal error planning on {dist} {version}: "
                                                   f"{type(exc).__name__}: {exc}"))

    work = []
    for dist, steps in groups.items():
        listed = await index.list_releases(dist)
        versions = [v for v in listed if v in wanted_releases]
        if not versions:
            raise HostError(f"{dist}: none of its {len(listed)} releases on the index matches "
                            f"--versions {wanted_releases.text}")
        if wanted_releases.exact is not None and len(versions) < len(wanted_releases.exact):
            found = {Version(v) for v in versions}
            absent = ", ".join(str(v) for v in sorted(wanted_releases.exact - found))
            raise HostError(f"{dist}: no release {absent} on the index (pip index versions {dist} lists them)")
        released[dist] = [(v, v, None) for v in versions]
        wanted = _wanted(steps)
        work += [one(dist, steps, wanted, v) for v in versions]
    await asyncio.gather(*work)
    return outcomes, released


async def _installed(loaded: LoadedRecipe, groups: dict[str, list[Step]], hosts: list[HostSpec],
                     options: TestOptions) -> tuple[Outcomes, Released]:
    """Each host's own release: its files read through the agent (nothing written), planned here."""
    from patchkit.host.agent.client import AgentClient
    from patchkit.host.agent.protocol import LOCATE, READ
    from patchkit.run.runner import Options, interpreter_for, transport_for

    edits = EditCache()
    outcomes: Outcomes = {}
    released: Released = {dist: [] for dist in groups}
    for host in hosts:
        python = interpreter_for(host, loaded, Options(python=options.python))
        transport = transport_for(host)
        agent = None
        try:
            agent = await AgentClient.start(transport, python, host.name)
            await agent.started(python)
            for dist, steps in groups.items():
                first = release_reads(steps[0])
                assert first is not None
                package = first.package
                wanted = _wanted(steps)
                if any(is_pattern(rel) for rel in wanted):
                    raise HostError(f"{host.name}: a step reads files by pattern ({next(filter(is_pattern, wanted))}); "
                                    "--versions installed reads named files only: test it on the index's releases")
                modules = sorted({m for s in steps if (p := PatchStep.of(s)) for m in p.modules})
                located = await agent.call(LOCATE({"package": package, "modules": modules, "read_first": False}))
                if not located["found"]:
                    raise HostError(f"{host.name}: package {package} is not importable by {python} "
                                    "(set python in the inventory or -e python=PATH)")
                version = located.get("version") or "unknown"
                label = f"{version}@{host.name}"
                released[dist].append((label, version, host.name))
                base = posixpath.dirname(located["root"].rstrip("/"))
                with tempfile.TemporaryDirectory(prefix="patchkit-installed-") as tmp:
                    for rel in wanted:
                        read = await agent.call(READ({"path": posixpath.join(base, rel)}))
                        if read["exists"] and not read.get("symlink_to"):
                            target = Path(tmp, rel)
                            target.parent.mkdir(parents=True, exist_ok=True)
                            target.write_bytes(base64.b64decode(read["content_b64"]))
                    if str(located.get("version_source", "")).startswith("dist:"):
                        version_record(Path(tmp), package, version)  # the host knew it from metadata only
                    outcomes[(dist, label)] = (await plan_release(version, Path(tmp), _all_files(Path(tmp)),
                                                                  steps, loaded, edits), None)
        except HostError as exc:
            for dist in groups:
                label = f"unknown@{host.name}"
                released[dist].append((label, "unknown", host.name))
                outcomes[(dist, label)] = (None, str(exc))
        finally:
            if agent is not None:
                await agent.close()
            await transport.close()
    return outcomes, released


def _wanted(steps: list[Step]) -> list[str]:
    """The paths (and `*` patterns) the steps read, relative to a site-packages folder."""
    return sorted({p for s in steps if (r := release_reads(s)) for p in r.paths})


def _all_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
