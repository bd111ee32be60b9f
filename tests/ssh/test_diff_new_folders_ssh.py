"""A `diff` step adding a file in folders the package lacks, over real sshd on 127.0.0.1: the
folders are made on the host, journaled, and removed again by rollback (tests/agent/
test_diff_new_folders.py has the local transport's cases)."""

from __future__ import annotations

import difflib

from tests.sshd import Fleet, Testbed, fleet, sshd_root, testbed  # noqa: F401 - pytest fixtures


def test_a_diff_adding_new_folders_over_ssh_applies_and_rolls_back(testbed: Testbed) -> None:  # noqa: F811
    host = testbed.add("newdirs", testbed.fleet.servers[0])
    testbed.fleet.write_known_hosts(testbed.known_hosts, testbed.fleet.servers[:1])
    package = host.pkgs / "toyllm"
    (testbed.root / "fix.patch").write_text("".join(difflib.unified_diff(
        [], ["VALUE = 42\n"], "/dev/null", "b/toyllm/newdir/sub/x.py")))
    recipe = testbed.root / "fix.yaml"
    recipe.write_text("name: fix\nsteps:\n  - name: new-module\n    patch:\n      package: toyllm\n"
                      "      edit: {diff: {file: fix.patch}}\n    verify: {import: [toyllm.newdir.sub.x]}\n")
    inventory = testbed.inventory()

    applied = testbed.run("apply", str(recipe), "-i", str(inventory), "--json")
    assert applied.returncode == 0, applied
    [step] = applied.hosts()["newdirs"]["steps"]
    assert step["status"] == "changed", step
    assert step["files"][0]["created_dirs"] == [str(package / "newdir" / "sub"), str(package / "newdir")]
    assert (package / "newdir" / "sub" / "x.py").read_text() == "VALUE = 42\n"
    status = testbed.run("status", str(recipe), "-i", str(inventory), "--json")
    assert status.returncode == 0 and status.hosts()["newdirs"]["steps"][0]["status"] == "applied", status

    undone = testbed.run("rollback", str(recipe), "-i", str(inventory), "--json")
    assert undone.returncode == 0, undone
    assert not (package / "newdir").exists()
