"""Host patterns for `-l`, as Ansible users type them: pure, no inventory model, no I/O.

A pattern is terms separated by `,` or `:`. A term is `all` (or `*`), a host or group
name, a glob (`gpu-*`, `gpu-[12]`) or `~regex`, matched against host and group names.
`!term` excludes, `&term` intersects, anything else is a union. As in Ansible, the unions
are taken first, then the intersections, then the exclusions, whatever the order they are
written in; a pattern of only `!`/`&` terms starts from `all`. The result keeps the
inventory's order.

An exact name that is neither a host nor a group is an error (a typo in `!gpu-1` would
otherwise patch the host meant to be left out); a pattern that selects nothing is an error.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from patchkit.base.errors import UsageError

Op = Literal["union", "and", "not"]

_GLOB = re.compile(r"[*?\[]")


@dataclass(frozen=True)
class Term:
    op: Op
    text: str  # without its `!`/`&`


def parse(pattern: str) -> list[Term]:
    """`a,b:&c:!d` -> the terms, unions first, then intersections, then exclusions."""
    terms: list[Term] = []
    for piece in re.split(r"[,:]", pattern):
        piece = piece.strip()
        if not piece:
            continue
        op: Op = "not" if piece[0] == "!" else "and" if piece[0] == "&" else "union"
        text = piece[1:].strip() if op != "union" else piece
        if not text:
            raise UsageError(f"-l {pattern!r}: {piece!r} names nothing after {piece[0]!r}")
        terms.append(Term(op, text))
    if not terms:
        raise UsageError(f"-l {pattern!r}: no host or group named")
    order: dict[Op, int] = {"union": 0, "and": 1, "not": 2}
    terms.sort(key=lambda t: order[t.op])  # stable: written order within each kind
    if terms[0].op != "union":
        terms.insert(0, Term("union", "all"))
    return terms


def matching_names(text: str, names: Sequence[str]) -> list[str]:
    """The names (hosts or groups) one term matches: `all`/`*`, a glob, `~regex`, or the name."""
    if text in ("all", "*"):
        return list(names)
    if text.startswith("~"):
        try:
            regex = re.compile(text[1:])
        except re.error as exc:
            raise UsageError(f"-l: {text!r} is not a regular expression: {exc}") from None
        except (RecursionError, OverflowError):  # nested or repeated past what `re` compiles
            raise UsageError(f"-l: {text[:40]!r}...: a regular expression too deeply nested or too large") from None
        return [n for n in names if regex.match(n)]
    if _GLOB.search(text):
        return [n for n in names if fnmatch.fnmatchcase(n, text)]
    return [n for n in names if n == text]


def is_exact(text: str) -> bool:
    return text not in ("all", "*") and not text.startswith("~") and not _GLOB.search(text)


def unknown_name(text: str, known: Sequence[str]) -> UsageError:
    close = difflib.get_close_matches(text, list(known), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return UsageError(f"-l: {text!r} is neither a host nor a group of the inventory{hint}")


def select(pattern: str, hosts: Sequence[str], groups: Sequence[str],
           members: Callable[[str], Sequence[str]]) -> list[str]:
    """The host names `pattern` selects, in inventory order (`hosts`, then any host only a
    group brings, in the order `members` gave it). `members(group)` is the group's hosts
    (nested groups already flattened); it is asked only about groups a term matches, so a
    group resolved at run time costs nothing unless named."""
    order: dict[str, int] = {h: i for i, h in enumerate(hosts)}

    def hosts_of(term: Term) -> set[str]:
        if term.text in ("all", "*"):  # every host, and every group's (a group may bring its own)
            found = set(hosts)
            for group in groups:
                found.update(_noted(members(group), order))
            return found
        named_hosts = matching_names(term.text, hosts)
        named_groups = matching_names(term.text, groups)
        if not named_hosts and not named_groups and is_exact(term.text):
            raise unknown_name(term.text, [*hosts, *groups])
        found = set(named_hosts)
        for group in named_groups:
            found.update(_noted(members(group), order))
        return found

    chosen: set[str] = set()
    for term in parse(pattern):
        matched = hosts_of(term)
        if term.op == "union":
            chosen |= matched
        elif term.op == "and":
            chosen &= matched
        else:
            chosen -= matched
    if not chosen:
        raise UsageError(f"-l {pattern!r}: the pattern matches no host")
    return sorted(chosen, key=order.__getitem__)


def _noted(names: Sequence[str], order: dict[str, int]) -> Sequence[str]:
    """Give a host only a group brings (a pod) its place: after those seen before it."""
    for name in names:
        order.setdefault(name, len(order))
    return names
