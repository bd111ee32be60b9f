"""`patchkit capture DIST -o RECIPE.yaml`: the hand edits on a host, as a recipe.

The files of the installed distribution whose sha256 differs from RECORD are read from the
host (nothing there is written); their pristine bytes come from the release's wheel (`pip
download --no-deps DIST==VERSION`, cached, or `--wheel FILE`), checked against RECORD. Each
changed package becomes one patch step: a built-in op when the change is exactly one that an
op writes byte for byte (e.g. a `list_insert`), else a `diff` edit in a .patch file next to the
recipe; `versions: ==VERSION`, the changed modules import-checked, and a description naming
the host and the time of capture.
"""

from __future__ import annotations

import ast
import base64
import datetime
import difflib
import hashlib
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from patchkit.host.agent.protocol import READ
from patchkit.base.cache import cache_dir
from patchkit.base.cache import folder as cache_folder
from patchkit.edits.encoding import decode_source
from patchkit.edits.model import EditError
from patchkit.base.errors import HostError, UsageError
from patchkit.run.installed import InstalledDist, installed
from patchkit.commands.outfile import OutputError, write_output
from patchkit.run.results import HostResult, StepResult

if TYPE_CHECKING:
    from patchkit.run.runner import Session


@dataclass
class CapturedFile:
    rel: str
    module: str | None
    pristine: bytes
    current: bytes


@dataclass
class Capture:
    host: str
    dist: InstalledDist
    files: list[CapturedFile] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # what a recipe cannot carry, and why


# ------------------------------------------------------------------ the pristine files


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def pristine_wheel(name: str, version: str, wheel: Path | None = None) -> Path:
    """The release's wheel: `wheel` if given, else a cached one, else `pip download`."""
    if wheel is not None:
        if not wheel.is_file():
            raise UsageError(f"--wheel {wheel}: no such file")
        return wheel
    folder = cache_dir() / "wheels"
    prefix = f"{_normalized(name)}-{version}-"
    cached = sorted(p for p in folder.glob("*.whl") if p.name.lower().startswith(prefix.lower()))
    if cached:
        return cached[0]
    folder = cache_folder("wheels")  # created 0700; another user's refused
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
               f"{name}=={version}", "-d", str(folder)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    cached = sorted(p for p in folder.glob("*.whl") if p.name.lower().startswith(prefix.lower()))
    if done.returncode != 0 or not cached:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no wheel"]
        raise HostError(f"cannot get the pristine wheel of {name} {version} (pip download: {tail[0]}); "
                        f"give it with --wheel FILE")
    return cached[0]


def record_digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


MAX_CAPTURE_BYTES = 16 << 20  # a file capture turns into a recipe: source text, never this big
CHUNK = 1 << 20


def pristine_bytes(wheel: Path, rel: str, record_sha256: str, record_size: int | None = None) -> bytes:
    """The wheel's `rel`, checked against RECORD: its size before a byte is inflated (a zip
    member can expand a thousandfold), then its hash, streamed, never past RECORD's size."""
    limit = record_size if record_size is not None else MAX_CAPTURE_BYTES
    try:
        with zipfile.ZipFile(wheel) as archive:
            try:
                info = archive.getinfo(rel)
            except KeyError:
                raise HostError(f"{wheel.name} has no {rel}: not the wheel this distribution was installed from; "
                                "give the right one with --wheel FILE") from None
            if record_size is not None and info.file_size != record_size:
                raise HostError(f"{rel} in {wheel.name} is not the file RECORD names ({info.file_size} bytes, "
                                f"RECORD says {record_size}: another build of the release?); give the installed "
                                "one with --wheel FILE")
            if max(info.file_size, limit) > MAX_CAPTURE_BYTES:
                raise HostError(f"{rel} is {max(info.file_size, limit)} bytes, more than capture reads "
                                f"({MAX_CAPTURE_BYTES} bytes): a recipe carries source edits, not files this big")
            digest, chunks, total = hashlib.sha256(), [], 0
            with archive.open(info) as member:
                while block := member.read(CHUNK):
                    total += len(block)
                    if total > limit:  # the header lied about the size
                        raise HostError(f"{rel} in {wheel.name} inflates past the {limit} bytes RECORD says: not the "
                                        "file RECORD names; give the installed one with --wheel FILE")
                    digest.update(block)
                    chunks.append(block)
    except zipfile.BadZipFile as exc:  # not a zip, or a member whose CRC fails
        raise HostError(f"{wheel}: not a wheel ({exc})") from None
    if base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode() != record_sha256:
        raise HostError(f"{rel} in {wheel.name} is not the file RECORD names (another build of the release?); "
                        "give the installed one with --wheel FILE")
    return b"".join(chunks)


