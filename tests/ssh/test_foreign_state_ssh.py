"""Another user's state dir over real sshd on 127.0.0.1: root's agent on the host refuses it in
one line, exit 2, nothing written there or in the package (tests/agent/test_foreign_state.py has
the planted records, backups and launch records on the local transport)."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

from tests.helpers import tree_listing
from tests.sshd import Fleet, Testbed, fleet, login_users, sshd_root, testbed  # noqa: F401 - pytest fixtures
from tests.sshd import sha256


def test_another_users_state_dir_over_ssh_is_refused_with_nothing_written(
        testbed: Testbed, login_users: dict[str, str]) -> None:  # noqa: F811
    plain = pwd.getpwnam(login_users["plain"])
    host = testbed.add("foreign-state", testbed.fleet.servers[0])
    testbed.fleet.write_known_hosts(testbed.known_hosts, testbed.fleet.servers[:1])
    state = testbed.root / "shared" / "state"
    (state / "runs").mkdir(parents=True)
    for here in (state, state / "runs"):
        here.chmod(0o755)
        os.chown(here, plain.pw_uid, plain.pw_gid)
    inventory = testbed.inventory(foreign_state={"state_dir": str(state)})
    before, package = tree_listing(state), sha256(host.speculative)
    for command in ("apply", "rollback"):
        result = testbed.run(command, str(testbed.recipe()), "-i", str(inventory))
        assert result.returncode == 2, result
        lines = [line for line in result.stdout.splitlines() if f"state folder {state} belongs to {plain.pw_name}"
                 in line]
        assert len(lines) == 1 and "Traceback" not in result.stdout + result.stderr, result
        assert tree_listing(state) == before
        assert sha256(host.speculative) == package

