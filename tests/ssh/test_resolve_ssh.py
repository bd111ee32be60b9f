"""Over SSH the agent starts in the login's HOME: a `~/toyllm` there (as `~/vllm` checkouts sit
in GPU boxes' homes) must be neither patched nor reported, real sshd on 127.0.0.1 (tests/sshd.py)."""

from __future__ import annotations

import pwd
import shutil
from pathlib import Path

import pytest

from tests.sshd import (  # noqa: F401 - pytest fixtures
    SPECULATIVE,
    TOYLLM,
    Testbed,
    _login_users,
    fleet,
    sha256,
    sshd_root,
    testbed,
)

pytestmark = pytest.mark.timeout(120)

SYSTEM_PYTHON = "/usr/bin/python3"  # root's pyenv lives in /root (0700): another login cannot run it
LOGIN = "pk-test-homecopy"


@pytest.fixture(scope="session")
def home_checkout_user(sshd_root: Path) -> str:
    """A login whose HOME holds a `toyllm/` checkout (removed with the user at the end)."""
    _login_users(LOGIN)
    return LOGIN


def test_a_copy_in_the_logins_home_is_neither_patched_nor_imported(testbed: Testbed,
                                                                     home_checkout_user: str) -> None:
    tb = testbed
    user = pwd.getpwnam(home_checkout_user)
    checkout = Path(user.pw_dir) / "toyllm"
    shutil.rmtree(checkout, ignore_errors=True)
    shutil.copytree(TOYLLM / "toyllm", checkout)
    for path in [checkout, *checkout.rglob("*")]:
        shutil.chown(path, user.pw_uid, user.pw_gid)
    home_bytes = (Path(user.pw_dir) / SPECULATIVE).read_bytes()
    server = tb.fleet.servers[0]
    env = tb.add("gpu-home", server, base_python=SYSTEM_PYTHON, owner=home_checkout_user)
    tb.fleet.write_known_hosts(tb.known_hosts, [server])
    inventory = str(tb.inventory(gpu_home={"user": home_checkout_user}))
    recipe = str(tb.recipe())
    try:
        applied = tb.run("apply", recipe, "-i", inventory, "--json")
        assert applied.returncode == 0, applied
        done = applied.hosts()["gpu-home"]["steps"][0]
        assert done["status"] == "changed" and done["file"] == str(env.speculative), applied
        assert "verified" in done["message"]
        assert '"kimi_k2",' in env.speculative.read_text()
        assert (Path(user.pw_dir) / SPECULATIVE).read_bytes() == home_bytes  # HOME's copy untouched

        status = tb.run("status", recipe, "-i", inventory, "--json")
        assert status.returncode == 0, status
        assert [s["status"] for s in status.hosts()["gpu-home"]["steps"]] == ["applied"], status

        original = sha256(TOYLLM / SPECULATIVE)
        undo = tb.run("rollback", recipe, "-i", inventory, "--json")
        assert undo.returncode == 0, undo
        assert sha256(env.speculative) == original
        assert (Path(user.pw_dir) / SPECULATIVE).read_bytes() == home_bytes
    finally:
        shutil.rmtree(checkout, ignore_errors=True)
