"""No third-party deprecation warning reaches the user's terminal.

cryptography 51 deprecates DSA: asyncssh's import then prints five CryptographyDeprecationWarnings
(ten lines) on stderr, and every command with `-i` imports it. Each test runs a fresh interpreter
under `-W default` (every warning shown once, as a user's PYTHONWARNINGS might ask): nothing on
stderr. The filter is narrow: the same category raised from anywhere but asyncssh, or another
category from asyncssh's modules, is still shown. `make test-newest` runs these against the newest
cryptography the bounds allow (CI's pinned one prints nothing either way).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers import REPO


def python(code: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    return subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=REPO, env=env)


@pytest.mark.parametrize("module", ["patchkit.host.transport.asyncssh_import", "patchkit.host.transport.ssh", "patchkit.cli.main"])
def test_importing_the_ssh_transport_prints_nothing(module: str) -> None:
    out = python(f"import {module}\nimport patchkit.host.transport.ssh\n")
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""


def test_the_filter_keeps_other_warnings() -> None:
    """After the import: a CryptographyDeprecationWarning from another module, and a
    DeprecationWarning attributed to an asyncssh module, still reach stderr."""
    out = python(
        "import warnings\n"
        "import patchkit.host.transport.asyncssh_import\n"
        "from cryptography.utils import CryptographyDeprecationWarning\n"
        "warnings.warn('from elsewhere', CryptographyDeprecationWarning)\n"
        "warnings.warn_explicit('from asyncssh, muted', CryptographyDeprecationWarning, 'x.py', 1, module='asyncssh.crypto.dsa')\n"
        "warnings.warn_explicit('another kind', DeprecationWarning, 'x.py', 2, module='asyncssh.crypto.dsa')\n")
    assert out.returncode == 0, out.stderr
    assert "CryptographyDeprecationWarning: from elsewhere" in out.stderr, out.stderr
    assert "DeprecationWarning: another kind" in out.stderr, out.stderr
    assert "muted" not in out.stderr, out.stderr
