"""The runtime install a user makes (README "Install"): `pip install .` from a clone, or the
built wheel, into a fresh venv, no extras, dependencies at the newest versions pyproject.toml
allows (no constraints file), from the package index pip is configured with. It must give the
console script, work, stay quiet on stderr and stay small. The artifacts a release uploads
(`python -m build`: sdist and wheel) pass `twine check --strict`, and the wheel holds the files
that run on hosts and the Ansible collection, and no tests.

Builds run on a copy of the files they need, so the worktree gets no build/, dist/ or *.egg-info.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from patchkit import __version__
from tests.helpers import REPO, TOY_SPECULATIVE, make_sandbox, recipe

DISTRIBUTION = "patchkit-llm"
# Measured 94 MB here (2026-12: pip, setuptools, cryptography, pydantic-core and libcst are most
# of it); the bound leaves room for dependencies to grow a little, not for a new heavy one.
MAX_VENV_MB = 115
WARNING = re.compile(r"warn", re.IGNORECASE)


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def _size_mb(root: Path) -> float:
    """Disk used, in blocks as `du -s` counts it."""
    total = sum(p.lstat().st_blocks * 512 for p in root.rglob("*") if not p.is_symlink())
    return total / 2**20


def _quiet(done: subprocess.CompletedProcess[str]) -> bool:
    return not any(WARNING.search(line) for line in done.stderr.splitlines()) and "Traceback" not in done.stderr


def _clean_env() -> dict[str, str]:
    """Nothing of the test venv may leak in: the installed patchkit must stand on its own."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}


def _clone(root: Path) -> Path:
    """What a clone holds of the distribution's sources (a copy: builds write beside them)."""
    root.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, root / name)
    for folder in ("patchkit", "ansible_collections"):
        shutil.copytree(REPO / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return root


def test_pip_install_from_a_clone_gives_a_small_quiet_working_patchkit(tmp_path: Path) -> None:
    _install_and_use(tmp_path, str(_clone(tmp_path / "clone")))


def test_pipx_install_from_a_clone_puts_a_working_patchkit_on_its_bin_dir(tmp_path: Path) -> None:
    """README's `pipx install .`, run in a clone: pipx's venv and bin folder under tmp."""
    clone = _clone(tmp_path / "clone")
    env = {**_clean_env(), "PIPX_HOME": str(tmp_path / "pipx"), "PIPX_BIN_DIR": str(tmp_path / "bin"),
           "PIPX_MAN_DIR": str(tmp_path / "man")}
    installed = _run([sys.executable, "-m", "pipx", "install", "."], clone, env, timeout=300)
    assert installed.returncode == 0, installed.stderr[-4000:]
    patchkit = tmp_path / "bin" / "patchkit"
    version = _run([str(patchkit), "--version"], tmp_path, env)
    assert version.returncode == 0 and version.stdout.strip() == f"patchkit {__version__}", version
    validated = _run([str(patchkit), "validate", str(REPO / "recipes" / "kimi_eagle3.yaml")], tmp_path, env)
    assert validated.returncode == 0 and _quiet(validated), validated


def test_the_built_artifacts_pass_twine_and_the_wheel_installs_a_working_patchkit(tmp_path: Path) -> None:
    source = _clone(tmp_path / "clone")
    dist = tmp_path / "dist"
    built = _run([sys.executable, "-m", "build", "-q", "--outdir", str(dist), str(source)], source, _clean_env(),
                 timeout=300)
    assert built.returncode == 0, built.stderr[-4000:]
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    assert [w.name for w in wheels] == [f"patchkit_llm-{__version__}-py3-none-any.whl"], wheels
    assert [s.name for s in sdists] == [f"patchkit_llm-{__version__}.tar.gz"], sdists
    checked = _run([sys.executable, "-m", "twine", "check", "--strict", *map(str, wheels + sdists)], dist, _clean_env())
    assert checked.returncode == 0 and checked.stdout.count("PASSED") == 2, checked

    with zipfile.ZipFile(wheels[0]) as wheel:
        names = set(wheel.namelist())
    shipped = {f"patchkit/{p.relative_to(REPO / 'patchkit')}" for p in (REPO / "patchkit").rglob("*.py")}
    assert shipped <= names, sorted(shipped - names)  # every module: the host files and the reader among them
    assert "patchkit/host/remote/core.py" in names and "patchkit/host/checkpoint/reader.py" in names
    collection = {str(p.relative_to(REPO)) for p in (REPO / "ansible_collections").rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts}
    assert collection and collection <= names, sorted(collection - names)
    assert not [n for n in names if n.startswith("tests/") or "/__pycache__/" in n or n.endswith(".pyc")], names

    _install_and_use(tmp_path, str(wheels[0]))


def _install_and_use(tmp_path: Path, what: str) -> None:
    """`pip install WHAT` into a new venv, then the console script: --version, validate, a plan."""
    env = _clean_env()
    work = tmp_path / "work"
    work.mkdir()
    venv = tmp_path / "venv"
    started = time.monotonic()
    made = _run([sys.executable, "-m", "venv", str(venv)], work, env)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    installed = _run([str(python), "-m", "pip", "install", "-q", what], work, env, timeout=300)
    assert installed.returncode == 0, installed.stderr[-4000:]
    install_s = time.monotonic() - started

    shown = _run([str(python), "-m", "pip", "show", DISTRIBUTION], work, env)
    assert shown.returncode == 0 and f"Name: {DISTRIBUTION}" in shown.stdout, shown
    # the old name would be the index's unrelated project: nothing may install under it
    assert _run([str(python), "-m", "pip", "show", "patchkit"], work, env).returncode != 0
    where = _run([str(python), "-c", "import patchkit; print(patchkit.__file__)"], work, env)
    assert Path(where.stdout.strip()).is_relative_to(venv), where  # the installed copy, not the repo

    patchkit = str(venv / "bin" / "patchkit")
    version = _run([patchkit, "--version"], work, env)
    assert version.returncode == 0 and version.stdout.strip() == f"patchkit {__version__}", version
    assert version.stderr == "", version.stderr

    validated = _run([patchkit, "validate", str(REPO / "recipes" / "kimi_eagle3.yaml")], work, env)
    assert validated.returncode == 0, validated
    assert "valid recipe kimi_eagle3" in validated.stdout, validated.stdout
    assert _quiet(validated), validated.stderr

    host = make_sandbox(tmp_path / "host", packages=("toyllm",))
    before = host.file(TOY_SPECULATIVE).read_bytes()
    planned = _run([patchkit, *host.argv("plan", recipe("toyllm_eagle3.yaml"), "--steps", "eagle3-whitelist")],
                   work, env)
    assert planned.returncode == 0, planned
    assert f"+++ b{host.file(TOY_SPECULATIVE)}" in planned.stdout, planned.stdout
    assert '+                "kimi_k2",' in planned.stdout, planned.stdout
    assert _quiet(planned), planned.stderr
    assert host.file(TOY_SPECULATIVE).read_bytes() == before

    size = _size_mb(venv)
    print(f"runtime install: {size:.0f} MB, {install_s:.0f} s")
    assert size < MAX_VENV_MB, f"the runtime venv is {size:.0f} MB (bound {MAX_VENV_MB} MB)"
