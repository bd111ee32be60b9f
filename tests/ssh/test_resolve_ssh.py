"""Over SSH the agent starts in the login's HOME: a `~/toyllm` there (as `~/vllm` checkouts sit
in GPU boxes' homes) must be neither patched nor reported, real sshd on 127.0.0.1 (tests/sshd.py)."""

from __future__ import annotations

import pwd
import socket
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


def test_a_launch_whose_pythonpath_holds_another_copy_is_not_started_over_ssh(testbed: Testbed, tmp_path: Path) -> None:
    """The server's environment decides over SSH too: a launch whose PYTHONPATH brings another
    toyllm fails before it starts, naming both files; the patch itself lands where the host's
    interpreter loads it."""
    import json

    from tests.sshd import free_port

    tb = testbed
    server = tb.fleet.servers[0]
    env = tb.add("gpu-pp", server)
    tb.fleet.write_known_hosts(tb.known_hosts, [server])
    other = tmp_path / "src"
    shutil.copytree(TOYLLM / "toyllm", other / "toyllm")
    port = free_port()
    recipe = tmp_path / "serve.yaml"
    recipe.write_text(json.dumps({"name": "serve_toy", "steps": [
        {"name": "eagle3-whitelist", "patch": {
            "package": "toyllm", "modules": ["toyllm.config.speculative"],
            "edit": {"list_insert": {"names": ["eagle3_target_supported"], "within": "SpeculativeConfig._verify_args",
                                     "values": ["kimi_k2"], "after": "afmoe"}}},
         "verify": {"import": ["toyllm.config.speculative"]}},
        {"name": "serve", "launch": {
            "command": ["python", "-m", "http.server", str(port), "--bind", "127.0.0.1"],
            "env": {"PYTHONPATH": str(other)},
            "health": {"url": f"http://127.0.0.1:{port}/", "timeout_s": 20, "interval_s": 0.2}}},
    ]}))
    inventory = str(tb.inventory())
    try:
        applied = tb.run("apply", str(recipe), "-i", inventory, "--json")
        assert applied.returncode == 1, applied
        patch, serve = applied.hosts()["gpu-pp"]["steps"]
        assert patch["status"] == "changed" and patch["file"] == str(env.speculative), applied
        assert serve["status"] == "failed", serve
        assert (f"the server would import toyllm.config.speculative from {other / SPECULATIVE}; "
                f"patchkit wrote {env.speculative}") in serve["message"], serve
        assert not (env.state / "launch" / "serve.json").exists()  # nothing started
        with pytest.raises(OSError):  # and nothing listens
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
    finally:
        tb.run("rollback", str(recipe), "-i", inventory, "--force")
