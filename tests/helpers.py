"""Shared test helpers: a sandbox host built from a fixture package, and the real CLI.

A sandbox is a directory under pytest's tmp_path holding
    pkgs/<package>/...        a copy of fixtures/pkgs/<package> (what patchkit patches)
    venv/                     a venv without pip (venv.EnvBuilder), with a .pth naming pkgs/
    state/                    the host's journal (state_dir of the inventory)
    inventory.yaml            one host, `local` (address: local), with that python and state_dir
so every test works on its own files and never touches ~/.local/state/patchkit.
Tests run the installed `patchkit` executable (the console script beside the test
interpreter, never one found on PATH) in a subprocess, as a user would.

Import the pytest fixtures from here (`from helpers import sandbox_fixture`); conftest.py is
not ours to write.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import sysconfig
import venv as venv_module
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fixtures import project_cli

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"
PKGS = FIXTURES / "pkgs"
RECIPES = FIXTURES / "recipes"

TOY_SPECULATIVE = "toyllm/config/speculative.py"
TOY_MODEL = "toyllm/config/model.py"


def patchkit_executable() -> str:
    """The console script beside the test interpreter (fixtures/project_cli.py): never via PATH."""
    try:
        return str(project_cli.patchkit_executable())
    except project_cli.MissingExecutable as exc:
        pytest.fail(str(exc), pytrace=False)


PATCHKIT = patchkit_executable()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def recipe(name: str) -> str:
    path = RECIPES / name
    assert path.is_file(), path
    return str(path)


@dataclass
class Result:
    """One finished patchkit process."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> dict[str, Any]:
        """The whole of stdout must be one JSON document."""
        try:
            return json.loads(self.stdout)
        except ValueError as exc:  # pragma: no cover - shown on failure only
            raise AssertionError(f"stdout is not one JSON document ({exc}):\n{self}") from None

    def hosts(self) -> dict[str, Any]:
        return self.json()["hosts"]

    def __str__(self) -> str:
        return (f"$ patchkit {' '.join(self.args)}\nexit {self.returncode}\n"
                f"--- stdout\n{self.stdout[-6000:]}\n--- stderr\n{self.stderr[-4000:]}")


