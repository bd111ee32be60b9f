"""The JSON of `ansible-inventory --list` as a patchkit inventory (ansible_inventory.py): pure."""

from __future__ import annotations

import pytest

from patchkit.fleet.ansible import host_from_ansible_vars, hosts_from_ansible_json
from patchkit.base.errors import UsageError
from patchkit.host.transport.k8s import K8sOptions
from patchkit.host.transport.ssh_scheme import SSHOptions

LISTED = {
    "_meta": {"hostvars": {
        "gpu-1": {"ansible_host": "10.0.0.1", "ansible_port": 2222, "ansible_user": "ops",
                  "ansible_python_interpreter": "/opt/ml/bin/python", "ansible_become": "true",
                  "ansible_ssh_private_key_file": "~/.ssh/fleet", "drafter_dest": "/models/a", "region": "eu",
                  "patchkit_state_dir": "/srv/pk", "patchkit_ssh_client": "openssh"},
        "gpu-2": {"ansible_python_interpreter": "auto_silent", "region": "eu"},
        "box": {"ansible_connection": "local"},
        "ctr": {"ansible_connection": "community.docker.docker", "ansible_host": "vllm-1", "ansible_user": "app"},
        "pod": {"ansible_connection": "kubernetes.core.kubectl", "ansible_kubectl_namespace": "ml",
                "ansible_kubectl_container": "vllm", "ansible_kubectl_context": "prod"},
    }},
    "all": {"children": ["ungrouped", "eu", "local"]},
    "eu": {"children": ["gpu"]},
    "gpu": {"hosts": ["gpu-1", "gpu-2"]},
    "local": {"hosts": ["box", "ctr", "pod"]},
}


def test_connection_variables_map_to_host_fields_and_the_rest_are_host_vars() -> None:
    hosts = hosts_from_ansible_json(LISTED).inventory.resolved()
    one = hosts["gpu-1"]
    ssh = one.options_as(SSHOptions)
    assert (one.address, ssh.port, one.user, one.python, ssh.become, ssh.identity_file) == (
        "10.0.0.1", 2222, "ops", "/opt/ml/bin/python", True, "~/.ssh/fleet")
    assert one.vars == {"drafter_dest": "/models/a", "region": "eu"}  # no ansible_* or patchkit_* among them
    assert (one.state_dir, ssh.ssh_client) == ("/srv/pk", "openssh")
    assert hosts["gpu-2"].python is None  # auto: patchkit's own default
    assert hosts["gpu-2"].address is None and hosts["gpu-2"].scheme == "ssh"  # its name is the SSH host
    assert hosts["box"].address == "local" and hosts["box"].scheme == "local"
    assert (hosts["ctr"].address, hosts["ctr"].user) == ("docker://vllm-1", "app")
    assert (hosts["pod"].address, hosts["pod"].options_as(K8sOptions).context) == ("k8s://ml/pod/vllm", "prod")


def test_groups_keep_their_names_for_patterns_nested_included() -> None:
    inventory = hosts_from_ansible_json(LISTED).inventory
    assert "all" not in inventory.groups
    assert [h.name for h in inventory.select("eu").hosts] == ["gpu-1", "gpu-2"]  # eu -> gpu -> hosts
    assert [h.name for h in inventory.select("gpu-*:!gpu-2").hosts] == ["gpu-1"]
    assert inventory.groups["ungrouped"] == []  # named by all, left out of the JSON when empty


def test_group_vars_of_the_export_form_merge_as_ansible_orders_them() -> None:
    exported = {"_meta": {"hostvars": {"h": {"own": "host"}}},
                "all": {"children": ["parent"], "vars": {"own": "all", "a": "all", "p": "all", "c": "all"}},
                "parent": {"children": ["child"], "vars": {"p": "parent", "c": "parent"}},
                "child": {"hosts": ["h"], "vars": {"c": "child"}}}
    assert hosts_from_ansible_json(exported).inventory.resolved()["h"].vars == {
        "own": "host", "a": "all", "p": "parent", "c": "child"}


@pytest.mark.parametrize(("hostvars", "message"), [
    ({"ansible_connection": "winrm"}, "host w: ansible_connection=winrm has no patchkit transport"),
    ({"ansible_port": "ssh"}, "host w: ansible_port is 'ssh', expected a port number"),
    ({"ansible_become": "maybe"}, "host w: ansible_become is 'maybe', expected true or false"),
    ({"ansible_become": True, "ansible_become_user": "postgres"}, "patchkit becomes root with sudo only"),
    ({"ansible_python_interpreter": "{{ venv }}/bin/python"}, "is an Ansible template"),
    ({"ansible_connection": "docker", "ansible_host": "-rm"}, "host w: address"),
])
def test_a_host_that_cannot_be_mapped_is_named(hostvars: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=None) as caught:
        host_from_ansible_vars("w", hostvars, "hosts.ini")
    assert message in str(caught.value) and str(caught.value).startswith("hosts.ini: ")


def test_unused_connection_settings_are_noted_not_silently_dropped() -> None:
    mapped = hosts_from_ansible_json({"_meta": {"hostvars": {"h": {"ansible_ssh_common_args": "-J bastion"}}}})
    assert mapped.notes == [("ansible-inventory --list: host h: ansible_ssh_common_args is not used by patchkit "
                             "(set SSH options in ~/.ssh/config; keys, not passwords)")]


@pytest.mark.parametrize(("data", "message"), [
    ([], "not the JSON of `ansible-inventory --list`"),
    ({"_meta": {"hostvars": {}}, "all": {"children": ["ungrouped"]}}, "the inventory has no host"),
    ({"_meta": {"hostvars": {"g": {}}}, "g": {"hosts": ["g"]}}, "'g' is both a host and a group"),
    ({"_meta": {}, "g": {"hosts": "h"}}, "group 'g': hosts must be a list of names"),
])
def test_json_that_is_not_an_inventory_is_refused(data: object, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        hosts_from_ansible_json(data, "inv.json")
    assert message in str(caught.value)
