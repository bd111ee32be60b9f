"""Ansible inventories as patchkit's: the JSON of `ansible-inventory --list`, mapped. Pure, no I/O.

`hosts_from_ansible_json(data)` takes that JSON (a dict) and gives an `Inventory`: every host,
every group (under its own name, for `-l` patterns; `all` is implicit), and per host its
connection and variables. `host_from_ansible_vars(name, hostvars)` maps one host's variables.
The Ansible collection's action plugin hands patchkit the task's host as a one-host document
of this JSON, so a playbook task and `patchkit -i` of the same inventory map it alike.

The variables Ansible uses to reach a host map to a host's keys (its own, or its scheme's options):

    ansible_host (ansible_ssh_host)            address (or the container / pod name)
    ansible_port (ansible_ssh_port)            port
    ansible_user (ansible_ssh_user)            user
    ansible_python_interpreter                 python ("auto..." leaves patchkit's default)
    ansible_become                             become (only to root, with sudo)
    ansible_ssh_private_key_file               identity_file (ansible_private_key_file too)
    ansible_connection                         local | ssh (smart, paramiko) | docker | podman | kubectl
    ansible_kubectl_{namespace,pod,container,kubeconfig,context}   the pod's address and kubectl's flags

patchkit's own host settings that Ansible has no variable for are written `patchkit_FIELD`
(`patchkit_state_dir`, and every transport option but those above: `patchkit_ssh_client`,
`patchkit_known_hosts`, `patchkit_engine`, ...).
Any other `ansible_*` variable is Ansible's own (the prefix is reserved for it): not a recipe
variable; the mapping notes the ones that change how a host is reached (`ansible_ssh_common_args`,
passwords), since patchkit does not use them. Every other variable becomes a host variable
(`HostSpec.vars`), for the recipe's `{{ }}` templates.

`ansible-inventory --list` has merged group_vars/ and host_vars/ into `_meta.hostvars` already;
groups that still carry `vars` (the `--export` form, an inventory script's own JSON) are merged
here the way Ansible does: `all` first, then parents before children, then by name; the host's
own variables last.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from patchkit.base.errors import UsageError
from patchkit.fleet.inventory import HostSpec, Inventory, too_deep
from patchkit.fleet.reach import option_keys

# ansible_connection values and the patchkit scheme each reaches the host by.
_CONNECTIONS = {
    "local": "local", "ansible.builtin.local": "local",
    "ssh": "ssh", "smart": "ssh", "paramiko": "ssh", "paramiko_ssh": "ssh",
    "ansible.builtin.ssh": "ssh", "ansible.builtin.paramiko_ssh": "ssh",
    "docker": "docker", "community.docker.docker": "docker", "community.general.docker": "docker",
    "podman": "podman", "containers.podman.podman": "podman",
    "kubectl": "k8s", "kubernetes.core.kubectl": "k8s", "community.kubernetes.kubectl": "k8s",
}

# Ansible's own variables patchkit reads (everything else with the prefix is noted or ignored).
_MAPPED = {
    "ansible_host", "ansible_ssh_host", "ansible_port", "ansible_ssh_port", "ansible_user", "ansible_ssh_user",
    "ansible_python_interpreter", "ansible_become", "ansible_become_user", "ansible_become_method",
    "ansible_ssh_private_key_file", "ansible_private_key_file", "ansible_connection",
    "ansible_kubectl_namespace", "ansible_kubectl_pod", "ansible_kubectl_container",
    "ansible_kubectl_kubeconfig", "ansible_kubectl_context",
}
# Unread, but they change how Ansible reaches the host: worth a note (patchkit reads ~/.ssh/config).
_NOTED = re.compile(r"^ansible_(ssh_common_args|ssh_extra_args|ssh_args|password|ssh_pass|become_password|"
                    r"become_pass|sudo_pass|ssh_executable|ssh_transfer_method|docker_extra_args|"
                    r"podman_extra_args|kubectl_extra_args)$")
# Host keys Ansible has a variable of its own for (above); python is ansible_python_interpreter.
_ANSIBLE_OWN = {"port", "become", "identity_file"}
_TRUE = {"true", "yes", "on", "1", "y", "t"}
_FALSE = {"false", "no", "off", "0", "n", "f", ""}


@dataclass
class AnsibleInventory:
    """The mapped inventory, and notes on Ansible settings patchkit does not use (shown with -v)."""

    inventory: Inventory
    notes: list[str] = field(default_factory=list)


def hosts_from_ansible_json(data: Any, source: str = "ansible-inventory --list") -> AnsibleInventory:
    """The JSON `ansible-inventory --list` prints, as a patchkit inventory. UsageError naming the
    host (and `source`) when a host cannot be mapped, e.g. an ansible_connection patchkit lacks."""
    if not isinstance(data, dict):
        raise UsageError(f"{source}: not the JSON of `ansible-inventory --list` (an object with _meta and groups)")
    meta = data.get("_meta") or {}
    hostvars = meta.get("hostvars") if isinstance(meta, dict) else None
    if not isinstance(hostvars, dict):
        hostvars = {}
    groups: dict[str, dict[str, Any]] = {}
    for name, body in data.items():
        if name == "_meta":
            continue
        if isinstance(body, list):  # a script's short form: `"group": ["host", ...]`
            body = {"hosts": body}
        if not isinstance(body, dict):
            raise UsageError(f"{source}: group {name!r} is not an object with hosts, children and vars")
        groups[name] = body
    for name, body in list(groups.items()):  # a child named but not listed (Ansible leaves out empty groups)
        for child in _names(body.get("children"), source, name, "children"):
            groups.setdefault(child, {})

    order: list[str] = list(hostvars)
    for name, body in groups.items():
        for host in _names(body.get("hosts"), source, name, "hosts"):
            if host not in hostvars and host not in order:
                order.append(host)
    try:
        depth = _depths(groups)
    except UsageError as exc:
        raise UsageError(f"{source}: {exc}") from None
    member_of = _groups_of_hosts(groups)
    hosts: dict[str, HostSpec] = {}
    notes: list[str] = []
    for host in order:
        merged: dict[str, Any] = {}
        for group in sorted(member_of.get(host, set()) | {"all"}, key=lambda g: (depth.get(g, 0), g != "all", g)):
            group_vars = groups.get(group, {}).get("vars")
            if isinstance(group_vars, dict):
                merged.update(group_vars)
        own = hostvars.get(host) or {}
        if not isinstance(own, dict):
            raise UsageError(f"{source}: _meta.hostvars.{host} is not an object of variables")
        merged.update(own)
        spec, host_notes = _host(host, merged, source)
        hosts[host] = spec
        notes.extend(host_notes)
    patchkit_groups: dict[str, list[str]] = {}
    for name, body in groups.items():
        if name == "all":  # every host already; `-l all` means it
            continue
        patchkit_groups[name] = [*_names(body.get("hosts"), source, name, "hosts"),
                                 *(c for c in _names(body.get("children"), source, name, "children") if c != "all")]
    clash = sorted(set(patchkit_groups) & set(hosts))
    if clash:
        raise UsageError(f"{source}: {clash[0]!r} is both a host and a group; patchkit's -l needs one meaning")
    if not hosts:
        raise UsageError(f"{source}: the inventory has no host")
    try:
        inventory = Inventory.model_validate({"hosts": hosts, "groups": patchkit_groups})
    except ValidationError as exc:
        raise UsageError(f"{source}: {exc.errors()[0]['msg'].removeprefix('Value error, ')}") from None
    return AnsibleInventory(inventory, notes)


def host_from_ansible_vars(name: str, hostvars: dict[str, Any], source: str = "ansible") -> HostSpec:
    """One host from its Ansible variables (group variables merged in): how to reach it, and
    its other variables as `vars`. UsageError naming the host when it cannot be mapped."""
    return _host(name, hostvars, source)[0]


def _host(name: str, hostvars: dict[str, Any], source: str) -> tuple[HostSpec, list[str]]:
    where = f"{source}: host {name}"

    def text(key: str) -> str | None:
        value = hostvars.get(key)
        if value is None:
            return None
        if not isinstance(value, (str, int)) or isinstance(value, bool):
            raise UsageError(f"{where}: {key} is {value!r}, expected a string")
        value = str(value)
        if "{{" in value or "{%" in value:
            raise UsageError(f"{where}: {key} is an Ansible template ({value!r}); patchkit does not render "
                             "Jinja: give the value itself")
        return value

    def first(*keys: str) -> str | None:
        return next((v for v in (text(k) for k in keys) if v is not None), None)

    connection = text("ansible_connection") or "ssh"
    scheme = _CONNECTIONS.get(connection)
    if scheme is None:
        known = sorted(k for k in _CONNECTIONS if "." not in k)
        raise UsageError(f"{where}: ansible_connection={connection} has no patchkit transport "
                         f"(patchkit reaches hosts by: {', '.join(known)})")
    fields: dict[str, Any] = {"name": name}
    target = first("ansible_host", "ansible_ssh_host")
    if scheme == "local":
        fields["address"] = "local"
    elif scheme == "ssh":
        if target is not None:
            fields["address"] = target
    elif scheme in ("docker", "podman"):
        fields["address"] = f"{scheme}://{target or name}"
    else:  # kubectl: the pod is ansible_kubectl_pod, else the host's name (as the plugin reads it)
        pod = first("ansible_kubectl_pod", "ansible_host") or name
        namespace = text("ansible_kubectl_namespace") or "default"
        container = text("ansible_kubectl_container")
        fields["address"] = f"k8s://{namespace}/{pod}" + (f"/{container}" if container else "")
        for key, wanted in (("ansible_kubectl_kubeconfig", "kubeconfig"), ("ansible_kubectl_context", "context")):
            if text(key) is not None:
                fields[wanted] = text(key)
    port = first("ansible_port", "ansible_ssh_port")
    if port is not None and scheme == "ssh":
        if not port.isdigit():
            raise UsageError(f"{where}: ansible_port is {port!r}, expected a port number")
        fields["port"] = int(port)
    user = first("ansible_user", "ansible_ssh_user")
    if user is not None and scheme != "k8s":  # kubectl exec has no user
        fields["user"] = user
    python = text("ansible_python_interpreter")
    if python is not None and not python.startswith("auto"):  # auto, auto_silent, auto_legacy: discovery
        fields["python"] = python
    key_file = first("ansible_ssh_private_key_file", "ansible_private_key_file")
    if key_file is not None:
        fields["identity_file"] = key_file
    if "ansible_become" in hostvars:
        fields["become"] = _boolean(hostvars["ansible_become"], f"{where}: ansible_become")
    if fields.get("become"):
        become_user = text("ansible_become_user") or "root"
        method = text("ansible_become_method") or "sudo"
        if become_user != "root" or method != "sudo":
            raise UsageError(f"{where}: ansible_become_user={become_user} with ansible_become_method={method}; "
                             "patchkit becomes root with sudo only")
    for setting in patchkit_fields():
        if f"patchkit_{setting}" in hostvars:
            fields[setting] = hostvars[f"patchkit_{setting}"]
    own = {f"patchkit_{setting}" for setting in patchkit_fields()}
    fields["vars"] = {k: v for k, v in hostvars.items() if not k.startswith("ansible_") and k not in own}
    notes = [f"{where}: {k} is not used by patchkit (set SSH options in ~/.ssh/config; keys, not passwords)"
             for k in sorted(hostvars) if _NOTED.match(k)]
    try:
        return HostSpec.model_validate(fields), notes
    except ValidationError as exc:
        problem = exc.errors()[0]
        raise UsageError(f"{where}: {'.'.join(map(str, problem['loc']))}: {problem['msg']}") from None


def patchkit_fields() -> list[str]:
    """The host keys an Ansible inventory sets as patchkit_FIELD (they are not recipe variables):
    state_dir, and every scheme's options Ansible has no variable for."""
    return ["state_dir", *(key for key in option_keys() if key not in _ANSIBLE_OWN)]


