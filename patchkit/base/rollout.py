"""Rolling rollouts: batch sizes (`--serial 1,10%,100%`, `serial:`) and failure budgets
(`--max-fail 2`, `--max-fail 10%`). Pure: sizes in, batches out.

A size is a host count or a percentage of the selected hosts (rounded down, at least one).
Batches follow the sizes in order; the last size repeats until every host has a batch (as
Ansible's `serial` does). A single number N keeps its canary meaning: the first N hosts,
then all the others.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, TypeVar

from pydantic import AfterValidator

T = TypeVar("T")

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(%?)\s*$")


@dataclass(frozen=True)
class Size:
    value: float
    percent: bool

    def of(self, total: int) -> int:
        if not self.percent:
            return max(1, int(self.value))
        return max(1, int(total * self.value / 100))

    def __str__(self) -> str:
        return f"{self.value:g}%" if self.percent else f"{int(self.value)}"


def parse_size(text: str | int, what: str) -> Size:
    """'3' or 3 -> 3 hosts; '10%' -> 10% of them. ValueError naming `what` otherwise."""
    if isinstance(text, bool):
        raise ValueError(f"{what}: {text!r} is not a host count or a percentage like 10%")  # noqa: TRY004 - one error type for every unreadable size
    if isinstance(text, int):
        text = str(text)
    found = _SIZE.match(text)
    if not found:
        raise ValueError(f"{what}: {text!r} is not a host count or a percentage like 10%")
    value, percent = float(found.group(1)), bool(found.group(2))
    if percent and not 0 < value <= 100:
        raise ValueError(f"{what}: {text!r}: a percentage is more than 0% and at most 100%")
    if not percent and (value != int(value) or value < 0):
        raise ValueError(f"{what}: {text!r}: a host count is a whole number")
    return Size(value, percent)


def parse_serial(value: str | int | list[str | int], what: str = "serial") -> list[Size]:
    """`1,10%,100%` (the CLI), or a list / single value (a recipe or inventory)."""
    items = value.split(",") if isinstance(value, str) else value if isinstance(value, list) else [value]
    sizes = [parse_size(item, what) for item in items]
    if not sizes:
        raise ValueError(f"{what}: no batch size given")
    if any(not s.percent and s.value == 0 for s in sizes):
        raise ValueError(f"{what}: a batch of 0 hosts")
    return sizes


def batches(hosts: list[T], sizes: list[Size] | None) -> list[list[T]]:
    """The hosts cut into batches, in order."""
    if not sizes or not hosts:
        return [list(hosts)] if hosts else []
    if len(sizes) == 1 and not sizes[0].percent:  # the canary: first N, then everyone else
        n = sizes[0].of(len(hosts))
        return [hosts[:n], hosts[n:]] if n < len(hosts) else [list(hosts)]
    out: list[list[T]] = []
    start, i = 0, 0
    while start < len(hosts):
        n = sizes[min(i, len(sizes) - 1)].of(len(hosts))
        out.append(hosts[start:start + n])
        start, i = start + n, i + 1
    return out


def failure_budget(size: Size | None, total: int) -> int | None:
    """How many hosts may fail before no more are started (None: no budget given)."""
    if size is None:
        return None
    return int(total * size.value / 100) if size.percent else int(size.value)


def _checked(value: list[int | str] | int | str | None) -> list[int | str] | int | str | None:
    if value is not None:
        parse_serial(value)
    return value


# A recipe's or an inventory's `serial:` as written, checked where it is read.
SerialField = Annotated[list[int | str] | int | str | None, AfterValidator(_checked)]
