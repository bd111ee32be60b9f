"""What the agent reads ahead of a check: the names a fresh import would import, read from source.

imports_ahead (host/remote/core.py) follows a checked package's modules from a check's
program and modules, through the import statements at each file's top level, and returns the
names outside the checked packages, in import order, without importing anything. A hint
only, but it must never name a module of a checked package (the warm parent would hold it) and
should not name what a fresh import would not import.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import host_agent

PACKAGE = {
    "aheadpkg/__init__.py": '"""Top.\n\nimport notinit_docstring\n"""\nimport json\nfrom . import sub\n',
    "aheadpkg/sub/__init__.py": (
        "from .leaf import thing  # a relative import, one level\n"
        "from aheadpkg.sub import other\n"
        "import colorsys as c, wave\n"
        "from fractions import (  # a comment\n    Fraction,  # why\n    gcd_is_gone as g,\n)\n"
        "try:\n    import tabnanny\nexcept ImportError:\n    pass\n"
        "def later():\n    import filecmp\n"
        "X = '''\nimport inside_single_quotes\n'''\n"
    ),
    "aheadpkg/sub/leaf.py": "from ..sub import other\nfrom .. import deep\nimport string\nthing = 1\n",
    "aheadpkg/sub/other.py": "from email import message\n",
    "aheadpkg/deep.py": '"""Unterminated docstring\nimport never_seen\n',
    "aheadpkg/unused.py": "import not_reached\n",
    "aheadmod.py": "import colorsys\n",  # a checked module that is one file, not a package folder
}


@pytest.fixture
def agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    for rel, text in PACKAGE.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [n for n in sys.modules if n.split(".")[0] in ("aheadpkg", "aheadmod")]:
        monkeypatch.delitem(sys.modules, name)
    return host_agent()


def test_a_packages_top_level_imports_are_read_in_import_order_and_nothing_else(agent: Any) -> None:
    ahead = agent.imports_ahead(["aheadpkg"], ["aheadpkg.sub"], [])
    assert ahead == ["json", "email:message", "string", "colorsys", "wave", "fractions:Fraction,gcd_is_gone"]
    assert "aheadpkg" not in {n.split(".")[0] for n in ahead}
    assert not [n for n in sys.modules if n.split(".")[0] == "aheadpkg"]  # read, never imported


def test_a_programs_imports_anywhere_are_read_and_followed_into_the_package(agent: Any) -> None:
    program = "import os\nif False:\n    from aheadpkg.sub import other\ndef f():\n    import csv\n"
    ahead = agent.imports_ahead(["aheadpkg"], [], [program])
    assert ahead[0] == "os" and "csv" in ahead and "email:message" in ahead, ahead
    assert agent.imports_ahead(["aheadpkg"], [], ["this is not python ("]) == []


def test_without_the_package_among_the_checked_ones_its_modules_are_names_to_import(agent: Any) -> None:
    assert agent.imports_ahead([], ["aheadpkg.sub"], []) == ["aheadpkg.sub"]
    assert agent.imports_ahead(["aheadmod"], ["aheadmod"], ["import aheadmod, json"]) == ["json"]


def test_a_file_changed_since_it_was_read_is_read_again(agent: Any, tmp_path: Path) -> None:
    assert "shelve" not in agent.imports_ahead(["aheadpkg"], ["aheadpkg.sub.other"], [])
    other = tmp_path / "aheadpkg" / "sub" / "other.py"
    other.write_text("import shelve\n" + other.read_text() + "\n")  # another size: another signature
    assert "shelve" in agent.imports_ahead(["aheadpkg"], ["aheadpkg.sub.other"], [])
