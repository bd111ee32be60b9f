"""`patchkit bundle RECIPE -o fix.pyz`: a start-up bundle for containers and pods from upstream images.

The bundle is one zipapp any Python >= 3.8 runs with the standard library alone:
    __main__.py   runs core.py then bundle.py (the agent's host files) in one namespace
    core.py       the agent's core (host/remote/core.py): locate, lock, journal, apply_files, checks
    bundle.py     the bundle's run (host/remote/bundle.py): decide, apply, exec the command
    bundle.json   the recipe's patch and check steps; per patch step and release, each file's
                  sha256 before and after the step and its new bytes

The releases are those `patchkit test` plans (its index, its cache, its planning by the real
agent): every release of each patched package that `--versions` and the steps' ranges admit.
A release where no step changes or holds anything, or where a step fails, is left out (and
said so here); the bundle then refuses it on the host, before the command starts.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
import sys
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from patchkit import __version__
from patchkit.base import cache
from patchkit.base.errors import HostError, UsageError
from patchkit.commands.outfile import write_output
from patchkit.commands.releasetest import index
from patchkit.commands.releasetest.command import Wanted
from patchkit.commands.releasetest.plan import StepOutcome, plan_release
from patchkit.commands.releasetest.touchable import touchable_paths
from patchkit.host.agent.files import AGENT_CORE, BUNDLE_RUNNER, SENT_CONSTANTS, agent_file
from patchkit.recipe.model import LoadedRecipe, Step
from patchkit.run.steps.check import CheckStep
from patchkit.run.steps.context import EditCache
from patchkit.run.steps.patch import VERIFY_NOTE, PatchStep

FORMAT = 1
# The bundle's entry: the core, then the bundle's run, in one namespace (as the agent runs its
# extensions), with the constants the control side sends every agent.
MAIN = '''# A patchkit start-up bundle: python THIS [--state-dir DIR] [--on-unknown refuse|run] -- COMMAND [ARG...]
import sys, time
_began = time.monotonic()
if sys.version_info < (3, 8):
    sys.exit("patchkit-bundle: needs Python >= 3.8, not %d.%d" % sys.version_info[:2])
import zipfile
with zipfile.ZipFile(__loader__.archive) as _bundle:
    _ns = {"__name__": "patchkit_bundle", CONSTANTS}
    for _name in ("core.py", "bundle.py"):
        exec(compile(_bundle.read(_name), "patchkit-bundle/" + _name, "exec"), _ns)
    _data = _bundle.read("bundle.json")
sys.exit(_ns["bundle_main"](_data, sys.argv[1:], _began))
'''
SHEBANG = b"#!/usr/bin/env python3\n"
STAMP = (2020, 1, 1, 0, 0, 0)  # every member's date: one recipe and one set of releases, one byte-identical file


@dataclass
class BundleOptions:
    output: str
    steps: list[str] | None = None
    versions: str | None = None
    dist: str | None = None
    jobs: int = 4


@dataclass
class Planned:
    """One release of a distribution: its plans, and the new bytes of each changing step's files."""

    version: str
    outcomes: dict[str, StepOutcome] | None
    contents: dict[str, dict[str, bytes | None]]
    error: str | None = None


def build(loaded: LoadedRecipe, options: BundleOptions, say: Callable[[str], None]) -> int:
    """Plan every release, write the bundle; 0 written, 1 nothing to bundle (said why)."""
    cache.check()
    if options.dist is not None:
        index.check_dist(options.dist)
    if options.versions == "installed":
        raise UsageError("--versions installed is for patchkit test: a bundle is built for releases on the index "
                         "(a specifier like '>=0.14,<0.20', or releases like '0.16.0,0.17.1')")
    if loaded.redactor:
        raise UsageError(f"recipe {loaded.recipe.name} has secret variables ({', '.join(sorted(loaded.redactor.secrets))}): "
                         "a bundle is a file whoever reads it reads whole (a ConfigMap, a volume), so it holds no "
                         "secrets; apply such a recipe over SSH, or bake it")
    steps = loaded.recipe.select(options.steps)
    patches = [s for s in steps if PatchStep.of(s)]
    if not patches:
        raise UsageError(f"recipe {loaded.recipe.name} has no patch step{' among --steps' if options.steps else ''}: "
                         "nothing to bundle")
    for step in steps:
        if not PatchStep.of(step) and not isinstance(step.spec, CheckStep):
            say(f"step {step.name} ({step.kind}) is not in the bundle: a bundle runs patch and check steps, "
                "then the command given after --")
    groups: dict[str, list[Step]] = {}
    for step in patches:
        patch = PatchStep.of(step)
        assert patch is not None
        groups.setdefault(options.dist or patch.package, []).append(step)
    try:
        planned = asyncio.run(_plan_all(loaded, groups, Wanted(options.versions), options, say))
    except HostError as exc:
        say(str(exc))
        return 1
    doc = _document(loaded, steps, groups, planned, say)
    bundled = {name: sorted(step["releases"]) for name, step in ((s["name"], s) for s in doc["steps"])
               if "releases" in step}
    if not any(bundled.values()):
        say("no release of " + ", ".join(groups) + " takes the recipe: no bundle written")
        return 1
    data = archive(doc)
    write_output(options.output, data, "-o")
    releases = sorted({v for vs in bundled.values() for v in vs}, key=Version)
    say(f"wrote {options.output} ({len(data) / 1024:.0f} KB): {len(doc['steps'])} steps, "
        f"{len(releases)} releases ({', '.join(releases)}); run it as: python {Path(options.output).name} -- COMMAND")
    return 0