def run_patchkit(*args: str, timeout: float = 60, cwd: Path | None = None,
                 env: dict[str, str] | None = None) -> Result:
    proc = subprocess.run([PATCHKIT, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd, env=env, check=False)
    return Result(list(args), proc.returncode, proc.stdout, proc.stderr)


def start_patchkit(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([PATCHKIT, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=cwd, env=env)


def finish(proc: subprocess.Popen[str], args: list[str], timeout: float = 60) -> Result:
    stdout, stderr = proc.communicate(timeout=timeout)
    return Result(args, proc.returncode, stdout, stderr)


def run_many(argvs: list[list[str]], timeout: float = 60) -> list[Result]:
    """Independent patchkit runs side by side (start-up dominates their cost)."""
    procs = [start_patchkit(*argv) for argv in argvs]
    return [finish(proc, argv, timeout) for proc, argv in zip(procs, argvs)]


def write_wheel(folder: Path, dist: str, version: str, files: dict[str, str | bytes]) -> Path:
    """A pure-Python wheel of `dist` at `version` in folder, holding `files` (path in the wheel ->
    text or bytes), with METADATA, WHEEL, top_level.txt and a RECORD of every file's hash and
    size, as pip and the release test read them."""
    info = f"{dist}-{version}.dist-info"
    contents = {name: data.encode() if isinstance(data, str) else data for name, data in files.items()}
    contents[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode()
    contents[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: patchkit-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    contents[f"{info}/top_level.txt"] = "".join(sorted({n.split("/")[0] + "\n" for n in files})).encode()
    record = "".join(f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
                     f"{len(data)}\n" for name, data in contents.items())
    contents[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    wheel = folder / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in contents.items():
            archive.writestr(name, data)
    return wheel


def make_venv(root: Path, package_dirs: list[Path]) -> Path:
    """A pip-less venv whose site-packages reaches `package_dirs` through a .pth file."""
    venv = root / "venv"
    # what `python -m venv --without-pip` does, without starting an interpreter for it
    venv_module.EnvBuilder(with_pip=False, symlinks=True).create(venv)
    python = venv / "bin" / "python"
    purelib = sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)})
    site = Path(purelib)
    assert site.is_dir(), site
    (site / "patchkit_fixture_pkgs.pth").write_text("".join(f"{d}\n" for d in package_dirs))
    return python


@dataclass
class Sandbox:
    """A local host with its own interpreter, copies of fixture packages and a journal."""

    root: Path
    python: Path
    pkgs: Path
    state: Path
    inventory: Path

    def file(self, relpath: str) -> Path:
        return self.pkgs / relpath

    def run(self, command: str, recipe_file: str | None = None, *args: str, json_out: bool = False,
            timeout: float = 60) -> Result:
        """`patchkit COMMAND [RECIPE] -i INVENTORY -e python=... [--json] ARGS`."""
        argv = self.argv(command, recipe_file, *(["--json"] if json_out else []), *args)
        return run_patchkit(*argv, timeout=timeout)

    def argv(self, command: str, recipe_file: str | None = None, *args: str) -> list[str]:
        argv = [command] + ([recipe_file] if recipe_file is not None else [])
        return argv + ["-i", str(self.inventory), "-e", f"python={self.python}", *args]

    def start(self, command: str, recipe_file: str, *args: str) -> subprocess.Popen[str]:
        return start_patchkit(*self.argv(command, recipe_file, *args))

    @property
    def spy_python(self) -> Path:
        """An interpreter that notes every start in `contacted`, then is the sandbox's python."""
        spy = self.root / "spy-python"
        if not spy.exists():
            spy.write_text(f'#!/bin/sh\necho "$@" >> "{self.contacted}"\nexec "{self.python}" "$@"\n')
            spy.chmod(0o755)
        return spy

    @property
    def contacted(self) -> Path:
        return self.root / "contacted"

    def run_records(self, recipe_name: str) -> list[dict[str, Any]]:
        folder = self.state / "runs" / recipe_name
        if not folder.is_dir():
            return []
        return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]

    def backups(self) -> list[Path]:
        folder = self.state / "backups"
        return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else []


def make_sandbox(root: Path, packages: tuple[str, ...] = ("toyllm", "brokenllm")) -> Sandbox:
    root.mkdir(parents=True, exist_ok=True)
    pkgs = root / "pkgs"
    for package in packages:
        shutil.copytree(PKGS / package, pkgs, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    python = make_venv(root, [pkgs])
    state = root / "state"
    inventory = root / "inventory.yaml"
    inventory.write_text(
        "hosts:\n"
        "  local:\n"
        "    address: local\n"
        f"    python: {json.dumps(str(python))}\n"
        f"    state_dir: {json.dumps(str(state))}\n"
    )
    return Sandbox(root=root, python=python, pkgs=pkgs, state=state, inventory=inventory)


@pytest.fixture(name="sandbox")
def sandbox_fixture(tmp_path: Path) -> Sandbox:
    """A fresh local host with toyllm and brokenllm installed and an empty journal."""
    return make_sandbox(tmp_path / "host")


def host(result: Result, name: str = "local") -> dict[str, Any]:
    """The one host's entry of a --json report."""
    doc = result.json()
    assert name in doc["hosts"], result
    return doc["hosts"][name]


def step(result: Result, name: str, host_name: str = "local") -> dict[str, Any]:
    steps = {s["name"]: s for s in host(result, host_name)["steps"]}
    assert name in steps, result
    return steps[name]


def host_agent(*extensions: str) -> Any:
    """The host agent as it runs on a host, as a module: the bytes the control side sends at
    start (the shared constants, then the core) and those of the named extensions (see
    client.AGENT_EXTENSIONS), executed into one namespace as op_load does (without serving)."""
    import types

    from patchkit.host.agent.client import AGENT_EXTENSIONS, agent_file, agent_source

    agent = types.ModuleType("patchkit_host_under_test")
    exec(compile(agent_source(), "core.py", "exec"), agent.__dict__)
    for extension in extensions:
        for pkg, name in AGENT_EXTENSIONS[extension]:
            exec(compile(agent_file(pkg, name), name, "exec"), agent.__dict__)
    return agent


CHROMIUM = "/usr/bin/chromium"  # installed by scripts/install-system-deps.sh (make test)


@contextmanager
def review_page_in_chromium(page_file: Path, shown: str) -> Iterator[tuple[Any, list[str]]]:
    """A review page (--html) open in headless Chromium on a phone-sized screen, after what every
    such page must hold is checked: it loads nothing but itself, no console error, page error or
    dialog, no script or image element, nothing run (`window.__pwned`), and `shown` appears as
    text. Yields the page and the problems seen (checked again when the caller is done)."""
    from playwright.sync_api import sync_playwright

    assert shutil.which(CHROMIUM), "chromium is installed by make test (scripts/install-system-deps.sh)"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        try:
            page = browser.new_page(viewport={"width": 390, "height": 844})  # a phone
            requests: list[str] = []
            problems: list[str] = []
            page.on("request", lambda r: requests.append(r.url))
            page.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.on("dialog", lambda d: problems.append("dialog: " + d.message))
            page.goto(page_file.as_uri())
            page.wait_for_load_state("load")
            assert requests == [page_file.as_uri()], requests  # the page itself, nothing else
            assert problems == [], problems
            assert page.evaluate("window.__pwned") is None
            assert page.locator("script").count() == 0 and page.locator("img").count() == 0
            assert shown in page.inner_text("body")  # shown as text, whole
            yield page, problems
            assert problems == [], problems
        finally:
            browser.close()


@contextmanager
def tree_walk(fast: bool) -> Iterator[None]:
    """Edits computed one way for the block: tree.FAST True (passes pruned to the statements a
    target's words are in, results spliced) or False (every statement, the module printed
    whole); the parse cache emptied on both sides, so nothing crosses over."""
    from patchkit.edits import tree

    saved = tree.FAST
    tree.FAST = fast
    tree._CACHE.clear()
    try:
        yield
    finally:
        tree.FAST = saved
        tree._CACHE.clear()


def tree_listing(folder: Path) -> dict[str, tuple[int, int, bytes | None]]:
    """Every entry under folder (itself too), unfollowed: owner, mode, and a file's bytes."""
    out = {}
    for here in [folder, *sorted(folder.rglob("*"))]:
        st = here.lstat()
        out[str(here.relative_to(folder))] = (st.st_uid, st.st_mode, here.read_bytes() if here.is_file() else None)
    return out
