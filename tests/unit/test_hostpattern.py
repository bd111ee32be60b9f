"""`-l` host patterns with Ansible's semantics: a table over one inventory."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.fleet import patterns as hostpattern
from patchkit.base.errors import UsageError
from patchkit.fleet.inventory import load_inventory

HOSTS = ["gpu-1", "gpu-2", "gpu-3", "cpu-1", "eu-gpu-4"]
GROUPS = {"kimi": ["gpu-2", "gpu-1"], "eu": ["gpu-2", "eu-gpu-4"], "cpus": ["cpu-1"], "empty": []}


def select(pattern: str) -> list[str]:
    return hostpattern.select(pattern, HOSTS, list(GROUPS), GROUPS.__getitem__)


@pytest.mark.parametrize(("pattern", "hosts"), [
    ("all", HOSTS),
    ("*", HOSTS),
    ("gpu-1", ["gpu-1"]),
    ("kimi", ["gpu-1", "gpu-2"]),                          # inventory order, not the group's
    ("gpu-*", ["gpu-1", "gpu-2", "gpu-3"]),
    ("*gpu*", ["gpu-1", "gpu-2", "gpu-3", "eu-gpu-4"]),
    ("gpu-[13]", ["gpu-1", "gpu-3"]),
    ("~gpu-[12]$", ["gpu-1", "gpu-2"]),
    ("!gpu-1", ["gpu-2", "gpu-3", "cpu-1", "eu-gpu-4"]),   # only exclusions: from all
    ("gpu-*:!gpu-2", ["gpu-1", "gpu-3"]),
    ("kimi:&eu", ["gpu-2"]),
    ("&eu", ["gpu-2", "eu-gpu-4"]),
    ("cpu-1,gpu-3", ["gpu-3", "cpu-1"]),
    ("cpu-1:gpu-3", ["gpu-3", "cpu-1"]),
    ("!gpu-2:kimi:eu", ["gpu-1", "eu-gpu-4"]),             # exclusions last, whatever the written order
    ("kimi:!eu:cpus", ["gpu-1", "cpu-1"]),
    ("c*", ["cpu-1"]),                                      # the group cpus, and the host cpu-1
    ("kimi, eu", ["gpu-1", "gpu-2", "eu-gpu-4"]),
    ("gpu-*:nomatch*", ["gpu-1", "gpu-2", "gpu-3"]),        # a glob may match nothing
])
def test_patterns_select_as_ansible_does(pattern: str, hosts: list[str]) -> None:
    assert select(pattern) == hosts


@pytest.mark.parametrize(("pattern", "message"), [
    ("gpu-*:!gpu-*", "-l 'gpu-*:!gpu-*': the pattern matches no host"),
    ("kimi:&cpus", "-l 'kimi:&cpus': the pattern matches no host"),
    ("nomatch*", "-l 'nomatch*': the pattern matches no host"),
    ("empty", "-l 'empty': the pattern matches no host"),
    ("kimmi", "-l: 'kimmi' is neither a host nor a group of the inventory (did you mean 'kimi'?)"),
    ("kimi:!cpu-l", "-l: 'cpu-l' is neither a host nor a group of the inventory (did you mean 'cpu-1'?)"),
    ("kimi:&zzz", "-l: 'zzz' is neither a host nor a group of the inventory"),
    ("kimi:!", "-l 'kimi:!': '!' names nothing after '!'"),
    (",:", "-l ',:': no host or group named"),
    ("~(", "-l: '~(' is not a regular expression: missing ), unterminated subpattern at position 0"),
])
def test_bad_patterns_are_usage_errors_naming_the_pattern(pattern: str, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        select(pattern)
    assert str(caught.value) == message


def test_a_group_is_resolved_only_when_a_term_reaches_it() -> None:
    asked: list[str] = []

    def members(group: str) -> list[str]:
        asked.append(group)
        return GROUPS[group]

    assert hostpattern.select("gpu-*:!cpu-1", HOSTS, list(GROUPS), members) == ["gpu-1", "gpu-2", "gpu-3"]
    assert asked == []
    assert hostpattern.select("gpu-3:k*", HOSTS, list(GROUPS), members) == ["gpu-1", "gpu-2", "gpu-3"]
    assert asked == ["kimi"]


def test_the_inventory_selects_by_pattern_through_nested_groups(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text("hosts: {a1: {}, a2: {}, b1: {}}\n"
                    "groups: {as: [a1, a2], bs: [b1], every: [as, bs]}\n")
    inventory = load_inventory(path)
    assert [h.name for h in inventory.select("every:!a1").hosts] == ["a2", "b1"]
    assert [h.name for h in inventory.select("every:&as:!a2").hosts] == ["a1"]
    assert [h.name for h in inventory.select(None).hosts] == ["a1", "a2", "b1"]