def _in_any_range(steps: list[Step], version: str) -> bool:
    """Could any of the steps apply to this release? (one without a range applies to all)"""
    for step in steps:
        patch = PatchStep.of(step)
        assert patch is not None
        if not patch.versions or Version(version) in SpecifierSet(patch.versions, prereleases=True):
            return True
    return False


async def _plan_all(loaded: LoadedRecipe, groups: dict[str, list[Step]], wanted: Wanted, options: BundleOptions,
                    say: Callable[[str], None]) -> dict[str, list[Planned]]:
    edits = EditCache()
    fetching = asyncio.Semaphore(options.jobs)
    planning = asyncio.Semaphore(1)  # the agent's plans share this machine's cores: one release at a time
    out: dict[str, list[Planned]] = {}

    async def one(dist: str, steps: list[Step], files_wanted: list[str], version: str) -> Planned:
        async with fetching:
            files = await index.fetch(dist, version, files_wanted, say)
        if files.root is None:
            return Planned(version, None, {}, files.error)
        contents: dict[str, dict[str, bytes | None]] = {}
        async with planning:
            try:
                outcomes = await plan_release(version, files.root, files_wanted, steps, loaded, edits, known=True,
                                              contents=contents)
            except HostError as exc:
                return Planned(version, None, {}, f"planning on {dist} {version}: {exc}")
        return Planned(version, outcomes, contents)

    for dist, steps in groups.items():
        listed = await index.list_releases(dist)
        versions = [v for v in listed if v in wanted and _in_any_range(steps, v)]
        outside = [v for v in listed if v in wanted and v not in versions]
        if outside:
            say(f"{dist} {', '.join(outside)}: not in the bundle (outside every step's versions)")
        if not versions:
            raise HostError(f"{dist}: none of its {len(listed)} releases on the index is in "
                            f"{'--versions ' + str(wanted.text) + ' and ' if wanted.text else ''}the steps' ranges")
        files_wanted = sorted({p for s in steps if (patch := PatchStep.of(s)) for p in touchable_paths(patch)})
        out[dist] = list(await asyncio.gather(*(one(dist, steps, files_wanted, v) for v in versions)))
    return out


def _document(loaded: LoadedRecipe, steps: list[Step], groups: dict[str, list[Step]],
              planned: dict[str, list[Planned]], say: Callable[[str], None]) -> dict[str, Any]:
    """bundle.json: the steps in the recipe's order, each patch step with its releases."""
    per_step: dict[str, dict[str, list[dict[str, Any]]]] = {s.name: {} for ss in groups.values() for s in ss}
    versions_of: dict[str, list[tuple[str, str]]] = {}  # package -> (index version, version the files say)
    for dist, releases in planned.items():
        names = [s.name for s in groups[dist]]
        for release in releases:
            why = _left_out(release, names)
            if why:
                say(f"{dist} {release.version}: not in the bundle ({why})")
                continue
            assert release.outcomes is not None
            entries = _release_entries(release, groups[dist])
            for step in groups[dist]:
                entry = entries[step.name]
                per_step[step.name].setdefault(entry["version"], []).append(entry)
                patch = PatchStep.of(step)
                assert patch is not None
                versions_of.setdefault(patch.package, []).append((release.version, entry["version"]))
    doc_steps: list[dict[str, Any]] = []
    for step in steps:
        patch = PatchStep.of(step)
        if patch is not None:
            doc_steps.append({"name": step.name, "kind": "patch", "package": patch.package,
                              "verify_imports": list(step.checks.import_), "import_timeout_s": step.checks.timeout_s,
                              "verify_python": step.checks.python,
                              "releases": {v: entries for v, entries in per_step[step.name].items()}})
        elif isinstance(step.spec, CheckStep):
            doc_steps.append(_check(step, step.spec, versions_of))
    doc: dict[str, Any] = {"format": FORMAT, "recipe": loaded.recipe.name, "recipe_sha256": loaded.content_sha256,
                           "patchkit_version": __version__, "variables": loaded.variables, "steps": doc_steps}
    doc["bundle_id"] = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]
    return doc


