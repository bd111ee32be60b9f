"""The scheme table (patchkit/host/transport/schemes.py): every scheme declares its addresses
and its options (a model whose every field is described), reads its own addresses, builds
itself from a host entry, and is reached for real by a test; every transport class is reached
by a scheme. Pure: transports are built, never started."""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import pkgutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field

import patchkit.host.transport
from patchkit.base.errors import UsageError
from patchkit.fleet import reach
from patchkit.fleet.inventory import HostSpec, Inventory, PodSelector, load_inventory
from patchkit.fleet.reach import TransportOptions, scheme_of, split_address
from patchkit.host.transport import sshhelper
from patchkit.host.transport.base import Reach
from patchkit.host.transport.docker import DockerOptions
from patchkit.host.transport.podman import PodmanOptions
from patchkit.host.transport.schemes import SCHEMES, options_reference, transport_for
from patchkit.host.transport.ssh_scheme import SSHOptions
from tests.helpers import REPO

# One address a scheme takes, and the host entries (beyond it) that choose among its transports.
EXAMPLES: dict[str, list[dict[str, object]]] = {
    "local": [{"name": "localhost"}, {"address": "local"}],
    "ssh": [{}, {"address": "gpu-1.internal"}, {"address": "gpu-1.internal", "ssh_client": "openssh"}],
    "podman": [{"address": "podman://web-1"}],
    "docker": [{"address": "docker://0123abcd"}],
    "k8s": [{"address": "k8s://serving/vllm-0/engine"}, {"address": "k8s://serving/vllm-0"}],
    "ray": [{"address": "ray://head.internal:10001/" + "0f" * 28}, {"address": "ray://auto/0f0f0f0f"},
            {"address": "ray://gcs/127.0.0.1:6379/" + "0f" * 28}],
}

# The test that reaches a host of each scheme for real (its engine, sshd, cluster): apply,
# status, rollback through the CLI. A new scheme names its own here.
REACHED_FOR_REAL: dict[str, str] = {
    "local": "tests/agent/test_apply_local.py::test_apply_changes_verifies_backs_up_and_journals_then_is_idempotent",
    "ssh": "tests/ssh/test_ssh.py::test_fleet_apply_reapply_status_rollback",
    "podman": "tests/containers/test_containers.py::test_apply_reapply_status_rollback_in_a_container[podman]",
    "docker": "tests/containers/test_containers.py::test_apply_reapply_status_rollback_in_a_container[docker]",
    "k8s": "tests/containers/test_containers.py::test_pods_through_a_fake_kubectl",
    "ray": "tests/ray/test_ray_apply.py::test_apply_reapply_status_and_rollback_on_every_node",
}


def scheme_problems(schemes: dict[str, Any], examples: dict[str, Any], reached: dict[str, str]) -> list[str]:
    """What a scheme lacks: an options model (a TransportOptions with a docstring) whose every
    field has a default and a description, keys that mean one thing in every scheme and are not
    a host's own, an example address, and a test that reaches one of its hosts for real."""
    problems: list[str] = []
    own = set(HostSpec.model_fields)
    seen: dict[str, tuple[str, object]] = {}
    for name, scheme in schemes.items():
        model = getattr(scheme, "options", None)
        if not (isinstance(model, type) and issubclass(model, TransportOptions)):
            problems.append(f"{name}: no options model (a TransportOptions subclass)")
            continue
        if not (model.__doc__ or "").strip() or model.__doc__ == TransportOptions.__doc__:
            problems.append(f"{name}: its options model {model.__name__} has no docstring")
        for key, field in model.model_fields.items():
            if not (field.description or "").strip():
                problems.append(f"{name}: option {key} has no description")
            if field.is_required():
                problems.append(f"{name}: option {key} has no default")
            if key in own:
                problems.append(f"{name}: option {key} is a host's own key")
            first = seen.setdefault(key, (name, field.annotation))
            if first[1] != field.annotation:
                problems.append(f"{name}: option {key} is {field.annotation}, but {first[1]} in {first[0]}")
        if not examples.get(name):
            problems.append(f"{name}: no example address (EXAMPLES)")
        test = reached.get(name)
        if test is None or not _test_exists(test):
            problems.append(f"{name}: no test that reaches one of its hosts for real (REACHED_FOR_REAL: {test})")
    return problems


