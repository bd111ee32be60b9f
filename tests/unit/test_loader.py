"""The recipe and inventory loader never crashes, hangs or says something vague.

One test per finding of the outside fault run: every malformed file gives a UsageError,
one line `FILE:LINE:COL: field: problem` per problem (all of them, in the file's order),
with bounded work (a CPU-time guard, loadercheck) and bounded memory; no test asserts
seconds. A few guards at the end keep what valid recipes rely on (ints where numbers are
wanted, `-e` overrides).
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest
from tests.helpers import REPO, run_many

from patchkit.base import yamlsource
from patchkit.base.errors import UsageError
from patchkit.fleet.inventory import load_inventory
from patchkit.host.transport.ssh_scheme import SSHOptions
from patchkit.recipe.model import load_recipe
from patchkit.base.yamlsource import MAX_ALIAS_VALUES, MAX_BYTES, MAX_DEPTH
from loadercheck import check_message, place_of, time_limit, usage_error

RECIPE = """\
name: demo
vars: {port: 8000, rate: 0.3, tag: kimi_k2}
steps:
  - name: whitelist
    patch:
      package: toyllm
      modules: [toyllm.config.speculative]
      edit:
        list_insert: {names: [eagle3_target_supported], values: ["{{ tag }}"]}
  - name: serve
    launch:
      command: [python, -m, http.server, "{{ port }}"]
      health: {url: "http://127.0.0.1:{{ port }}/", timeout_s: 30}
      ready: {completion: {prompt: Hello, max_tokens: 8}}
      spec_decode: {min_acceptance_rate: "{{ rate }}"}
"""

INVENTORY = """\
hosts:
  gpu-1: {address: gpu-node-1.internal, port: 22, user: root}
  gpu-2: {address: local, become: true}