def _left_out(release: Planned, names: list[str]) -> str | None:
    """Why a release is not bundled: it could not be planned, a step fails on it, or no step
    changes or holds anything there; None when it is bundled."""
    if release.outcomes is None:
        return release.error or "not planned"
    results = [release.outcomes[n].result for n in names]
    failed = next((r for r in results if r.status == "failed"), None)
    if failed is not None:
        return f"step {failed.name} fails on it: {failed.message}"
    if all(r.status == "skipped" for r in results):
        return "; ".join(f"{r.name}: {r.message}" for r in results)
    return None


def _release_entries(release: Planned, steps: list[Step]) -> dict[str, dict[str, Any]]:
    """Per step, what the bundle knows of it on this release: status, result, files (each
    with the hashes of the later steps' results on the same file: the step is in place there too)."""
    assert release.outcomes is not None
    entries: dict[str, dict[str, Any]] = {}
    for step in steps:
        result = release.outcomes[step.name].result
        # The plan's result is what a run journals, less what only a plan says.
        done = result.model_copy(update={"message": result.message.replace(VERIFY_NOTE, "")})
        entry: dict[str, Any] = {"release": release.version, "status": result.status,
                                 "version": result.package_version or release.version,
                                 "result": done.model_dump(mode="json", exclude_none=True), "files": []}
        if result.status in ("changed", "ok"):
            new = release.contents.get(step.name, {})
            changes = result.files if result.files is not None else []
            pairs = [(c.file, c.sha256_before, c.sha256_after) for c in changes] or \
                [(result.file or "", result.sha256_before, result.sha256_after)]
            for rel, before, after in pairs:
                file: dict[str, Any] = {"rel": rel, "before": before, "after": after, "later": []}
                if result.status == "changed" and before != after:
                    data = new[rel]
                    file["content_b64"] = None if data is None else base64.b64encode(data).decode()
                entry["files"].append(file)
        entries[step.name] = entry
    order = [s.name for s in steps]
    for i, name in enumerate(order):
        for file in entries[name]["files"]:
            for later in order[i + 1:]:
                file["later"] += [f["after"] for f in entries[later]["files"] if f["rel"] == file["rel"]
                                  and f["after"] != file["after"]]
    return entries


def _check(step: Step, spec: CheckStep, versions_of: dict[str, list[tuple[str, str]]]) -> dict[str, Any]:
    """A check step; one gated on versions runs on the bundled releases of its package in that range."""
    runs_on = None
    if spec.versions:
        if not spec.package or spec.package not in versions_of:
            raise UsageError(f"check {step.name} applies to {spec.package or 'a package'} {spec.versions}, a package "
                             "no patch step of the bundle patches: its releases are unknown to the bundle")
        gate = SpecifierSet(spec.versions, prereleases=True)
        runs_on = sorted({said for listed, said in versions_of[spec.package] if Version(listed) in gate})
    return {"name": step.name, "kind": "check", "package": spec.package, "versions": spec.versions,
            "runs_on": runs_on, "python": spec.python, "timeout_s": spec.timeout_s, "message": spec.message}


def archive(doc: dict[str, Any]) -> bytes:
    """The zipapp's bytes: a shebang, then the zip (zipimport reads past what precedes it)."""
    constants = ", ".join(f"{name!r}: {value!r}" for name, value in SENT_CONSTANTS.items())
    members = {
        "__main__.py": MAIN.replace("CONSTANTS", constants).encode(),
        "core.py": agent_file(*AGENT_CORE),
        "bundle.py": agent_file(*BUNDLE_RUNNER),
        "bundle.json": json.dumps(doc, indent=1, sort_keys=True).encode(),
    }
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as out:
        for name, data in members.items():
            info = zipfile.ZipInfo(name, STAMP)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            out.writestr(info, data)
    return SHEBANG + buffer.getvalue()


def _say(text: str) -> None:
    print(f"patchkit: {text}", file=sys.stderr, flush=True)


def run(loaded: LoadedRecipe, options: BundleOptions) -> int:
    started = time.monotonic()
    code = build(loaded, options, _say)
    if code == 0:
        _say(f"bundle built in {time.monotonic() - started:.1f} s")
    return code
