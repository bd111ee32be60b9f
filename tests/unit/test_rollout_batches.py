"""rollout.py: batch sizes and failure budgets (pure)."""

from __future__ import annotations

import pytest

from patchkit.base.rollout import batches, failure_budget, parse_serial, parse_size

HOSTS = [f"h{i}" for i in range(1, 11)]


def sizes(text: str) -> list[int]:
    return [len(b) for b in batches(HOSTS, parse_serial(text))]


def test_batches_follow_the_sizes_and_the_last_repeats() -> None:
    assert sizes("1,10%,100%") == [1, 1, 8]
    assert sizes("1,20%,100%") == [1, 2, 7]
    assert sizes("1,30%") == [1, 3, 3, 3]  # the last size repeats, as Ansible's serial
    assert sizes("25%") == [2, 2, 2, 2, 2]
    assert batches(HOSTS, parse_serial("2,3"))[1] == ["h3", "h4", "h5"]  # in order
    assert sizes("1%") == [1] * 10  # at least one host a batch


def test_a_single_count_is_a_canary() -> None:
    assert sizes("3") == [3, 7]
    assert sizes("10") == [10] and sizes("50") == [10]
    assert batches(HOSTS, None) == [HOSTS]


def test_recipe_and_inventory_forms() -> None:
    assert [str(s) for s in parse_serial([1, "10%", "100%"])] == ["1", "10%", "100%"]
    assert [str(s) for s in parse_serial(5)] == ["5"]


@pytest.mark.parametrize("bad", ["", "x", "0", "1,0", "150%", "0%", "1.5", "-1", "10 %%"])
def test_unreadable_sizes_are_refused_with_the_flag_named(bad: str) -> None:
    with pytest.raises(ValueError, match="^--serial: "):
        parse_serial(bad, "--serial")


def test_failure_budgets() -> None:
    assert failure_budget(parse_size("2", "--max-fail"), 10) == 2
    assert failure_budget(parse_size("10%", "--max-fail"), 10) == 1
    assert failure_budget(parse_size("15%", "--max-fail"), 10) == 1
    assert failure_budget(parse_size("0", "--max-fail"), 10) == 0
    assert failure_budget(None, 10) is None