async def capture_host(session: Session, dist: str, wheel: Path | None, out: list[Capture]) -> HostResult:
    found = await installed(session.agent, dist)
    if found.out_of_time:  # the files past the budget were never compared: a capture of part of them is no capture
        raise HostError(f"{found.name} {found.version}: comparing its files with RECORD ran past the time budget "
                        f"({found.budget_s:g} s, {found.unchecked} files not checked); nothing captured")
    capture = Capture(session.host.name, found)
    source = pristine_wheel(found.name, found.version, wheel) if found.changed else None
    for changed in sorted(found.changed, key=lambda c: c.rel):
        if changed.change != "modified":
            capture.skipped.append(f"{changed.rel}: {changed.change} (a recipe edits files; it does not remove them)")
            continue
        if not changed.rel.endswith(".py"):
            capture.skipped.append(f"{changed.rel}: not a Python file (patch steps edit Python)")
            continue
        if changed.size is not None and changed.size > MAX_CAPTURE_BYTES:
            capture.skipped.append(f"{changed.rel}: {changed.size} bytes now, more than capture reads "
                                   f"({MAX_CAPTURE_BYTES} bytes)")
            continue
        assert source is not None
        read = await session.agent.call(READ({"path": changed.path}))
        pristine = pristine_bytes(source, changed.rel, changed.record_sha256, changed.record_size)
        current = base64.b64decode(read.get("content_b64", ""))
        try:  # as Python reads them (a PEP 263 declaration says how): a recipe carries text
            decode_source(pristine), decode_source(current)
        except EditError as exc:
            capture.skipped.append(f"{changed.rel}: {exc} (a recipe edits text)")
            continue
        capture.files.append(CapturedFile(changed.rel, found.module_of(changed), pristine, current))
    out.append(capture)
    rows = [StepResult(name=f.rel, kind="file", status="ok", message="captured: differs from RECORD",
                       file=f"{found.location}/{f.rel}") for f in capture.files]
    rows += [StepResult(name=s.split(":")[0], kind="file", status="skipped", message=s) for s in capture.skipped]
    message = f"{found.name} {found.version}: {len(capture.files)} file(s) that differ from RECORD captured"
    return HostResult(status="ok", steps=rows, message=message)


# ------------------------------------------------------------------ the recipe


_DEF = re.compile(r"^[ \t]*((?:async[ \t]+)?def|class)[ \t]")


def git_diff(rel: str, old: str, new: str) -> str:
    """A unified diff in git's form: `diff --git`, the enclosing def/class after each hunk's
    second `@@` (what a diff edit locates the hunk by), `\\ No newline at end of file`."""
    old_lines, new_lines = old.splitlines(keepends=True), new.splitlines(keepends=True)
    out = [f"diff --git a/{rel} b/{rel}\n"]
    for line in difflib.unified_diff(old_lines, new_lines, fromfile=f"a/{rel}", tofile=f"b/{rel}", n=3):
        if line.startswith("@@"):
            start = int(line.split()[1].split(",")[0].lstrip("-") or 1)
            header = next((old_lines[i].strip() for i in range(min(start, len(old_lines)) - 1, -1, -1)
                           if _DEF.match(old_lines[i])), "")
            line = line.rstrip("\n") + (f" {header}" if header else "") + "\n"
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def builtin_edit(pristine: str, current: str) -> dict[str, Any] | None:
    """A `list_insert` when the one difference is literals added to one list display, and the
    op writes exactly the current text from the pristine one; else None (a diff edit)."""
    try:
        old_tree, new_tree = ast.parse(pristine), ast.parse(current)
    except SyntaxError:
        return None
    old_sites, new_sites = _displays(old_tree), _displays(new_tree)
    differing = [key for key in old_sites if key in new_sites
                 and ast.dump(old_sites[key]) != ast.dump(new_sites[key])]
    if len(differing) != 1 or set(old_sites) != set(new_sites):
        return None
    key = differing[0]
    old_node, new_node = old_sites[key], new_sites[key]
    old_value, new_value = old_node.value, new_node.value
    if not isinstance(old_value, (ast.List, ast.Tuple, ast.Set)) or not isinstance(new_value, type(old_value)):
        return None
    old_node.value = new_value  # the trees are equal but for this display?
    same_elsewhere = ast.dump(old_tree) == ast.dump(new_tree)
    old_node.value = old_value
    if not same_elsewhere:
        return None
    try:
        before = [ast.literal_eval(e) for e in old_value.elts]
        after = [ast.literal_eval(e) for e in new_value.elts]
    except ValueError:
        return None
    added = [v for v in after if v not in before]
    if not added or [v for v in after if v in before] != before:
        return None
    first = after.index(added[0])
    scope, target = key
    spec: dict[str, Any] = {"names": [target], "values": added}
    if scope:
        spec["within"] = scope
    if first > 0:
        spec["after"] = after[first - 1]
    from patchkit.edits import Edit

    try:
        result = Edit.model_validate({"list_insert": spec}).apply(pristine)
    except Exception:  # noqa: BLE001 - any refusal: the diff edit carries it instead
        return None
    return {"list_insert": spec} if result.verdict == "changed" and result.source == current else None