def _test_exists(node: str) -> bool:
    path, _, function = node.partition("::")
    function, _, param = function.partition("[")
    file = REPO / path
    if not file.is_file():
        return False
    text = file.read_text()
    defined = {n.name for n in ast.walk(ast.parse(text)) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return function in defined and param.rstrip("]") in text


def transport_classes() -> set[type]:
    """Every class defined in patchkit/host/transport/ that starts processes on a host (`spawn`)."""
    found: set[type] = set()
    for module in pkgutil.iter_modules(patchkit.host.transport.__path__):
        loaded = importlib.import_module(f"patchkit.host.transport.{module.name}")
        for _, cls in inspect.getmembers(loaded, inspect.isclass):
            protocol = getattr(cls, "_is_protocol", False)
            if cls.__module__ == loaded.__name__ and not protocol and inspect.iscoroutinefunction(getattr(cls, "spawn", None)):
                found.add(cls)
    return found


def test_every_scheme_has_described_options_an_example_a_real_test_and_a_transport() -> None:
    assert scheme_problems(SCHEMES, EXAMPLES, REACHED_FOR_REAL) == []
    assert set(EXAMPLES) == set(SCHEMES), "a scheme without an example address here is not tested"
    for scheme, hosts in EXAMPLES.items():
        for entry in hosts:
            host = HostSpec.model_validate({"name": "h", **entry})
            assert host.scheme == scheme == scheme_of(host.address, host.name)
            transport = transport_for(host, Reach())
            assert inspect.iscoroutinefunction(transport.spawn) and isinstance(transport.exec_requests, int)


def test_every_transport_is_reached_by_a_scheme(monkeypatch: pytest.MonkeyPatch) -> None:
    def reached() -> set[type]:
        return {type(transport_for(HostSpec.model_validate({"name": "h", **entry}), Reach()))
                for hosts in EXAMPLES.values() for entry in hosts}

    alone = reached()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with ours, theirs:  # as while the SSH helper runs: its handle (no message is sent here)
        monkeypatch.setattr(sshhelper, "_helper", sshhelper.Helper(os.getpid(), ours))
        with_helper = reached()
    assert sshhelper.HelperTransport in with_helper - alone
    assert transport_classes() == alone | with_helper


@pytest.mark.parametrize(("address", "problem"), [
    ("nope://c1", "unknown scheme 'nope://'; an address is one of: `local` (this machine)"),
    ("  ", "address is empty: leave it out"),
    ("ssh://gpu-1", "unknown scheme 'ssh://'"),  # bare schemes are never written with ://
    ("local://x", "unknown scheme 'local://'"),
    ("podman://", "want podman://CONTAINER, a container name or id"),
    ("docker://a b", "want docker://CONTAINER"),
    ("k8s://onlyns", "want k8s://NAMESPACE/POD or k8s://NAMESPACE/POD/CONTAINER"),
    ("k8s://ns/Pod_1", "pod 'Pod_1' is not a Kubernetes name"),
    ("ray://0f0f0f0f", "want ray://HEAD:PORT/NODE_ID, ray://auto/NODE_ID or ray://gcs/HOST:PORT/NODE_ID"),
    ("ray://head/0f0f0f0f", "cluster address 'ray://head': want ray://HOST:PORT"),
    ("ray://auto/NODE-1", "node id 'NODE-1' is not a Ray node id"),
])
def test_each_scheme_words_its_own_refusal(address: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        HostSpec(address=address)


def test_no_address_is_the_ssh_host_of_the_name_never_silently_local() -> None:
    """As Ansible does, a bare name is an SSH host (through ~/.ssh/config); only `address:
    local`, or the name localhost without an address, is this machine."""
    from patchkit.run.runner import transport_of
    from patchkit.host.transport.ssh_common import SSHTarget

    gpu = HostSpec(name="gpu-7", python="/opt/py")
    assert gpu.scheme == "ssh" and transport_of(gpu) == ("ssh/asyncssh", "gpu-7")
    assert SSHTarget.from_host(gpu).address == "gpu-7"  # the name is what ssh_config resolves
    assert HostSpec(name="localhost").scheme == "local"
    assert HostSpec(name="localhost", address="127.0.0.1").scheme == "ssh"  # an address says how
    assert HostSpec(name="local").scheme == "ssh"  # the old implicit default is gone


def test_the_inventory_only_splits() -> None:
    assert split_address("k8s://ns/pod") == ("k8s", "ns/pod")
    assert split_address("gpu-1") == (None, "gpu-1") and split_address(None) == (None, "")


def test_a_transport_module_is_imported_only_for_its_scheme() -> None:
    probe = ("import sys; from patchkit.fleet.inventory import HostSpec; from patchkit.run.runner import transport_for; "
             "transport_for(HostSpec(name='h', address=sys.argv[1])); "
             "print(' '.join(m for m in ('asyncssh', 'patchkit.host.transport.container', 'patchkit.host.transport.openssh', "
             "'patchkit.host.transport.raytransport', 'ray') "
             "if m in sys.modules))")
    loaded = {address: subprocess.run([sys.executable, "-c", probe, address], capture_output=True, text=True,
                                      check=True).stdout.split()
              for address in ("local", "podman://web", "gpu-1", "ray://auto/0f0f0f0f")}
    assert loaded == {"local": [], "podman://web": ["patchkit.host.transport.container"], "gpu-1": ["asyncssh"],
                      "ray://auto/0f0f0f0f": ["patchkit.host.transport.raytransport"]}  # Ray itself: once a host starts


def test_the_guard_names_what_a_scheme_lacks() -> None:
    """A scheme without a described options model, an example or a real test does not pass."""

    class Undescribed(TransportOptions):
        flag: bool = False

    class Clashing(TransportOptions):
        """A made-up scheme's options."""

        port: str | None = Field(default=None, description="a port, as text")  # ssh's is an integer
        python: str | None = Field(default=None, description="an interpreter")  # every host's own key
        needed: str = Field(description="no default")

    class Bare:
        options = Undescribed

    class Clash:
        options = Clashing

    schemes = {**SCHEMES, "bare": Bare(), "clash": Clash(), "none": object()}
    found = scheme_problems(schemes, {**EXAMPLES, "clash": [{}]},
                            {**REACHED_FOR_REAL, "clash": "tests/unit/test_schemes.py::test_not_written"})
    assert found == [
        "bare: its options model Undescribed has no docstring",
        "bare: option flag has no description",
        "bare: no example address (EXAMPLES)",
        "bare: no test that reaches one of its hosts for real (REACHED_FOR_REAL: None)",
        "clash: option port is str | None, but int | None in ssh",
        "clash: option python is a host's own key",
        "clash: option needed has no default",
        "clash: no test that reaches one of its hosts for real (REACHED_FOR_REAL: "
        "tests/unit/test_schemes.py::test_not_written)",
        "none: no options model (a TransportOptions subclass)",
    ]


def test_the_inventory_reference_lists_every_option_of_every_scheme() -> None:
    doc = (REPO / "docs" / "inventory.md").read_text()
    begin, end = "<!-- transport options: begin -->\n", "<!-- transport options: end -->"
    assert begin in doc and end in doc
    listed = doc.split(begin, 1)[1].split(end, 1)[0]
    assert listed == options_reference(), ("docs/inventory.md's transport options differ from the models: put "
                                           "options_reference() of patchkit/host/transport/schemes.py there")
    for name, scheme in SCHEMES.items():
        section = listed.split(f"### `{name}`: ", 1)[1].split("\n### ", 1)[0]
        for key, field in scheme.options.model_fields.items():
            assert f"| `{key}` |" in section and " ".join(str(field.description).split()) in section, (name, key)


class IncusOptions(TransportOptions):
    """incus instances (a scheme made up here: a module and a row are all a new scheme needs)."""

    project: str | None = Field(default=None, description="The incus project of the instance.")


class IncusScheme:
    form = "incus://INSTANCE"
    written = True
    options = IncusOptions

    def check_address(self, rest: str) -> None:
        if not rest.isalnum():
            raise ValueError(f"address 'incus://{rest}': want incus://INSTANCE (letters and digits)")


def test_a_new_scheme_s_addresses_and_options_are_read_by_the_inventory_unchanged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reach, "_SCHEMES", {**reach._SCHEMES, "incus": IncusScheme()})  # as its row in schemes.py
    inv = tmp_path / "inv.yaml"

    def error(text: str) -> str:
        inv.write_text(text)
        with pytest.raises(UsageError) as caught:
            load_inventory(inv)
        return str(caught.value)

    inv.write_text("hosts:\n  web: {address: 'incus://web', project: ml}\n  gpu: {address: gpu-1}\n"
                   "defaults: {project: base, port: 2222, engine: podman}\n")
    hosts = load_inventory(inv).resolved()
    assert hosts["web"].options == IncusOptions(project="ml")
    assert hosts["gpu"].options == SSHOptions(port=2222)  # its own scheme's defaults, not incus' or podman's
    assert error("hosts:\n  web: {address: 'incus://web', projct: ml}\n") == (
        f"{inv}:2:33: hosts.web: unknown key 'projct' (did you mean 'project'?)")
    assert error("hosts:\n  web: {address: 'incus://web', project: 3}\n") == (
        f"{inv}:2:33: hosts.web.project: expected a string, got 3")
    assert error("hosts:\n  web: {address: 'incus://web', port: x}\n") == (  # another scheme's: checked too
        f"{inv}:2:33: hosts.web.port: expected an integer, got 'x'")
    assert error("hosts:\n  web: {address: 'incus://we-b'}\n") == (
        f"{inv}:2:9: hosts.web.address: address 'incus://we-b': want incus://INSTANCE (letters and digits)")
    monkeypatch.undo()
    assert "unknown scheme 'incus://'" in error("hosts:\n  web: {address: 'incus://web'}\n")


def test_the_inventory_imports_no_transport_and_needs_their_schemes() -> None:
    """fleet/ reads addresses and options with what the transports registered, never importing them."""
    probe = ("import sys\nfrom patchkit.fleet.inventory import HostSpec\n"
             "print(sorted(m for m in sys.modules if m.startswith('patchkit.host')))\n"
             "try:\n    HostSpec(name='h', address='local')\nexcept RuntimeError as exc:\n    print(exc)\n"
             "import patchkit.host.transport.schemes\nprint(HostSpec(name='h', address='podman://web').options)\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == [
        "[]",
        "no transport scheme is registered: import patchkit.host.transport.schemes before reading an inventory "
        "(it declares every scheme)",
        "engine=None engine_args=[]",
    ]


def test_options_fill_from_defaults_where_a_host_leaves_them_and_null_in_defaults_sets_nothing() -> None:
    inventory = Inventory.model_validate({
        "hosts": {"gpu-1": {"address": "gpu-1.internal", "port": None}, "gpu-2": {"address": "gpu-2.internal"},
                  "web": {"address": "podman://web", "engine_args": ["--runtime", "runc"]},
                  "ctr": {"address": "docker://ctr", "port": 2}},
        "groups": {"pods": {"k8s_selector": "app=vllm", "engine": None, "context": "prod"}},
        "defaults": {"port": 2222, "become": None, "ssh_client": None, "engine": "/opt/podman", "engine_args": None},
    })
    hosts = inventory.resolved()
    assert hosts["gpu-1"].options == SSHOptions()  # its own null unsets the defaults' port
    assert hosts["gpu-2"].options == SSHOptions(port=2222)
    assert hosts["web"].options == PodmanOptions(engine="/opt/podman", engine_args=["--runtime", "runc"])
    assert hosts["ctr"].options == DockerOptions(engine="/opt/podman")  # read by docker's model, not podman's
    assert type(hosts["ctr"].options) is DockerOptions and hosts["ctr"].settings()["engine"] == "/opt/podman"
    selector = inventory.groups["pods"]
    assert isinstance(selector, PodSelector) and selector.host_settings() == {"context": "prod"}
    with pytest.raises(ValueError, match="become\n  Input should be a valid boolean"):
        HostSpec.model_validate({"name": "h", "become": None})  # on a host, null is a value: checked
