"""Fuzz tier for the loader: thousands of malformed recipes and inventories, each a
mutation of a valid one, must each give a UsageError whose first line is `FILE:LINE:COL: ...`
(and each further line another problem of the file, as `FILE:LINE:COL: ...`: the loader
lists every problem) with bounded work. Nothing else may come out: no other exception, no
hang, no silent load. At least the size of an outside fault run (1,100 malformed recipes,
196 inventories): 1,300 recipes and 700 inventories are generated.

Most mutations are malformed by construction (a bad byte, a control character, a tag, an
alias bomb, a merge key, nesting, a wrong type, an unknown or missing key, a broken
template, ...): those must be refused, naming their problem. A few only damage the text
at random (truncation, flipped bytes, stray punctuation): they may still be valid, and
count as malformed only when refused. The bulk runs in-process under a CPU-time guard
(loadercheck.time_limit: never seconds of wall clock, which a loaded machine stretches);
a fixed sample goes through the real CLI with memory and CPU limits.
"""

from __future__ import annotations

import copy
import json
import random
import resource
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml
from tests.helpers import PATCHKIT, REPO
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loadercheck import check_message, time_limit

from patchkit.edits import EDIT_KINDS
from patchkit.edits.targets import Where
from patchkit.base.errors import UsageError
from patchkit.fleet.inventory import load_inventory
from patchkit.recipe.model import load_recipe
from patchkit.base.yamlsource import MAX_BYTES, MAX_DEPTH

EXAMPLES = {"recipes": 1300, "inventories": 700}  # generated per kind (~11 and ~5 s of CPU here)
MALFORMED = {"recipes": 1100, "inventories": 600}  # refused at least: above the outside run's 1,100 and 196

# ---------------------------------------------------------------------------- valid bases

EVERY_KIND = """\
name: every_kind
description: one step of each kind, with the free-form fields (vars, value, args, env)
python: /usr/bin/python3
keep_runs: 5
vars: {port: 8000, rate: 0.25, first: kimi_k2, mods: [toyllm.config], nested: {a: [1, {b: null}]}}
steps:
  - name: insert
    patch:
      package: toyllm
      versions: ">=0.10,<0.22"
      modules: [toyllm.config.speculative]
      edit: {list_insert: {names: [eagle3_target_supported], values: ["{{ first }}", 3, true], after: afmoe}}
    verify: {import: [toyllm.config.speculative], timeout_s: 30}
  - name: set
    patch:
      package: toyllm
      modules: "{{ mods }}"
      edit: {set_value: {names: [LIMIT], value: {deep: [1, 2.5, "x"]}, within: Config}}
  - name: dict
    patch: {package: toyllm, modules: [toyllm.config], edit: {dict_set: {names: [D], key: k, expr: "1 + 2"}}}
  - name: kwarg
    patch: {package: toyllm, modules: [toyllm.config], edit: {call_kwarg: {callee: f, keyword: k, value: null}}}
  - name: remove
    patch: {package: toyllm, modules: [toyllm.config], edit: {list_remove: {names: [L], values: [a]}}}
  - name: mod
    patch: {package: toyllm, modules: [toyllm.config], edit: {codemod: {file: m.py, transformer: T, args: {x: [1]}}}}
  - name: hunks
    patch:
      package: toyllm
      edit:
        diff:
          strip: 1
          text: |
            --- a/toyllm/config/model.py
            +++ b/toyllm/config/model.py
            @@ -1,2 +1,2 @@
             def f():
            -    return 1
            +    return {{ port }}
  - name: body
    patch:
      package: toyllm
      modules: [toyllm.config]
      edit:
        replace_function:
          function: C.f
          keep_docstring: false
          body: |
            return {"port": {{ port }}}
  - name: probe
    check: {package: toyllm, message: why, timeout_s: 10, python: "print({{ port }})"}
  - name: ship
    deploy:
      src: ./drafter
      dest: /models/d
      validate: eagle3-drafter
      target: {hidden_size: 128, vocab_size: 1024, num_hidden_layers: 2}
  - name: serve
    launch:
      command: [python, -m, http.server, "{{ port }}", 7]
      env: {A: "1", B: 2}
      cwd: /tmp
      health: {url: "http://127.0.0.1:{{ port }}/", timeout_s: 60, request_timeout_s: 2, interval_s: 0.5}
      ready: {model: m, completion: {prompt: Hi, max_tokens: 4}}
      spec_decode: {prompts: [a, b], max_tokens: 16, temperature: 0, min_acceptance_rate: "{{ rate }}"}
      baseline: {command: [python, -m, http.server], health: {url: "http://x/"}, min_speedup: 1, keep: faster}
      stop_timeout_s: 5
"""