groups: {kimi: [gpu-1, gpu-2]}
defaults: {python: /usr/bin/python3}
"""


def write(tmp_path: Path, content: str | bytes, name: str = "r.yaml") -> Path:
    path = tmp_path / name
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


def recipe_error(tmp_path: Path, content: str | bytes) -> str:
    return usage_error(load_recipe, write(tmp_path, content))[0]


def inventory_error(tmp_path: Path, content: str | bytes) -> str:
    return usage_error(load_inventory, write(tmp_path, content, "inv.yaml"))[0]


def at(message: str, tmp_path: Path, name: str = "r.yaml") -> tuple[int, int]:
    return place_of(message, tmp_path / name)


def test_the_bases_are_valid(tmp_path: Path) -> None:
    loaded = load_recipe(write(tmp_path, RECIPE))
    assert loaded.recipe.steps[1].launch.command[-1] == "8000"
    assert load_inventory(write(tmp_path, INVENTORY, "inv.yaml")).hosts["gpu-1"].options_as(SSHOptions).port == 22


# ---------------------------------------------------------------------------- bytes and characters


def test_bytes_that_are_not_utf8_name_their_line_and_column(tmp_path: Path) -> None:
    message = recipe_error(tmp_path, RECIPE.encode().replace(b"name: whitelist", b"name: wh\xe9telist"))
    assert at(message, tmp_path) == (4, 13) and "not UTF-8" in message and "0xe9" in message
    message = inventory_error(tmp_path, INVENTORY.encode() + b"# caf\xc3\n")
    assert place_of(message, tmp_path / "inv.yaml") == (6, 6)


@pytest.mark.parametrize("char", ["\x00", "\x01", "\x08", "\x1b", "\x7f"])
def test_control_characters_name_their_line_and_column(tmp_path: Path, char: str) -> None:
    message = recipe_error(tmp_path, RECIPE.replace("prompt: Hello", f"prompt: Hel{char}lo"))
    assert at(message, tmp_path) == (14, 39), message
    assert f"U+{ord(char):04X}" in message


def test_a_file_larger_than_the_limit_is_refused_unread(tmp_path: Path) -> None:
    message = recipe_error(tmp_path, RECIPE + "#" * MAX_BYTES)
    assert at(message, tmp_path) == (1, 1) and "larger than" in message


# ---------------------------------------------------------------------------- nesting, aliases


@pytest.mark.parametrize("levels", [MAX_DEPTH + 1, 900, 5000, 200_000])
def test_deep_nesting_is_refused_at_its_place(tmp_path: Path, levels: int) -> None:
    message = recipe_error(tmp_path, RECIPE.replace("vars: {", f"vars: {{deep: {'[' * levels}{']' * levels}, "))
    line, _ = at(message, tmp_path)
    assert line == 2 and "nest" in message, message


def test_deep_block_nesting_is_refused(tmp_path: Path) -> None:
    nested = "".join(f"{'  ' * (i + 1)}k{i}:\n" for i in range(MAX_DEPTH + 5))
    message = recipe_error(tmp_path, RECIPE.replace("vars: {port: 8000, rate: 0.3, tag: kimi_k2}\n",
                                                    "vars:\n" + nested))
    assert f"nested deeper than {MAX_DEPTH} levels" in message and at(message, tmp_path)[0] > 2


def billion_laughs(levels: int = 9) -> str:
    rows = ['  l0: &l0 "lol"']
    rows += [f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, levels + 1)]
    return "\n".join(rows) + "\n"


def test_an_alias_bomb_is_refused_before_it_expands(tmp_path: Path) -> None:
    path = write(tmp_path, RECIPE.replace("vars: {port: 8000, rate: 0.3, tag: kimi_k2}\n",
                                          "vars:\n" + billion_laughs()))
    tracemalloc.start()
    try:
        message, _ = usage_error(load_recipe, path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "aliases expand to more than" in message and "vars.l" in message, message
    assert peak < 20 << 20, f"{peak / 2**20:.0f} MiB to refuse a bomb"  # refused before it expands


def test_an_alias_bomb_in_an_inventory_is_refused(tmp_path: Path) -> None:
    message = inventory_error(tmp_path, INVENTORY.replace("groups: {kimi: [gpu-1, gpu-2]}\n",
                                                          "groups:\n" + billion_laughs()))
    assert "aliases expand to more than" in message


def test_many_small_aliases_are_counted(tmp_path: Path) -> None:
    uses = ", ".join(["*a"] * (MAX_ALIAS_VALUES // 2))
    message = recipe_error(tmp_path, RECIPE.replace("vars: {", f"vars: {{a: &a [1], b: [{uses}], "))
    assert "aliases" in message and at(message, tmp_path)[0] == 2


def test_a_recursive_alias_is_a_loop_not_a_crash(tmp_path: Path) -> None:
    message = recipe_error(tmp_path, RECIPE.replace("vars: {", "vars: {loop: &x [1, *x], "))
    assert at(message, tmp_path)[0] == 2 and "loop" in message and "vars.loop[1]" in message
    message = inventory_error(tmp_path, "hosts: &h {a: *h}\n")
    assert "loop" in message


def test_aliases_within_the_limits_still_work(tmp_path: Path) -> None:
    loaded = load_recipe(write(tmp_path, RECIPE.replace("modules: [toyllm.config.speculative]",
                                                        "modules: &mods [toyllm.config.speculative]")
                               .replace("list_insert: {names:", "list_insert: {within: null, names:")
                               + "  - name: again\n    patch: {package: toyllm, modules: *mods, edit: "
                                 "{list_insert: {names: [x], values: [y]}}}\n"))
    assert loaded.recipe.steps[2].patch.modules == ["toyllm.config.speculative"]


def test_undefined_and_duplicate_anchors_are_one_line(tmp_path: Path) -> None:
    assert "undefined alias 'nope'" in recipe_error(tmp_path, RECIPE.replace("[python, -m", "[*nope, -m"))
    assert "anchor" in recipe_error(tmp_path, RECIPE.replace("port: 8000, rate: 0.3", "port: &p 8000, rate: &p 0.3"))


# ---------------------------------------------------------------------------- tags, merge keys


@pytest.mark.parametrize("tagged", [
    "!!python/object:os.system x", "!!python/object/apply:os.system [echo]", "!!python/name:os.system ''",
    "!!binary aGk=", "!!set {a: null}", "!!omap [a: 1]", "!!timestamp 2024-01-01", "!custom x",
    "!<tag:example.com,2000:x> y", "!!merge x",
])
def test_tags_beyond_the_core_ones_are_refused_with_their_place(tmp_path: Path, tagged: str) -> None:
    message = recipe_error(tmp_path, RECIPE.replace("prompt: Hello", f"prompt: {tagged}"))
    assert at(message, tmp_path) == (14, 36), message
    assert "YAML tag" in message and "not allowed" in message
    assert "steps[1].launch.ready.completion.prompt" in message


def test_a_tagged_key_is_refused(tmp_path: Path) -> None:
    message = inventory_error(tmp_path, INVENTORY.replace("groups:", "!!python/name:os.system groups:"))
    assert "YAML tag" in message and place_of(message, tmp_path / "inv.yaml") == (4, 1)


def test_core_tags_are_fine(tmp_path: Path) -> None:
    loaded = load_recipe(write(tmp_path, RECIPE.replace("prompt: Hello", "prompt: !!str 123")
                               .replace("max_tokens: 8", "max_tokens: !!int '8'")))
    assert loaded.recipe.steps[1].launch.ready.completion.prompt == "123"
    assert loaded.recipe.steps[1].launch.ready.completion.max_tokens == 8


def test_merge_keys_are_refused_by_name(tmp_path: Path) -> None:
    message = recipe_error(tmp_path, RECIPE.replace("  - name: serve\n", "  - <<: {name: serve}\n"))
    assert at(message, tmp_path) == (10, 5) and "merge keys (<<) are not supported" in message
    message = inventory_error(tmp_path, "hosts:\n  a: &d {port: 22}\n  b:\n    <<: *d\n")
    assert place_of(message, tmp_path / "inv.yaml") == (4, 5) and "hosts.b" in message


# ---------------------------------------------------------------------------- keys


@pytest.mark.parametrize("key", ["str", "int", "float", "bool", "none"])
def test_a_key_named_like_a_type_is_reported_by_its_name(tmp_path: Path, key: str) -> None:
    top = recipe_error(tmp_path, RECIPE + f"{key}: 1\n")
    assert at(top, tmp_path) == (16, 1) and f"unknown key {key!r}" in top, top
    nested = recipe_error(tmp_path, RECIPE.replace("  - name: serve\n", f"  - name: serve\n    {key}: 1\n"))
    assert at(nested, tmp_path) == (11, 5) and f"steps[1]: unknown key {key!r}" in nested, nested


@pytest.mark.parametrize("key", ["yes", "no", "on", "true", "null", "~", "1", "0x10", "1.5", "'yes'"])
def test_keys_that_look_like_yaml_words_are_reported_by_their_text(tmp_path: Path, key: str) -> None:
    message = recipe_error(tmp_path, RECIPE.replace("  - name: serve\n", f"  - name: serve\n    {key}: 1\n"))
    assert f"unknown key {key.strip(chr(39))!r}" in message and at(message, tmp_path) == (11, 5), message
    message = inventory_error(tmp_path, INVENTORY.replace("user: root", f"{key}: root"))
    assert f"hosts.gpu-1: unknown key {key.strip(chr(39))!r}" in message, message


def test_host_names_that_look_like_numbers_are_names(tmp_path: Path) -> None:
    inventory = load_inventory(write(tmp_path, "hosts: {1: {address: a}, yes: {}}\ngroups: {g: ['1', 'yes']}\n"))
    assert list(inventory.hosts) == ["1", "yes"]


def test_duplicate_and_complex_keys_are_one_line(tmp_path: Path) -> None:
    assert "duplicate key 'name'" in recipe_error(tmp_path, RECIPE + "name: again\n")
    assert "duplicate key '1'" in inventory_error(tmp_path, "hosts: {1: {}, '1': {}}\n")
    assert "a key must be a plain string" in recipe_error(tmp_path, RECIPE + "? [a, b]\n: c\n")


# ---------------------------------------------------------------------------- every problem, a line each


def test_every_problem_is_listed_a_line_each_in_the_files_order(tmp_path: Path) -> None:
    text = RECIPE.replace("modules: [toyllm.config.speculative]", "modules: [1, 2, 3]").replace(
        "timeout_s: 30}", "timeout_s: 30, retries: 3}").replace("max_tokens: 8", "max_tokens: true")
    message = recipe_error(tmp_path, text)
    file = tmp_path / "r.yaml"
    assert message.splitlines() == [
        f"{file}:7:17: steps[0].patch.modules[0]: expected a string, got 1",
        f"{file}:7:20: steps[0].patch.modules[1]: expected a string, got 2",
        f"{file}:7:23: steps[0].patch.modules[2]: expected a string, got 3",
        f"{file}:13:68: steps[1].launch.health: unknown key 'retries'",
        f"{file}:14:43: steps[1].launch.ready.completion.max_tokens: expected an integer, got true",
    ]


def test_validate_and_apply_list_the_same_problems_through_the_cli(tmp_path: Path) -> None:
    path = write(tmp_path, RECIPE.replace("package: toyllm", "pakage: toyllm").replace("  - name: serve\n    launch:",
                                                                                      "  - name: serve\n    lanch:"))
    inventory = write(tmp_path, "hosts: {local: {}}\n", "inv.yaml")
    validate, apply = run_many([["validate", str(path)], ["apply", str(path), "-i", str(inventory)]])
    assert validate.returncode == apply.returncode == 2, (validate, apply)
    assert validate.stderr == apply.stderr == (
        f"patchkit: {path}:6:7: steps[0].patch: unknown key 'pakage' (did you mean 'package'?)\n"
        f"{path}:11:5: steps[1]: unknown key 'lanch' (did you mean 'launch'?)\n")


def test_problems_found_while_reading_are_all_listed_too(tmp_path: Path) -> None:
    text = (RECIPE.replace("{{ port }}/", "{{ port }/").replace("prompt: Hello", "prompt: !!binary aGk=")
            .replace('"{{ tag }}"', '"{{ nosuch }}"') + "name: again\n")
    file = tmp_path / "r.yaml"
    assert recipe_error(tmp_path, text).splitlines() == [
        f"{file}:9:67: steps[0].patch.edit.list_insert.values[0]: undefined variable 'nosuch' "
        "(defined: port, rate, tag)",
        f"{file}:13:39: steps[1].launch.health.url: broken template '{{{{ port }}/': "
        "a variable is written {{ name }}",
        f"{file}:14:36: steps[1].launch.ready.completion.prompt: YAML tag !!binary is not allowed (only plain "
        "strings, numbers, booleans, null, mappings and lists)",
        f"{file}:16:1: duplicate key 'name'",
    ]


def test_a_broken_recipe_and_inventory_are_listed_together_grouped_per_file(tmp_path: Path) -> None:
    path = write(tmp_path, RECIPE.replace("package: toyllm", "pakage: toyllm"))
    inventory = write(tmp_path, INVENTORY.replace("port: 22", "port: '22'").replace("become:", "becom:"), "inv.yaml")
    apply, = run_many([["apply", str(path), "-i", str(inventory)]])
    assert apply.returncode == 2, apply
    assert apply.stderr == (
        f"patchkit: {path}:6:7: steps[0].patch: unknown key 'pakage' (did you mean 'package'?)\n"
        f"{inventory}:2:41: hosts.gpu-1.port: expected an integer, got '22'\n"
        f"{inventory}:3:27: hosts.gpu-2: unknown key 'becom' (did you mean 'become'?)\n")


def test_a_flood_of_errors_lists_the_first_and_says_there_are_more(tmp_path: Path) -> None:
    message = recipe_error(tmp_path, RECIPE.replace("modules: [toyllm.config.speculative]",
                                                    "modules: [" + "1," * 100_000 + "]"))  # bounded: 20 lines, not 100,000
    lines = message.splitlines()
    assert len(lines) == yamlsource.MAX_LISTED and at(message, tmp_path) == (7, 17)
    assert lines[-1].endswith("steps[0].patch.modules[19]: expected a string, got 1 (and many more problems)")
    message = recipe_error(tmp_path, RECIPE.replace("modules: [toyllm.config.speculative]",
                                                    "modules: [" + "1," * 25 + "]"))
    assert message.splitlines()[-1].endswith("modules[19]: expected a string, got 1 (and 5 more problems)")


def test_unknown_keys_step_kinds_and_edit_ops_get_the_nearest_allowed_name(tmp_path: Path) -> None:
    file = tmp_path / "r.yaml"
    assert recipe_error(tmp_path, RECIPE.replace("list_insert:", "list_insrt:")) == (
        f"{file}:9:9: steps[0].patch.edit: unknown key 'list_insrt' (did you mean 'list_insert'?)")
    assert recipe_error(tmp_path, RECIPE.replace("    launch:", "    lanch:")) == (
        f"{file}:11:5: steps[1]: unknown key 'lanch' (did you mean 'launch'?)")
    assert recipe_error(tmp_path, RECIPE.replace("timeout_s: 30", "timeout: 30")) == (
        f"{file}:13:53: steps[1].launch.health: unknown key 'timeout' (did you mean 'timeout_s'?)")
    assert recipe_error(tmp_path, RECIPE.replace("  - name: serve\n", "  - name: serve\n    verfy: {}\n")) == (
        f"{file}:11:5: steps[1]: unknown key 'verfy' (did you mean 'verify'?)")
    assert recipe_error(tmp_path, RECIPE + "keep_run: 3\n") == (
        f"{file}:16:1: unknown key 'keep_run' (did you mean 'keep_runs'?)")
    assert recipe_error(tmp_path, RECIPE + "zzz: 3\n") == f"{file}:16:1: unknown key 'zzz'"
    inv = tmp_path / "inv.yaml"
    assert inventory_error(tmp_path, INVENTORY.replace("port: 22", "prot: 22")) == (
        f"{inv}:2:41: hosts.gpu-1: unknown key 'prot' (did you mean 'port'?)")
    assert inventory_error(tmp_path, INVENTORY.replace("defaults:", "default:")) == (
        f"{inv}:5:1: unknown key 'default' (did you mean 'defaults'?)")


def test_an_unknown_step_name_gets_the_nearest_step(tmp_path: Path) -> None:
    recipe = load_recipe(write(tmp_path, RECIPE)).recipe
    with pytest.raises(UsageError) as caught:
        recipe.select(["whitelst", "serve"])
    assert str(caught.value) == ("--steps: no step named whitelst in recipe demo (steps: whitelist, serve); "
                                 "did you mean whitelist?")
    with pytest.raises(UsageError) as caught:
        recipe.select(["zzz"])
    assert str(caught.value) == "--steps: no step named zzz in recipe demo (steps: whitelist, serve)"


def test_a_tab_in_the_indentation_is_named_as_a_tab(tmp_path: Path) -> None:
    file = tmp_path / "r.yaml"
    assert recipe_error(tmp_path, RECIPE.replace("  - name: serve", "\t- name: serve")) == (
        f"{file}:10:1: not valid YAML: a tab in the indentation (YAML indents with spaces only)")
    assert recipe_error(tmp_path, RECIPE.replace("      package: toyllm", "    \t  package: toyllm")) == (
        f"{file}:6:5: not valid YAML: a tab in the indentation (YAML indents with spaces only)")
    assert inventory_error(tmp_path, INVENTORY.replace("  gpu-2:", "\tgpu-2:")) == (
        f"{tmp_path / 'inv.yaml'}:3:1: not valid YAML: a tab in the indentation (YAML indents with spaces only)")


def test_scalars_are_read_as_yaml_1_2_says(tmp_path: Path) -> None:
    text = RECIPE.replace("vars: {", "vars: {a: no, b: off, c: on, d: yes, e: y, f: n, g: 1_000, h: 0o17, i: 017, "
                          "j: 0x1f, k: 1e3, l: True, m: ~, o: .inf, ")
    text = text.replace('values: ["{{ tag }}"]', "values: [no, off, on, yes]")
    loaded = load_recipe(write(tmp_path, text))
    odd = {k: v for k, v in loaded.variables.items() if k not in ("port", "rate", "tag")}
    assert odd == {"a": "no", "b": "off", "c": "on", "d": "yes", "e": "y", "f": "n", "g": "1_000", "h": 15, "i": 17,
                   "j": 31, "k": 1000.0, "l": True, "m": None, "o": float("inf")}
    assert loaded.recipe.steps[0].patch.edit.list_insert.values == ["no", "off", "on", "yes"]
    assert loaded.variables["port"] == 8000 and loaded.variables["rate"] == 0.3  # what the plan shows: unchanged
    assert yamlsource.plain_scalar("no") == "no" and yamlsource.plain_scalar("017") == 17


def test_a_union_mismatch_is_one_line_saying_what_fits(tmp_path: Path) -> None:
    message = recipe_error(tmp_path, RECIPE.replace('values: ["{{ tag }}"]', "values: [{a: 1}]"))
    assert at(message, tmp_path) == (9, 66)
    assert "expected a string, an integer, a number or a boolean (true or false), got a mapping" in message


def test_a_huge_value_in_a_message_is_cut_keeping_place_and_reason(tmp_path: Path) -> None:
    message = recipe_error(tmp_path, RECIPE.replace("  - name: serve\n", f"  - name: serve\n    {'k' * 1010}: 1\n"))
    assert at(message, tmp_path) == (11, 5) and "steps[1]: unknown key 'kkk" in message and message.endswith("kkk'")
    message = recipe_error(tmp_path, RECIPE.replace("package: toyllm", f"package: toyllm\n      versions: '{'<' * 5000}'"))
    assert "steps[0].patch.versions: '<<<" in message and message.endswith("is not a version specifier like '>=0.10.1,<0.22'")


def test_yaml_syntax_errors_are_one_line(tmp_path: Path) -> None:
    message = recipe_error(tmp_path, RECIPE.replace("[python, -m,", "[python, -m,,"))
    assert at(message, tmp_path)[0] == 12 and "not valid YAML" in message
    message = recipe_error(tmp_path, RECIPE + "---\nname: second\n")
    assert "not valid YAML" in message and at(message, tmp_path)[0] == 16


# ---------------------------------------------------------------------------- templates


@pytest.mark.parametrize("broken", ["{{ port", "{{}}", "{{ port }", "{{ 1port }}", "{{ port-1 }}", "{ {port}} {{"])
def test_broken_templates_are_errors_at_their_place(tmp_path: Path, broken: str) -> None:
    message = recipe_error(tmp_path, RECIPE.replace("http://127.0.0.1:{{ port }}/", f"http://127.0.0.1:{broken}/"))
    column = 39 + broken.index("{{")
    assert at(message, tmp_path) == (13, column), message
    assert "steps[1].launch.health.url: broken template" in message


def test_a_broken_template_in_a_block_scalar_names_its_line(tmp_path: Path) -> None:
    text = RECIPE + "  - name: probe\n    check:\n      python: |\n        import sys\n        print('{{ port')\n"
    message = recipe_error(tmp_path, text)
    assert at(message, tmp_path) == (20, 16) and "steps[2].check.python: broken template" in message


def test_an_undefined_variable_names_its_column(tmp_path: Path) -> None:
    message = recipe_error(tmp_path, RECIPE.replace("{{ port }}/", "{{ prot }}/"))
    assert at(message, tmp_path) == (13, 39) and "undefined variable 'prot'" in message


def test_vars_are_not_templated_and_say_so(tmp_path: Path) -> None:
    message = recipe_error(tmp_path, RECIPE.replace("tag: kimi_k2", "tag: '{{ port }}'"))
    assert at(message, tmp_path) == (2, 37) and "vars.tag" in message and "not substituted" in message
    assert "broken template" in recipe_error(tmp_path, RECIPE.replace("tag: kimi_k2", "tag: '{{ port'"))
    braces = load_recipe(write(tmp_path, RECIPE.replace("tag: kimi_k2", "tag: \"{{ '{{' }}x\"")))
    assert braces.variables["tag"] == "{{x" and braces.recipe.steps[0].patch.edit.op.values == ["{{x"]


def test_literal_braces_are_written_as_a_template(tmp_path: Path) -> None:
    text = RECIPE + "  - name: probe\n    check:\n      python: |\n        print(f\"{{ '{{' }}x{{ '}}' }}\")\n"
    assert load_recipe(write(tmp_path, text)).recipe.steps[2].check.python == 'print(f"{{x}}")\n'


def test_templates_cannot_blow_up_the_file(tmp_path: Path) -> None:
    big = "x" * 200_000
    refs = ", ".join(['"{{ big }}{{ big }}"'] * 20)
    message = recipe_error(tmp_path, RECIPE.replace("vars: {", f"vars: {{big: {big}, ") + f"description: [{refs}]\n")
    assert "templates make the file more than" in message


def test_whole_value_templates_of_big_lists_are_counted(tmp_path: Path) -> None:
    items = ", ".join(["x"] * 2000)
    refs = "\n".join(f"    - '{{{{ many }}}}'" for _ in range(10))
    message = recipe_error(tmp_path, RECIPE.replace("vars: {", f"vars: {{many: [{items}], ")
                           + f"description:\n  - \n{refs}\n".replace("  - \n", ""))
    assert "variables expand to more than" in message


# ---------------------------------------------------------------------------- strict types


@pytest.mark.parametrize("old, new, field, words", [
    ("max_tokens: 8", "max_tokens: true", "steps[1].launch.ready.completion.max_tokens", "expected an integer, got true"),
    ("max_tokens: 8", "max_tokens: 8.5", "steps[1].launch.ready.completion.max_tokens", "expected an integer, got 8.5"),
    ("max_tokens: 8", "max_tokens: '8'", "steps[1].launch.ready.completion.max_tokens", "expected an integer, got '8'"),
    ("prompt: Hello", "prompt: 5", "steps[1].launch.ready.completion.prompt", "expected a string, got 5"),
    ("prompt: Hello", "prompt: false", "steps[1].launch.ready.completion.prompt", "expected a string, got false"),
    ("timeout_s: 30", "timeout_s: true", "steps[1].launch.health.timeout_s", "expected a number, got true"),
    ("timeout_s: 30", "timeout_s: '30'", "steps[1].launch.health.timeout_s", "expected a number, got '30'"),
    ("name: demo", "name: 7", "name", "expected a string, got 7"),
    ("package: toyllm", "package: [toyllm]", "steps[0].patch.package", "expected a string, got a list"),
    ("names: [eagle3_target_supported]", "names: [1]", "names[0]", "expected a string, got 1"),
    ("[python, -m,", "[python, true,", "steps[1].launch.command[1]", "expected a string, got true"),
])
def test_types_are_strict(tmp_path: Path, old: str, new: str, field: str, words: str) -> None:
    assert old in RECIPE
    message = recipe_error(tmp_path, RECIPE.replace(old, new))
    assert field in message and words in message, message


@pytest.mark.parametrize("old, new, words", [
    ("port: 22", "port: '22'", "hosts.gpu-1.port: expected an integer, got '22'"),
    ("port: 22", "port: true", "hosts.gpu-1.port: expected an integer, got true"),
    ("become: true", "become: 'yes'", "hosts.gpu-2.become: expected a boolean (true or false), got 'yes'"),
    ("become: true", "become: 1", "hosts.gpu-2.become: expected a boolean (true or false), got 1"),
    ("user: root", "user: 0", "hosts.gpu-1.user: expected a string, got 0"),
    ("[gpu-1, gpu-2]", "[gpu-1, 2]", "groups.kimi[1]: expected a string, got 2"),
])
def test_inventory_types_are_strict(tmp_path: Path, old: str, new: str, words: str) -> None:
    assert old in INVENTORY
    message = inventory_error(tmp_path, INVENTORY.replace(old, new))
    assert words in message, message


@pytest.mark.parametrize("value, words", [
    ("2024-13-45", None),             # a date YAML 1.1 would build (and crash on): read as text
    ("=", None),
    ("0x_", None),                    # YAML 1.2: not an integer, so text
    ("0b_", None),
    ("1" + ":10" * 60, None),         # YAML 1.1's base 60 (quadratic in int()) is text in 1.2
    ("!!int 0x_", "is not an integer"),
    ("!!int " + "1" * 101, "longer than"),
    ("!!int 12abc", "is not an integer"),
    ("!!float ''", "is not a number"),
    ("!!bool maybe", "is not a boolean"),
])
def test_scalars_that_once_crashed_construction(tmp_path: Path, value: str, words: str | None) -> None:
    text = RECIPE.replace("vars: {", f"vars: {{odd: {value}, ")
    if words is None:
        assert load_recipe(write(tmp_path, text)).variables["odd"] == value
    else:
        message = recipe_error(tmp_path, text)
        assert at(message, tmp_path) == (2, 13) and "vars.odd" in message and words in message, message


@pytest.mark.parametrize("edit, words", [
    ('set_value: {names: [a], expr: "' + "1+" * 100_000 + '1"}', "too deeply nested"),
    ('dict_set: {names: [a], key: k, expr: "' + "-" * 100_000 + '1"}', "too deeply nested"),
    ('replace_function: {function: f, body: "x = ' + "a." * 100_000 + 'b"}', "body of f is not valid Python"),
    ('replace_function: {function: f, body: "x = ' + "not " * 50_000 + 'y"}', "too deeply nested"),
])
def test_code_too_deep_for_the_parser_is_a_recipe_error(tmp_path: Path, edit: str, words: str) -> None:
    message = recipe_error(tmp_path, RECIPE.replace(
        'list_insert: {names: [eagle3_target_supported], values: ["{{ tag }}"]}', edit))
    assert at(message, tmp_path) == (9, 9) and "steps[0].patch.edit" in message and words in message, message


def test_errors_across_fields_name_the_field(tmp_path: Path) -> None:
    message = recipe_error(tmp_path, RECIPE.replace("name: serve", "name: whitelist"))
    assert at(message, tmp_path) == (3, 1) and "steps: two steps are named 'whitelist'" in message
    message = inventory_error(tmp_path, INVENTORY.replace("[gpu-1, gpu-2]", "[gpu-1, gpu-3]"))
    assert place_of(message, tmp_path / "inv.yaml") == (4, 1)
    assert "groups: group 'kimi' names unknown host 'gpu-3'" in message
    message = inventory_error(tmp_path, INVENTORY.replace("groups: {kimi:", "groups: {gpu-1:"))
    assert "groups: group 'gpu-1' has the name of a host" in message
    assert "hosts: expected a mapping" in inventory_error(tmp_path, INVENTORY.replace("hosts:\n", "hosts: 1\nx:\n"))


def test_a_recipe_that_is_not_a_mapping(tmp_path: Path) -> None:
    for text in ("- a\n- b\n", "just text\n", "vars: [1]\nname: x\n"):
        assert at(recipe_error(tmp_path, text), tmp_path)[0] == 1


def test_an_empty_inventory_names_what_is_missing(tmp_path: Path) -> None:
    assert "missing required key 'hosts'" in inventory_error(tmp_path, "# nothing\n")


# ---------------------------------------------------------------------------- what stays valid


def test_numbers_where_a_number_is_wanted_and_words_in_argv(tmp_path: Path) -> None:
    launch = load_recipe(write(tmp_path, RECIPE.replace('"{{ port }}"]', "8000, 1.5]"))).recipe.steps[1].launch
    assert launch.command[-2:] == ["8000", "1.5"] and launch.health.timeout_s == 30.0


def test_overrides_keep_the_declared_type(tmp_path: Path) -> None:
    path = write(tmp_path, RECIPE)
    launch = load_recipe(path, {"port": "8001", "rate": "0.5"}).recipe.steps[1].launch
    assert launch.health.url == "http://127.0.0.1:8001/" and launch.command[-1] == "8001"
    assert launch.spec_decode.min_acceptance_rate == 0.5
    message = usage_error(lambda p: load_recipe(p, {"rate": "lots"}), path)[0]
    assert at(message, tmp_path) == (2, 20) and "vars.rate: -e rate=lots: expected a number" in message
    assert "expected an integer" in usage_error(lambda p: load_recipe(p, {"port": "true"}), path)[0]
    shipped = load_recipe(REPO / "recipes" / "kimi_eagle3.yaml", {"min_acceptance": "0.5", "tp": "4"}).recipe
    assert shipped.steps[-1].launch.spec_decode.min_acceptance_rate == 0.5


# ---------------------------------------------------------------------------- without libyaml


def test_without_libyaml_the_answers_are_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A PyYAML built without libyaml composes in Python (one frame per level): same limits."""
    monkeypatch.setattr(yamlsource, "_Loader", yamlsource._PyLoader)
    assert load_recipe(write(tmp_path, RECIPE)).recipe.name == "demo"
    cases = {
        RECIPE.replace("vars: {", "vars: {d: " + "[" * 5000 + "]" * 5000 + ", "): ((2, 41), "nested deeper than 32"),
        RECIPE.replace("prompt: Hello", "prompt: Hel\x01lo"): ((14, 39), "U+0001"),
        RECIPE.replace("prompt: Hello", "prompt: !!python/object:os.system x"): ((14, 36), "YAML tag"),
        RECIPE.replace("vars: {port: 8000, rate: 0.3, tag: kimi_k2}\n", "vars:\n" + billion_laughs()): (None, "aliases expand"),
        RECIPE.replace("  - name: serve\n", "  - <<: {name: serve}\n"): ((10, 5), "merge keys"),
        RECIPE.replace("[python, -m", "[*nope, -m"): ((12, 17), "undefined alias 'nope'"),
        RECIPE.replace("{{ port }}/", "{{ port }/"): ((13, 39), "broken template"),
    }
    for text, (place, words) in cases.items():
        message = recipe_error(tmp_path, text)
        assert words in message and "not valid YAML: nested" not in message, message
        assert place is None or at(message, tmp_path) == place, message


