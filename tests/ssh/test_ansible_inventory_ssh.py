"""An Ansible inventory drives a real sshd fleet: an INI file with
group_vars/ and host_vars/, read by the real `ansible-inventory`; each host's interpreter from
its host_vars, a recipe variable from group_vars overridden by one host's host_vars, and
Ansible's `-l` patterns. Host keys are checked from the temp HOME's ~/.ssh/known_hosts (the
inventory names none), or from the UserKnownHostsFile its ~/.ssh/config names."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ssh.test_openssh_transport import OpenSSHBed
from tests.sshd import Fleet, Testbed, fleet, sshd_root, testbed  # noqa: F401 - pytest fixtures

RECIPE = """\
name: ssh_fleet
vars: {model: llama}
steps:
  - name: eagle3-whitelist
    patch:
      package: toyllm
      modules: [toyllm.config.speculative]
      edit:
        list_insert:
          names: [eagle3_target_supported, aux_hidden_states_supported]
          within: SpeculativeConfig._verify_args
          values: ["{{ model }}"]
    verify:
      import: [toyllm.config.speculative]
"""


def ansible_fleet(testbed: Testbed, count: int = 3) -> tuple[Path, Path]:  # noqa: F811
    """gpu-1..N on the fleet's sshd, in hosts.ini; (inventory file, recipe)."""
    hosts = [testbed.add(f"gpu-{i + 1}", testbed.fleet.servers[i]) for i in range(count)]
    testbed.fleet.write_known_hosts(testbed.home / ".ssh" / "known_hosts", testbed.fleet.servers[:count])
    folder = testbed.root / "ansible"
    (folder / "group_vars").mkdir(parents=True)
    (folder / "host_vars").mkdir()
    lines = ["[gpu]"] + [f"{h.name} ansible_host=127.0.0.1 ansible_port={h.server.port}" for h in hosts if h.server]
    lines += ["", "[gpu:vars]", "ansible_user=root", f"ansible_ssh_private_key_file={testbed.fleet.client_key}", ""]
    (folder / "hosts.ini").write_text("\n".join(lines))
    (folder / "group_vars" / "gpu.yml").write_text("model: kimi_k2\n")
    for h in hosts:  # each host its own interpreter and journal: from its host_vars
        (folder / "host_vars" / f"{h.name}.yml").write_text(
            f"ansible_python_interpreter: {h.python}\npatchkit_state_dir: {h.state}\n"
            + ("model: deepseek_v3\n" if h.name == "gpu-3" else ""))
    recipe = testbed.root / "recipe.yaml"
    recipe.write_text(RECIPE)
    return folder / "hosts.ini", recipe


def test_an_ini_inventory_with_group_and_host_vars_drives_the_fleet(testbed: Testbed) -> None:  # noqa: F811
    inventory, recipe = ansible_fleet(testbed)
    before = testbed.hosts["gpu-2"].speculative.read_text()

    applied = testbed.run("apply", str(recipe), "-i", str(inventory), "-l", "gpu-*:!gpu-2", "--json")
    assert applied.returncode == 0, applied
    hosts = applied.hosts()
    assert list(hosts) == ["gpu-1", "gpu-3"], applied
    for name in ("gpu-1", "gpu-3"):
        assert hosts[name]["status"] == "changed" and hosts[name]["transport"] == "ssh/asyncssh", hosts[name]
        assert hosts[name]["address"] == "127.0.0.1"
        # its own interpreter (host_vars): the one whose .pth reaches this host's toyllm copy
        assert testbed.hosts[name].runs()[0]["host"] == name  # journaled in its own patchkit_state_dir
    assert '"kimi_k2"' in testbed.hosts["gpu-1"].speculative.read_text()  # group_vars
    third = testbed.hosts["gpu-3"].speculative.read_text()
    assert '"deepseek_v3"' in third and '"kimi_k2"' not in third  # host_vars win over group_vars
    assert testbed.hosts["gpu-2"].speculative.read_text() == before  # left out by the pattern
    assert testbed.hosts["gpu-2"].runs() == []

    plan = testbed.run("plan", str(recipe), "-i", str(inventory), "-v")
    assert plan.returncode == 0, plan
    assert "# via gpu-2: ssh/asyncssh 127.0.0.1" in plan.stdout, plan  # -v: how each host is reached
    assert '+                "kimi_k2",' in plan.stdout or "kimi_k2" in plan.stdout, plan


@pytest.mark.parametrize("client", ["asyncssh", "openssh"])
def test_user_known_hosts_file_of_ssh_config_is_honoured(testbed: Testbed, client: str) -> None:  # noqa: F811
    """The inventory names no known_hosts; ~/.ssh/config's UserKnownHostsFile holds the key and
    ~/.ssh/known_hosts does not: both clients connect, and an empty such file is refused. (The
    system ssh finds ~ through passwd, not HOME: it runs as the isolated `ssh` reading only the
    temp HOME's config.)"""
    host = testbed.add("kh-1", testbed.fleet.servers[0])
    config_file = testbed.home / ".ssh" / "fleet_known_hosts"
    testbed.fleet.write_known_hosts(config_file, testbed.fleet.servers[:1])
    # `~` is HOME for asyncssh, the passwd entry's home for OpenSSH (as outside tests): the
    # system ssh gets the file's full path.
    named = str(config_file) if client == "openssh" else "~/.ssh/fleet_known_hosts"
    (testbed.home / ".ssh" / "config").write_text(f"Host 127.0.0.1\n  UserKnownHostsFile {named}\n")
    (testbed.home / ".ssh" / "known_hosts").write_text("")
    inventory = testbed.inventory(kh_1={"known_hosts": None, "ssh_client": client})
    recipe = testbed.recipe()
    run = OpenSSHBed(testbed).run if client == "openssh" else testbed.run

    planned = run("plan", str(recipe), "-i", str(inventory), "--json")
    assert planned.returncode == 0, planned.hosts()["kh-1"]["message"]
    assert planned.hosts()["kh-1"]["steps"][0]["status"] == "changed", planned

    config_file.write_text("")  # the config's file does not know the key: refused, whatever else holds it
    (testbed.home / ".ssh" / "known_hosts").write_text(testbed.fleet.servers[0].known_hosts_line())
    refused = run("plan", str(recipe), "-i", str(inventory), "--json")
    assert refused.returncode == 1, refused
    message = refused.hosts()["kh-1"]["message"]
    assert "fleet_known_hosts" in message and "host key" in message.lower(), message
    assert host.runs() == []