RECIPE_BASES = {
    "every_kind.yaml": EVERY_KIND,
    **{p.name: p.read_text() for p in [*sorted((REPO / "recipes").glob("*.yaml")),
                                        REPO / "fixtures" / "recipes" / "toyllm_eagle3.yaml",
                                        REPO / "fixtures" / "recipes" / "hold_lock.yaml"]},
}

INVENTORY_BASES = {
    "product.yaml": """\
hosts:
  gpu-1:
    address: gpu-node-1.internal # a name or address; "local" (or none) = local transport
    port: 22
    user: root
    python: /root/ml-env/bin/python
    identity_file: ~/.ssh/id_ed25519
    known_hosts: ~/.ssh/known_hosts   # host keys are verified; unknown keys are refused
  gpu-2: {address: gpu-node-2.internal, python: /root/ml-env/bin/python}
groups:
  kimi: [gpu-1, gpu-2]
defaults: {user: root, port: 22}
""",
    "fleet.yaml": """\
hosts:
  gpu-1: {address: gpu-node-1.internal, user: root, python: /root/ml-env/bin/python}
  gpu-2: {address: gpu-node-2.internal, python: /root/ml-env/bin/python, become: true, ssh_client: openssh}
  local: {state_dir: /tmp/state}
groups: {kimi: [gpu-1, gpu-2], all: [kimi, local]}
defaults: {port: 22, known_hosts: ~/.ssh/known_hosts, state_dir: ~/.local/state/patchkit, become: false}
""",
    "json.yaml": json.dumps({"hosts": {"a": {"address": "127.0.0.1", "port": 2222, "user": "u",
                                             "identity_file": "/k/id", "known_hosts": "/k/kh"},
                                       "b": {"address": "127.0.0.1", "port": 2223}},
                             "groups": {"g": ["a", "b"]}}, indent=1),
}

RECIPE_FREE = {"vars", "value", "args"}  # Any-typed: every value fits there
RECIPE_FREE_KEYS = RECIPE_FREE | {"env"}  # mappings whose keys are the user's
INVENTORY_FREE_KEYS = {"hosts", "groups"}
REQUIRED = {  # (parent key, key) pairs whose removal leaves a required key missing
    (None, "name"), (None, "steps"), ("steps", "name"), ("patch", "package"), ("patch", "modules"),
    ("patch", "edit"), ("check", "python"), ("deploy", "src"), ("deploy", "dest"), ("launch", "command"),
    ("launch", "health"), ("health", "url"), ("list_insert", "names"), ("list_insert", "values"),
    ("replace_function", "function"), ("replace_function", "body"), ("baseline", "command"),
}
INVENTORY_REQUIRED = {(None, "hosts")}

# ---------------------------------------------------------------------------- emitting YAML


@dataclass
class Tagged:
    tag: str
    value: Any


class Pairs(list):  # type: ignore[type-arg]
    """A mapping written from (key, value) pairs: duplicate and non-string keys are possible."""


class Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """libyaml's emitter where there is one: emitting was half of what a mutation cost."""


