"""The docs site and the generated reference: `mkdocs build --strict` passes (every link and
anchor resolves, every page is in the nav), and the reference pages and the man page are what
scripts/docs_reference.py makes from the code today (a new option or recipe key shows up, or
this fails)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.unit


def test_the_reference_pages_and_the_man_page_are_generated_from_the_code_of_today() -> None:
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "docs_reference.py"), "--check"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr


def test_the_site_builds_strict(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(REPO / "mkdocs.yml"),
                           "-d", str(tmp_path / "site")], capture_output=True, text=True, timeout=300, env=env,
                          check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    for page in ("index.html", "first-recipe/index.html", "reference/commands/index.html",
                 "reference/recipe/index.html"):
        assert (tmp_path / "site" / page).is_file(), page
    listed = (REPO / "mkdocs.yml").read_text()
    pages = {str(p.relative_to(REPO / "docs")) for p in (REPO / "docs").rglob("*.md")}
    assert not [p for p in pages if p not in listed], "a page under docs/ is missing from mkdocs.yml's nav"
