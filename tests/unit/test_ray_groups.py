"""The Ray group form and node listing, without a cluster: what the inventory accepts, which
nodes a group takes, and what it says about the ones it leaves out."""

from __future__ import annotations

import pytest

from patchkit.base.errors import UsageError
from patchkit.fleet.inventory import Defaults, Inventory
from patchkit.fleet.raygroup import NodeFilter, RayGroup
from patchkit.host.transport.ray_scheme import node_address, parse_node_address
from patchkit.host.transport.raycluster import node_host, nodes_from_state

A = "a1" * 28
B = "b2" * 28
C = "c3" * 28


def entry(node_id: str, alive: bool = True, resources: dict | None = None, labels: dict | None = None,
          why: str = "") -> dict:
    return {"NodeID": node_id, "Alive": alive, "NodeManagerAddress": "10.0.0.7",
            "Resources": resources if resources is not None else {"CPU": 8.0},
            "Labels": {"ray.io/node-id": node_id, **(labels or {})}, "DeathReasonMessage": why}


def test_a_ray_group_is_told_apart_from_lists_and_pod_selectors() -> None:
    inventory = Inventory.model_validate({"hosts": {}, "groups": {
        "gpus": {"ray": {"address": "ray://head:10001", "nodes": {"resources": {"GPU": 1}}, "python": "/opt/py"}},
        "pods": {"k8s_selector": "app=vllm"}}})
    gpus = inventory.groups["gpus"]
    assert isinstance(gpus, RayGroup) and gpus.ray.nodes == NodeFilter(resources={"GPU": 1.0})
    with pytest.raises(UsageError, match="group 'gpus' is resolved from the Ray cluster at run time"):
        inventory.select("gpus")


@pytest.mark.parametrize(("group", "problem"), [
    ({"ray": {"address": "head:10001/x"}}, "want ray://HOST:PORT \\(Ray Client\\), `auto` or HOST:PORT"),
    ({"ray": {"address": "http://head:8265"}}, "only ray:// \\(Ray Client\\) is a scheme here"),
    ({"ray": {"nodes": {}}}, "nodes: give `all`, or `resources:` and/or `labels:`"),
    ({"ray": {"nodes": "some"}}, "nodes"),
    ({"ray": {"adress": "auto"}}, "adress"),
])
def test_a_bad_ray_group_is_refused_naming_the_place(group: dict, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        Inventory.model_validate({"hosts": {}, "groups": {"g": group}})


def test_alive_matching_nodes_become_hosts_and_the_others_are_named() -> None:
    listed = nodes_from_state([entry(A, resources={"GPU": 2.0}), entry(B, alive=False, resources={}, why="killed"),
                               entry(C, resources={"GPU": 1.0}, labels={"zone": "b"})], draining={C})
    assert [(n.node_id, n.reason) for n in listed] == [(A, None), (B, "dead (killed)"), (C, "draining")]
    gpu2 = NodeFilter(resources={"GPU": 2})
    assert [n.node_id for n in listed if n.matches(gpu2)] == [A, B]  # B: dead, resources no longer listed
    zone = NodeFilter(labels={"zone": "b"})
    assert [n.node_id for n in listed if n.matches(zone)] == [C]
    group = RayGroup.model_validate({"ray": {"address": "10.0.0.1:6379", "python": "/opt/py", "state_dir": "/s"}})
    host = node_host(group.ray, Defaults(python="/usr/bin/python3", user="ops"), listed[0])
    assert (host.name, host.address, host.python, host.state_dir, host.user) == (
        f"10.0.0.7-{A[:8]}", f"ray://gcs/10.0.0.1:6379/{A}", "/opt/py", "/s", "ops")


@pytest.mark.parametrize("cluster", ["ray://head:10001", "auto", "10.0.0.1:6379"])
def test_a_node_s_address_names_its_cluster_as_the_group_wrote_it(cluster: str) -> None:
    address = node_address(cluster, A)
    assert parse_node_address(address.removeprefix("ray://")) == (cluster, A)


def test_a_ray_groups_vars_reach_every_node_over_the_defaults() -> None:
    group = RayGroup.model_validate({"ray": {"address": "auto", "vars": {"port": 8001, "zone": "b"}}})
    listed = nodes_from_state([entry(A)], draining=set())
    host = node_host(group.ray, Defaults(vars={"port": 8000, "model": "kimi"}), listed[0])
    assert host.vars == {"port": 8001, "zone": "b", "model": "kimi"}


def test_a_ray_group_survives_merging_inventories_and_is_defined_once() -> None:
    from patchkit.fleet.sources import merge

    ray = Inventory.model_validate({"hosts": {}, "groups": {"gpus": {"ray": {"address": "auto"}}},
                                    "defaults": {"python": "/opt/py"}})
    other = Inventory.model_validate({"hosts": {"a": {"address": "local"}}, "groups": {"cpu": ["a"]}})
    merged = merge([("ray.yaml", ray, []), ("hosts.yaml", other, [])]).inventory
    assert isinstance(merged.groups["gpus"], RayGroup) and merged.groups["cpu"] == ["a"]
    assert merged._selector_defaults["gpus"].python == "/opt/py"  # the ray group's own inventory's
    again = Inventory.model_validate({"hosts": {"x": {"address": "local"}}, "groups": {"gpus": ["x"]}})
    with pytest.raises(UsageError, match="group 'gpus' is in -i ray.yaml and -i more.yaml.*defined once"):
        merge([("ray.yaml", ray, []), ("more.yaml", again, [])])


@pytest.mark.parametrize("given, seconds", [(None, 45.0), ("8", 8.0), ("0.5", 0.5)])
def test_the_ray_client_wait_is_45_s_unless_the_variable_says(monkeypatch: pytest.MonkeyPatch, given: str | None,
                                                              seconds: float) -> None:
    from patchkit.host.transport.raycluster import client_init_timeout

    if given is None:
        monkeypatch.delenv("PATCHKIT_RAY_CLIENT_TIMEOUT_S", raising=False)
    else:
        monkeypatch.setenv("PATCHKIT_RAY_CLIENT_TIMEOUT_S", given)
    assert client_init_timeout() == seconds