def _tagged(dumper: Dumper, data: Tagged) -> yaml.Node:
    if isinstance(data.value, dict):
        return dumper.represent_mapping(data.tag, data.value)
    if isinstance(data.value, list):
        return dumper.represent_sequence(data.tag, data.value)
    return dumper.represent_scalar(data.tag, data.value if isinstance(data.value, str) else json.dumps(data.value))


Dumper.add_representer(Tagged, _tagged)
Dumper.add_representer(Pairs, lambda dumper, data: dumper.represent_mapping("tag:yaml.org,2002:map", list(data)))

BAD_TAGS = ["tag:yaml.org,2002:python/object:os.system", "tag:yaml.org,2002:python/object/apply:os.system",
            "tag:yaml.org,2002:python/name:os.system", "tag:yaml.org,2002:python/tuple", "tag:yaml.org,2002:binary",
            "tag:yaml.org,2002:set", "tag:yaml.org,2002:omap", "tag:yaml.org,2002:pairs",
            "tag:yaml.org,2002:timestamp", "!custom", "tag:example.com,2000:app/x", "tag:yaml.org,2002:value",
            "tag:yaml.org,2002:yaml", "tag:yaml.org,2002:python/str"]
ODD_KEYS = ["str", "int", "float", "bool", "none", "list[str]", "[key]", "function-after[x]", "yes", "no", "on",
            "off", "true", "False", "null", "~", "NULL", "1", "0", "-1", "0x10", "0o7", "1.5", ".inf", "1:30", "=",
            "", " ", "é", "a b", "name_", "modulez", "stepz", "2024-01-01", "!", "&", "*", "-", "?", "'q'", "\t"]
BROKEN_TEMPLATES = ["{{ port", "{{}}", "{{ port }", "{{ 1x }}", "{{ a b }}", "{{ undefined_zz }}", "{{{",
                    "{{ 'x' }}", "{{ port-1 }}", "{ {port}} {{", "{{\n}}", "{{ port }}}{{", "{{ \"}\" }}"]