def _displays(tree: ast.Module) -> dict[tuple[str, str], ast.Assign | ast.AnnAssign]:
    """(scope, target) -> its one assignment of a list/tuple/set display (names assigned
    twice in a scope are left out: an edit of them is ambiguous)."""
    found: dict[tuple[str, str], ast.Assign | ast.AnnAssign] = {}
    twice: set[tuple[str, str]] = set()

    def walk(body: list[ast.stmt], scope: list[str]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                walk(node.body, [*scope, node.name])
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, ast.AnnAssign) and node.value is not None else []
            for target in targets:
                key = (".".join(scope), ast.unparse(target))
                if key in found:
                    twice.add(key)
                if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, (ast.List, ast.Tuple, ast.Set)):
                    found[key] = node
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.stmt):
                    walk([child], scope)

    walk(tree.body, [])
    return {k: v for k, v in found.items() if k not in twice}


def write_recipe(capture: Capture, out: Path, when: datetime.datetime) -> list[Path]:
    """The recipe (and its .patch files) for a capture; the paths written."""
    dist = capture.dist
    packages: dict[str, list[CapturedFile]] = {}
    for f in capture.files:
        packages.setdefault(f.rel.split("/")[0], []).append(f)
    stamp = when.strftime("%Y-%m-%d %H:%M:%S UTC")
    steps: list[dict[str, Any]] = []
    patches: dict[Path, str] = {}
    for package, files in sorted(packages.items()):
        files = [f for f in files if f.module]  # a .py that is no module (a script's copy): nothing to import-check
        modules = [f.module for f in files if f.module]
        if not modules:
            continue
        texts = [(f, decode_source(f.pristine), decode_source(f.current)) for f in files]  # checked: capture_host
        edit = builtin_edit(texts[0][1], texts[0][2]) if len(texts) == 1 else None
        if edit is None:
            patch = out.with_name(f"{out.stem}-{package}.patch")
            patches[patch] = "".join(git_diff(f.rel, old, new) for f, old, new in texts)
            edit = {"diff": {"file": patch.name}}
        steps.append({
            "name": f"{package}-captured",
            "description": f"what differed from {dist.name} {dist.version}'s RECORD on {capture.host} at {stamp}: "
                           + ", ".join(f.rel for f in files),
            "patch": {"package": package, "versions": f"=={dist.version}", "modules": list(modules), "edit": edit},
            "verify": {"import": list(modules)},
        })
    if not steps:
        raise HostError(f"{dist.name} {dist.version} on {capture.host}: no changed Python module to capture"
                        + (f" ({'; '.join(capture.skipped)})" if capture.skipped else ""))
    recipe = {
        "name": re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{_normalized(dist.name)}-{capture.host}-captured"),
        "description": f"Captured by patchkit capture from {capture.host} at {stamp}: the files of "
                       f"{dist.name} {dist.version} that differed from its RECORD.",
        "steps": steps,
    }
    # every list is its own object: safe_dump writes no anchors or aliases
    outputs = {**patches, out: yaml.safe_dump(recipe, sort_keys=False, width=100, allow_unicode=True)}
    written: list[Path] = []
    try:
        for path, text in outputs.items():  # never over a recipe or patch someone may have edited
            write_output(path, text, replace=False)
            written.append(path)
    except OutputError as exc:
        for path in written:
            path.unlink(missing_ok=True)
        raise CaptureRefused(f"{exc}; nothing written" if "nothing written" not in str(exc) else str(exc)) from None
    return [out, *patches]


class CaptureRefused(HostError):
    """The recipe cannot be written where -o says (the host was read, nothing was changed)."""