# ---------------------------------------------------------------------------- through the CLI


def test_the_cli_says_one_line_and_exits_2(tmp_path: Path) -> None:
    bad = {
        "bytes.yaml": RECIPE.encode().replace(b"Hello", b"H\xffllo"),
        "bomb.yaml": RECIPE.replace("vars: {port: 8000, rate: 0.3, tag: kimi_k2}\n", "vars:\n" + billion_laughs()),
        "tag.yaml": RECIPE.replace("prompt: Hello", "prompt: !!python/object:os.system x"),
        "deep.yaml": RECIPE.replace("vars: {", "vars: {d: " + "[" * 100_000 + "]" * 100_000 + ", "),
        "template.yaml": RECIPE.replace("{{ port }}/", "{{ port }/"),
        "str.yaml": RECIPE + "str: 1\n",
    }
    paths = [write(tmp_path, content, name) for name, content in bad.items()]
    inventory = write(tmp_path, INVENTORY.replace("groups: {kimi: [gpu-1, gpu-2]}\n", "groups:\n" + billion_laughs()),
                      "inv.yaml")
    argvs = [["validate", str(p)] for p in paths] + [["history", "-i", str(inventory)]]
    for argv, result in zip(argvs, run_many(argvs, timeout=30)):
        assert result.returncode == 2, result
        assert result.stdout == "", result
        assert result.stderr.startswith("patchkit: ") and result.stderr.endswith("\n"), result
        check_message(result.stderr.removeprefix("patchkit: ").rstrip("\n"), argv[-1])