CONTROL = [chr(c) for c in [*range(0, 9), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F, 0x80, 0x84, 0x86, 0x9F, 0xFFFE, 0xFFFF]]
NOT_UTF8 = [b"\xff", b"\xfe", b"\xc3", b"\x80", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf8\x88\x80\x80\x80", b"\xe2\x82"]


def plain_if_it_reads_as(text: str) -> Any:
    """`text` written so that YAML 1.1 reads it as a bool, number or null where it would
    (`yes`, `1`, `~` unquoted), as a string otherwise."""
    tag = yaml.resolver.Resolver().resolve(yaml.ScalarNode, text, (True, False))
    core = {"tag:yaml.org,2002:" + t for t in ("bool", "int", "float", "null")}
    return Tagged(tag, text) if tag in core else text


def dump(tree: Any, rng: random.Random) -> str:
    return yaml.dump(tree, Dumper=Dumper, sort_keys=False, allow_unicode=rng.random() < 0.5,
                     default_flow_style=rng.choice([False, None, True]), indent=rng.choice([2, 3, 4]),
                     width=rng.choice([40, 80, 10_000]))


# ---------------------------------------------------------------------------- walking a tree


@dataclass
class Spot:
    path: tuple[Any, ...]
    parent: Any
    key: Any
    value: Any

    @property
    def parent_key(self) -> Any:
        names = [p for p in self.path[:-1] if isinstance(p, str)]
        return names[-1] if names else None


def spots(tree: Any, path: tuple[Any, ...] = (), parent: Any = None, key: Any = None) -> list[Spot]:
    out = [Spot(path, parent, key, tree)]
    if isinstance(tree, dict):
        for k, v in tree.items():
            out += spots(v, path + (k,), tree, k)
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            out += spots(v, path + (i,), tree, i)
    return out


def put(spot: Spot, value: Any, tree: Any) -> Any:
    if spot.parent is None:
        return value
    spot.parent[spot.key] = value
    return tree


# ---------------------------------------------------------------------------- mutations


@dataclass
class Case:
    name: str
    content: bytes
    op: str
    sure: bool  # malformed by construction: must be refused
    expect: tuple[str, ...] = ()  # one of these must be in the message


@dataclass
class Kind:
    label: str
    bases: dict[str, str]
    load: Callable[[Path], Any]
    free: set[str]  # keys of Any-typed values (nothing is wrong there)
    free_keys: set[str]  # mappings whose keys are the user's
    required: set[tuple[Any, str]]
    templated: bool


def typed(kind: Kind, spot: Spot) -> bool:
    return not any(p in kind.free for p in spot.path if isinstance(p, str))


def model_mapping(kind: Kind, spot: Spot) -> bool:
    return (isinstance(spot.value, dict) and typed(kind, spot)
            and not (spot.path and spot.path[-1] in kind.free_keys))


_TREES: dict[str, Any] = {}  # a base's text -> its tree, parsed once (parsing was most of the fuzz's CPU)


def base_tree(text: str) -> Any:
    """A fresh copy of the base's tree, for a mutation to change."""
    if text not in _TREES:
        _TREES[text] = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return copy.deepcopy(_TREES[text])


def mutate(kind: Kind, op: str, rng: random.Random) -> Case:
    name = rng.choice(sorted(kind.bases))
    text = kind.bases[name]
    tree = base_tree(text)
    every = spots(tree)

    def case(content: str | bytes, sure: bool = True, *expect: str) -> Case:
        return Case(name, content.encode() if isinstance(content, str) else content, op, sure, expect)

    def emitted(new_tree: Any, *expect: str) -> Case:
        return case(dump(new_tree, rng), True, *expect)

    def at_random(content: Any, piece: Any) -> Any:
        where = rng.randrange(len(content) + 1)
        return content[:where] + piece + content[where:]

    if op == "not_utf8":
        return case(at_random(text.encode(), rng.choice(NOT_UTF8)), True, "not UTF-8")
    if op == "control":
        return case(at_random(text, rng.choice(CONTROL)), True, "is not allowed")
    if op == "too_big":
        return case(text + "#" * (MAX_BYTES - len(text) + rng.randrange(1, 5000)), True, "larger than")
    if op == "deep_text":
        levels = rng.choice([MAX_DEPTH + 1, 200, 999, 1001, 5000, 60_000])
        opener, closer = rng.choice([("[", "]"), ("{a: ", "}")])
        spot = rng.choice([s for s in every if not isinstance(s.value, (dict, list))])
        tree = put(spot, "__DEEP__", tree)
        return case(dump(tree, rng).replace("__DEEP__", opener * levels + closer * levels, 1), True, "nest")
    if op == "deep_tree":
        spot = rng.choice(every)
        deep: Any = rng.choice(["x", 1, {}])
        for _ in range(MAX_DEPTH + rng.randrange(0, 60)):
            deep = [deep] if rng.random() < 0.5 else {"k": deep}
        return emitted(put(spot, deep, tree), "nested deeper")
    if op == "bomb":
        spot = rng.choice(every)
        level: Any = rng.choice(["lol", ["lol"], {"l": "ol"}])
        for _ in range(rng.randrange(5, 10)):
            level = [level] * rng.randrange(8, 12)  # the same object: the dumper writes aliases
        return emitted(put(spot, level, tree), "aliases expand")
    if op == "many_aliases":
        spot = rng.choice(every)
        shared: Any = rng.choice([[1], {"a": 1}, [[]]])
        return emitted(put(spot, [shared] * rng.randrange(1002, 3000), tree), "aliases")
    if op == "loop":
        spot = rng.choice(every)
        loop: Any = rng.choice([[], {}])
        (loop.append(loop) if isinstance(loop, list) else loop.update(me=loop))
        return emitted(put(spot, [1, loop] if rng.random() < 0.5 else loop, tree), "loop")
    if op == "undefined_alias":
        spot = rng.choice([s for s in every if not isinstance(s.value, (dict, list))])
        tree = put(spot, "__ALIAS__", tree)
        return case(dump(tree, rng).replace("__ALIAS__", "*nope", 1), True, "undefined alias")
    if op == "tag":
        spot = rng.choice(every)
        return emitted(put(spot, Tagged(rng.choice(BAD_TAGS), spot.value), tree), "YAML tag")
    if op == "tag_key":
        spot = rng.choice([s for s in every if isinstance(s.value, dict) and s.value])
        pairs = Pairs(spot.value.items())
        i = rng.randrange(len(pairs))
        pairs[i] = (Tagged(rng.choice(BAD_TAGS), pairs[i][0]), pairs[i][1])
        return emitted(put(spot, pairs, tree), "YAML tag")
    if op == "merge":
        spot = rng.choice([s for s in every if isinstance(s.value, dict)])
        merged = Pairs([(Tagged("tag:yaml.org,2002:merge", "<<"), rng.choice([{"x": 1}, [{"y": 2}], "z"])),
                        *spot.value.items()])
        rng.shuffle(merged)
        return emitted(put(spot, merged, tree), "merge keys (<<) are not supported", "YAML tag !!merge")
    if op == "duplicate_key":
        spot = rng.choice([s for s in every if isinstance(s.value, dict) and s.value])
        pairs = Pairs(spot.value.items())
        pairs.insert(rng.randrange(len(pairs) + 1), rng.choice(pairs))
        return emitted(put(spot, pairs, tree), "duplicate key")
    if op == "complex_key":
        spot = rng.choice([s for s in every if isinstance(s.value, dict)])
        pairs = Pairs([*spot.value.items(), (rng.choice([["a"], {"b": 1}, [1, [2]]]), "v")])
        rng.shuffle(pairs)
        return emitted(put(spot, pairs, tree), "a key must be a plain string")
    if op == "unknown_key":
        spot = rng.choice([s for s in every if model_mapping(kind, s)])
        key = rng.choice([k for k in ODD_KEYS if k not in spot.value])
        pairs = Pairs(spot.value.items())
        written = plain_if_it_reads_as(key) if rng.random() < 0.7 else key  # `yes:` as well as `'yes':`
        pairs.insert(rng.randrange(len(pairs) + 1), (written, rng.choice([1, "x", None, [1], {"a": 1}])))
        return emitted(put(spot, pairs, tree), f"unknown key {key!r}")
    if op == "missing_key":
        candidates = [s for s in every if typed(kind, s) and s.path and isinstance(s.key, str)
                      and (s.parent_key if len(s.path) > 1 else None, s.key) in kind.required
                      and isinstance(s.parent, dict)]
        spot = rng.choice(candidates)
        del spot.parent[spot.key]
        if spot.key == "names" and spot.parent_key in EDIT_OPS:  # optional where `target:` needs none
            return emitted(tree, "target: assignment needs `names`")
        return emitted(tree, f"missing required key {spot.key!r}")
    if op == "wrong_type":
        spot = rng.choice([s for s in every if typed(kind, s)])
        # a string, a number or a boolean all fit a Scalar (list_insert values, after, dict_set
        # key); argv and env items may be numbers (they become words)
        lenient = spot.parent_key in {"values", "command", "env"} or spot.key in ("after", "key")
        if isinstance(spot.value, dict):
            wrong: list[Any] = [["x"], "x", 1, True]
        elif isinstance(spot.value, list):
            wrong = ["x", {"x": 1}, 1, False]
        elif isinstance(spot.value, bool) and not lenient:
            wrong = [{"x": 1}, ["x"], 1, "true", 0.5]
        elif isinstance(spot.value, (int, float)) and not lenient:
            wrong = [{"x": 1}, ["x"], True, False, str(spot.value)]
        else:
            wrong = [{"x": 1}, [spot.value], [[1]]]
        return emitted(put(spot, rng.choice(wrong), tree))
    if op == "template":
        spot = rng.choice([s for s in every if isinstance(s.value, str)])
        value = spot.value
        where = rng.randrange(len(value) + 1)
        broken = value[:where] + rng.choice(BROKEN_TEMPLATES) + value[where:]
        return emitted(put(spot, broken, tree), "broken template", "undefined variable", "not substituted")
    # damage at random: may still be a valid file
    content = text.encode() if rng.random() < 0.5 else dump(tree, rng).encode()
    if op == "truncate":
        return case(content[:rng.randrange(len(content))], False)
    if op == "flip":
        data = bytearray(content)
        for _ in range(rng.randrange(1, 6)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return case(bytes(data), False)
    if op == "punctuation":
        for _ in range(rng.randrange(1, 4)):
            content = at_random(content, rng.choice(list(b"[]{}:,&*!|>'\"%@`#-?\t\\")).to_bytes(1, "big"))
        return case(content, False)
    if op == "lines":
        lines = content.splitlines(keepends=True)
        i = rng.randrange(len(lines))
        lines[i:i + 1] = rng.choice([[], [lines[i], lines[i]], [b" " + lines[i]], [lines[i].lstrip()]])
        return case(b"".join(lines), False)
    raise AssertionError(op)


EDIT_OPS = {kind for kind, op in EDIT_KINDS.items() if issubclass(op, Where)}  # `names` needed by target
SURE_OPS = ["not_utf8", "control", "too_big", "deep_text", "deep_tree", "bomb", "many_aliases", "loop",
            "undefined_alias", "tag", "tag_key", "merge", "duplicate_key", "complex_key", "unknown_key",
            "missing_key", "wrong_type", "template"]
MAYBE_OPS = ["truncate", "flip", "punctuation", "lines"]

RECIPES = Kind("recipes", RECIPE_BASES, load_recipe, RECIPE_FREE, RECIPE_FREE_KEYS, REQUIRED, templated=True)
INVENTORIES = Kind("inventories", INVENTORY_BASES, load_inventory, set(), INVENTORY_FREE_KEYS, INVENTORY_REQUIRED,
                   templated=False)


def ops_for(kind: Kind) -> list[str]:
    return [op for op in SURE_OPS if kind.templated or op != "template"] + MAYBE_OPS


# ---------------------------------------------------------------------------- the property


@dataclass
class Tally:
    ran: int = 0
    malformed: int = 0  # refused with a clean line (all the sure ones, and damaged ones that were)
    valid: int = 0  # damaged at random, still valid
    slowest: float = 0.0
    by_op: dict[str, int] = field(default_factory=dict)


def check(kind: Kind, case: Case, path: Path, tally: Tally) -> None:
    path.write_bytes(case.content)
    start = time.process_time()
    with time_limit():
        try:
            kind.load(path)
        except UsageError as exc:
            message = str(exc)
        except Exception as exc:  # noqa: BLE001 - the point: nothing but UsageError
            raise AssertionError(f"{case.op} on {case.name}: {type(exc).__name__}: {exc}\n"
                                 f"{case.content[:3000]!r}") from exc
        else:
            message = None
    elapsed = time.process_time() - start  # reported, never asserted
    tally.ran += 1
    tally.slowest = max(tally.slowest, elapsed)
    tally.by_op[case.op] = tally.by_op.get(case.op, 0) + 1
    if message is None:
        assert not case.sure, f"{case.op} on {case.name} loaded, but it is malformed:\n{case.content[:3000]!r}"
        tally.valid += 1
        return
    line, column = check_message(message, path)
    assert 1 <= line <= case.content.count(b"\n") + 2 and column >= 1, message
    if case.expect:
        assert any(e in message for e in case.expect), f"{case.op} on {case.name}: {message}"
    tally.malformed += 1


def run_property(kind: Kind, tmp_path: Path) -> Tally:
    tally = Tally()
    path = tmp_path / f"fuzzed-{kind.label}.yaml"

    @settings(max_examples=EXAMPLES[kind.label], derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(rng=st.randoms(use_true_random=False))
    def property_(rng: random.Random) -> None:
        check(kind, mutate(kind, rng.choice(ops_for(kind)), rng), path, tally)

    property_()
    print(f"\n{kind.label}: {tally.ran} generated, {tally.malformed} malformed refused cleanly, "
          f"{tally.valid} still valid after random damage, slowest {tally.slowest:.3f} s of CPU; per op {tally.by_op}")
    return tally


def test_every_edit_op_is_in_the_base() -> None:
    """The recipe every mutation starts from has each edit op of the registry (edits.OPS)."""
    steps = yaml.safe_load(EVERY_KIND)["steps"]
    used = {op for step in steps if "patch" in step for op in step["patch"]["edit"]}
    assert used == set(EDIT_KINDS), f"add a step for {sorted(set(EDIT_KINDS) - used)} to EVERY_KIND"


@pytest.mark.parametrize("kind", [RECIPES, INVENTORIES], ids=lambda k: k.label)
def test_the_bases_are_valid(kind: Kind, tmp_path: Path) -> None:
    for name, text in kind.bases.items():
        path = tmp_path / name
        path.write_text(text)
        kind.load(path)
        for op in ops_for(kind):  # and every mutation applies to every base
            mutate(kind, op, random.Random(f"{name}{op}"))


@pytest.mark.parametrize("kind", [RECIPES, INVENTORIES], ids=lambda k: k.label)
def test_malformed_files_give_one_clean_line(kind: Kind, tmp_path: Path) -> None:
    tally = run_property(kind, tmp_path)
    assert tally.ran >= EXAMPLES[kind.label]
    assert tally.malformed >= MALFORMED[kind.label], tally
    every_op = EXAMPLES[kind.label] // 65  # ~20 in 1,300: each kind of malformation well exercised
    assert set(tally.by_op) == set(ops_for(kind)) and min(tally.by_op.values()) >= every_op, tally.by_op


# ---------------------------------------------------------------------------- through the CLI

MEMORY_LIMIT = 1 << 30  # address space: an expanded bomb would need far more
CPU_LIMIT_S = 30  # CPU seconds for one `patchkit` run (~0.4 s measured): bounded work, not wall time


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_LIMIT_S, CPU_LIMIT_S))


def cli_cases(kind: Kind) -> list[Case]:
    """A fixed sample: every sure mutation once, drawn with a fixed seed."""
    rng = random.Random(f"issue-11-{kind.label}")
    return [mutate(kind, op, rng) for op in ops_for(kind) if op in SURE_OPS]


@pytest.mark.parametrize("kind", [RECIPES, INVENTORIES], ids=lambda k: k.label)
def test_the_cli_exits_2_with_one_line(kind: Kind, tmp_path: Path) -> None:
    slowest = 0.0
    cases = cli_cases(kind)
    for i, case in enumerate(cases):
        path = tmp_path / f"{i:02d}-{case.op}.yaml"
        path.write_bytes(case.content)
        argv = ["validate", str(path)] if kind is RECIPES else ["history", "-i", str(path)]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run([PATCHKIT, *argv], capture_output=True, text=True, timeout=300, check=False,
                              preexec_fn=_limit_memory)  # the timeout only guards a hang; RLIMIT_CPU bounds the work
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        slowest = max(slowest, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        shown = f"{case.op} on {case.name}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        assert proc.returncode == 2, shown
        assert proc.stdout == "", shown
        assert proc.stderr.startswith("patchkit: ") and proc.stderr.endswith("\n"), shown
        message = proc.stderr.removeprefix("patchkit: ").removesuffix("\n")
        check_message(message, path)
        assert not case.expect or any(e in message for e in case.expect), shown
    print(f"\n{kind.label} through the CLI: {len(cases)} files, all exit 2 with FILE:LINE:COL lines, "
          f"slowest {slowest:.2f} s of CPU")
