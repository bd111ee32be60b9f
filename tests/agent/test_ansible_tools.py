"""The real Ansible tools on the patchkit.fleet collection: `ansible-doc` renders the module, the
example playbook passes `--syntax-check`, `ansible-galaxy` builds the collection (what `make
collection` runs). Subprocesses of ansible-core (seconds each), so not in the pure tier.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def test_ansible_doc_renders_the_module(tmp_path: Path) -> None:
    env = ansible_env(tmp_path)
    assert (BIN / "ansible-doc").is_file(), "ansible-doc is missing: `make setup` installs ansible-core (test extras)"
    proc = subprocess.run([str(BIN / "ansible-doc"), "patchkit.fleet.patchkit"], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    out = proc.stdout
    assert "MODULE patchkit.fleet.patchkit" in out
    listed = set(re.findall(r"^([-=]) (\w+)", out.split("RETURN VALUES")[0], re.MULTILINE))
    assert ("=", "recipe") in listed, out  # `=`: required
    for option in ("state", "steps", "vars", "python", "state_dir", "executable", "remote_src", "files"):
        assert ("-", option) in listed, (option, out)
    assert "rolled_back" in out and "This module has a corresponding action plugin" in out
    assert "EXAMPLES:" in out and "RETURN VALUES:" in out


def ansible_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    (tmp_path / "ansible.cfg").write_text("")
    env.update(ANSIBLE_COLLECTIONS_PATH=str(REPO), ANSIBLE_HOME=str(tmp_path / "ansible-home"), HOME=str(tmp_path),
               ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(tmp_path / "t"))
    return env


def test_the_example_playbook_is_a_valid_playbook(tmp_path: Path) -> None:
    example = REPO / "examples" / "ansible"
    proc = subprocess.run([str(BIN / "ansible-playbook"), "--syntax-check", "-i", str(example / "hosts.ini"),
                           str(example / "site.yml")], capture_output=True, text=True, env=ansible_env(tmp_path),
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[WARNING]" not in proc.stderr, proc.stderr


def test_the_collection_builds_with_its_plugins_and_no_caches(tmp_path: Path) -> None:
    """What `make collection` runs."""
    proc = subprocess.run([str(BIN / "ansible-galaxy"), "collection", "build", str(REPO / "ansible_collections" / "patchkit"
                           / "fleet"), "--output-path", str(tmp_path)], capture_output=True, text=True,
                          env=ansible_env(tmp_path), timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (tarball,) = tmp_path.glob("patchkit-fleet-*.tar.gz")
    with tarfile.open(tarball) as archive:
        names = set(archive.getnames())
    assert {"plugins/modules/patchkit.py", "plugins/action/patchkit.py", "plugins/module_utils/patchkit_cli.py",
            "plugins/plugin_utils/recipe_bundle.py", "README.md", "meta/runtime.yml"} <= names, names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


