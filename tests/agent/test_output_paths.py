"""Where a command writes for the user, through the real CLI: `patchkit test --html/--markdown`
and `capture -o` refuse a path they cannot write before any release is fetched or any host is
read (one line, exit 2), and the matrix's table shows a recipe's hidden characters marked.
(`plan --html/--markdown`: tests/agent/test_review.py.)"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from tests.agent.test_audit_capture_abuse import edited, patchkit  # noqa: F401 - the fixture
from tests.agent.test_release_test import build_wheel, pip_sees_only, write_recipe
from tests.helpers import run_patchkit


@pytest.mark.parametrize(("flag", "path", "why"), [
    ("--html", "/", "--html /: names a folder"),
    ("--markdown", "{tmp}", "is a folder"),
    ("--html", "{tmp}/link.html", "is a symlink"),
])
def test_patchkit_test_refuses_an_output_path_before_fetching_anything(tmp_path: Path, flag: str, path: str,
                                                                       why: str) -> None:
    cache = tmp_path / "cache"
    (tmp_path / "link.html").symlink_to(tmp_path / "victim.html")
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "PATCHKIT_CACHE_DIR": str(cache)}
    result = run_patchkit("test", write_recipe(tmp_path, ">=0.10.1,<0.22"), flag, path.format(tmp=tmp_path), env=env)
    assert result.returncode == 2, result
    assert why.format(tmp=tmp_path) in result.stderr and result.stderr.count("\n") == 1, result
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert not cache.exists() and not (tmp_path / "victim.html").exists()  # nothing fetched, nothing written


def test_the_matrix_shows_a_releases_hidden_characters_marked(tmp_path: Path) -> None:
    """A release whose file holds a bidi override beside the edit (upstream code is not ours to trust)."""
    links = tmp_path / "links"
    links.mkdir()
    wheel = build_wheel(links, "0.16.0")
    with zipfile.ZipFile(wheel) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    rel = "toyllm/config/speculative.py"
    members[rel] = members[rel].replace(b'"afmoe",', '"afmoe",  # \u202e"kimi_k2" stays out\u2069'.encode(), 1)
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    page = tmp_path / "matrix.md"
    result = run_patchkit("test", write_recipe(tmp_path, ">=0.10.1,<0.22"), "--markdown", str(page),
                          env=pip_sees_only(links, tmp_path / "cache"), timeout=180)
    assert result.returncode == 0, result
    lines = result.stdout.splitlines()
    assert lines[0].startswith("warning: this matrix contains 2 hidden or bidirectional"), result
    assert '# <U+202E>"kimi_k2" stays out<U+2069>' in result.stdout and "\u202e" not in result.stdout
    markdown = page.read_text()
    assert "\u202e" not in markdown and "> [!WARNING]" in markdown and "<U+202E>" in markdown


def test_capture_refuses_an_existing_recipe_before_reading_the_host(edited: tuple[Path, Path, Path],  # noqa: F811
                                                                    tmp_path: Path) -> None:
    python, state, wheel = edited
    out = tmp_path / "out"
    out.mkdir()
    (out / "r.yaml").write_text("edited by hand\n")
    done = patchkit(python, state, "capture", "handpkg", "-o", str(out / "r.yaml"), "--wheel", str(wheel))
    assert done.returncode == 2, done
    assert f"-o {out / 'r.yaml'} already exists: remove it or pick another path" in done.stderr, done
    assert (out / "r.yaml").read_text() == "edited by hand\n" and sorted(os.listdir(out)) == ["r.yaml"]
    assert not state.exists()  # the host was never contacted: no journal folder made