def test_shipped_and_fixture_recipes_still_load() -> None:
    for path in [*sorted((REPO / "recipes").glob("*.yaml")), *sorted((REPO / "fixtures" / "recipes").glob("*.yaml"))]:
        with time_limit():
            try:
                load_recipe(path)
            except UsageError as exc:
                assert path.name.startswith("bad_"), exc
                check_message(str(exc), path)
            else:
                assert not path.name.startswith("bad_"), path


def test_the_hang_guard_counts_cpu_time_not_the_wall_clock() -> None:
    """loadercheck.time_limit bounds work: a busy loop is interrupted, waiting is not (a
    loaded machine stretches the wall clock of every load)."""
    import time

    from loadercheck import Hang

    with pytest.raises(Hang, match="of CPU time"), time_limit(0.2):
        while True:
            pass
    with time_limit(0.2):
        time.sleep(0.4)  # 0.4 s of wall clock, next to no CPU: no Hang


def test_a_key_indented_one_level_too_deep_is_told_to_dedent(tmp_path: Path) -> None:
    file = tmp_path / "r.yaml"
    misplaced = RECIPE.replace('''        list_insert: {names: [eagle3_target_supported], values: ["{{ tag }}"]}\n''',
                               '''        list_insert: {names: [eagle3_target_supported], values: ["{{ tag }}"]}\n'''
                               '''      verify: {import: [toyllm.config.speculative]}\n''')
    assert "      verify:" in misplaced
    assert recipe_error(tmp_path, misplaced) == (
        f"{file}:10:7: steps[0].patch: unknown key 'verify' here; it is a key of the level of `patch:`: dedent it")
    # a key no level allows gets no such hint
    assert recipe_error(tmp_path, misplaced.replace("      verify:", "      zzzz:")) == (
        f"{file}:10:7: steps[0].patch: unknown key 'zzzz'")