def _boolean(value: Any, where: str) -> bool:
    """Ansible's truth of a value (`ansible_become=true` in INI is the string 'true')."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (str, int)) and str(value).strip().lower() in _TRUE | _FALSE:
        return str(value).strip().lower() in _TRUE
    raise UsageError(f"{where} is {value!r}, expected true or false")


def _names(value: Any, source: str, group: str, key: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{source}: group {group!r}: {key} must be a list of names")
    return value


def _depths(groups: dict[str, dict[str, Any]]) -> dict[str, int]:
    """How deep each group sits under `all` (its longest path of parents): parents' variables
    apply first, a child's win."""
    parents: dict[str, set[str]] = {}
    for name, body in groups.items():
        for child in body.get("children") or []:
            parents.setdefault(child, set()).add(name)
    depth: dict[str, int] = {}

    def of(group: str, trail: frozenset[str] = frozenset()) -> int:
        if group in depth:
            return depth[group]
        too_deep(group, trail)
        up = [p for p in parents.get(group, set()) if p not in trail]
        found = 0 if group == "all" else 1 + max((of(p, trail | {group}) for p in up if p != "all"), default=0)
        depth[group] = found
        return found

    for group in groups:
        of(group)
    return depth


def _groups_of_hosts(groups: dict[str, dict[str, Any]]) -> dict[str, set[str]]:
    """host -> every group it is in, directly or through a child group."""
    direct: dict[str, set[str]] = {}
    parents: dict[str, set[str]] = {}
    for name, body in groups.items():
        for host in body.get("hosts") or []:
            direct.setdefault(host, set()).add(name)
        for child in body.get("children") or []:
            parents.setdefault(child, set()).add(name)
    out: dict[str, set[str]] = {}
    for host, found in direct.items():
        todo, seen = list(found), set()
        while todo:
            group = todo.pop()
            if group in seen:
                continue
            seen.add(group)
            todo.extend(parents.get(group, set()))
        out[host] = seen
    return out
