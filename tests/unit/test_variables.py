"""Variables per host (patchkit/recipe/variables.py, inventory.py, inventory_sources.py): the
precedence, the -e forms, type checks, unused-variable warnings, group variable order, several
inventories merged, and ansible-inventory not found. Pure: no host, no Ansible run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from patchkit.base.errors import UsageError
from patchkit.fleet.inventory import Inventory
from patchkit.fleet.sources import merge, read_inventory
from patchkit.recipe.variables import Given, layered, parse_extra_vars, typed, unused

DECLARED = {"port": 8000, "model": "llama", "tp": 1, "eager": False, "ratio": 0.5, "flags": ["a"]}


def test_precedence_is_extra_over_host_over_group_over_defaults_over_recipe() -> None:
    inventory = Inventory.model_validate({
        "hosts": {"h": {"address": "local", "vars": {"host_only": 1, "model": "host"}},
                  "g": {"address": "local"}},
        "groups": {"parent": {"hosts": ["child"], "vars": {"model": "parent", "tp": 2, "from_parent": True}},
                   "child": {"hosts": ["h"], "vars": {"model": "child", "tp": 4}},
                   "aaa": {"hosts": ["h", "g"], "vars": {"tp": 8, "model": "aaa"}}},
        "defaults": {"vars": {"model": "defaults", "tp": 16, "port": 9000}}})
    hosts = inventory.resolved()
    # child (deeper) over parent; at one depth by name: aaa before parent, child last
    assert hosts["h"].vars == {"model": "host", "tp": 4, "port": 9000, "from_parent": True, "host_only": 1}
    assert hosts["g"].vars == {"model": "aaa", "tp": 8, "port": 9000}
    extra = parse_extra_vars(["model=cli"])
    seen = layered(DECLARED, hosts["h"].vars, extra, "h")
    assert (seen["model"], seen["tp"], seen["port"], seen["eager"]) == ("cli", 4, 9000, False)
    assert layered(DECLARED, {}, {}) == DECLARED  # nothing given: the recipe's


def test_extra_var_forms_and_the_later_one_wins(tmp_path: Path) -> None:
    file = tmp_path / "v.yml"
    file.write_text("model: from_file\ntp: 2\n")
    given = parse_extra_vars([f"@{file}", '{"tp": 4, "flags": ["x"]}', "port=8001"])
    assert given == {"model": Given("from_file", False, f"-e @{file}"), "tp": Given(4, False, "-e JSON"),
                     "flags": Given(["x"], False, "-e JSON"), "port": Given("8001", True, "-e")}
    assert layered(DECLARED, {}, given)["port"] == 8001  # text read as the declared type


@pytest.mark.parametrize(("items", "message"), [
    (["nokey"], "-e 'nokey': expected KEY=VALUE, @FILE.yml or a JSON object"),
    (["{bad"], "-e '{bad': not valid JSON"),
    (['{"1x": 2}'], "'1x' is not a variable name"),
    (["@"], "-e @: name the file"),
    (["@/nonexistent/v.yml"], "-e @/nonexistent/v.yml: no such file"),
])
def test_bad_extra_vars_are_named(items: list[str], message: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_extra_vars(items)
    assert message in str(caught.value)


def test_a_vars_file_that_is_not_a_mapping_names_its_place(tmp_path: Path) -> None:
    file = tmp_path / "v.yml"
    file.write_text("- a\n")
    with pytest.raises(UsageError, match=r"v.yml:1:1: a file of variables is a mapping"):
        parse_extra_vars([f"@{file}"])


@pytest.mark.parametrize(("name", "value", "text", "message"), [
    ("port", "80x", True, "-e port=80x: expected an integer, like the recipe's default 8000"),
    ("port", "8000", False, "inv: port=\"8000\": expected an integer"),
    ("eager", 1, False, "expected true or false"),
    ("ratio", "x", False, "expected a number"),
    ("flags", "a", False, "expected a list"),
    ("model", 3, False, "expected a string"),
])
def test_a_value_of_the_wrong_type_is_refused(name: str, value: object, text: bool, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        typed(name, value, DECLARED, "inv", text)
    assert message in str(caught.value)


def test_types_that_fit_are_kept() -> None:
    assert typed("ratio", 1, DECLARED, "x") == 1 and typed("eager", "true", DECLARED, "-e", True) is True
    assert typed("undeclared", {"any": 1}, DECLARED, "x") == {"any": 1}


def test_unused_variables_are_named_with_the_closest_known_one() -> None:
    known = {"drafter_dest", "port", "model"}
    found = unused({"drafter_dst": "-e", "python": "-e", "port": "-e", "region": "-i inv (host h)",
                    "ntp_server": "-i hosts.ini (host h)", "modle": "-i hosts.ini (host h)"}, known,
                   typos_only={"ntp_server", "modle"})
    assert [str(f) for f in found] == [
        "variable 'drafter_dst' from -e is used by no step of the recipe (did you mean 'drafter_dest'?)",
        "variable 'region' from -i inv (host h) is used by no step of the recipe",
        "variable 'modle' from -i hosts.ini (host h) is used by no step of the recipe (did you mean 'model'?)",
    ]  # python is the interpreter; an Ansible variable is named only when it looks like a typo


def test_several_inventories_merge_groups_and_the_later_host_wins() -> None:
    first = Inventory.model_validate({"hosts": {"a": {"address": "a1"}, "b": {}},
                                      "groups": {"g": ["a"]}, "defaults": {"user": "ops", "vars": {"x": 1}}})
    second = Inventory.model_validate({"hosts": {"a": {"address": "a2"}, "c": {}}, "groups": {"g": ["c"]}})
    merged = merge([("one.yaml", first, []), ("two.yaml", second, [])])
    hosts = merged.inventory.resolved()
    assert list(hosts) == ["a", "b", "c"] and hosts["a"].address == "a2" and hosts["a"].user is None
    assert hosts["b"].user == "ops" and hosts["b"].vars == {"x": 1}  # its own inventory's defaults
    assert merged.inventory.groups["g"] == ["a", "c"]
    assert merged.sources == {"a": "two.yaml", "b": "one.yaml", "c": "two.yaml"}
    assert merged.notes == [("host a is in -i one.yaml and -i two.yaml: the later entry wins "
                             "(address: 'a1' -> 'a2', user: 'ops' -> None, vars: {'x': 1} -> {})")]
    clash = Inventory.model_validate({"hosts": {"g": {}}})
    with pytest.raises(UsageError, match="'g' is a host in -i three.yaml and a group in -i one.yaml"):
        merge([("one.yaml", first, []), ("three.yaml", clash, [])])


def test_which_reader_a_path_gets(tmp_path: Path) -> None:
    own = tmp_path / "inv.yaml"
    own.write_text("hosts:\n  a: {address: local}\n")
    listed = tmp_path / "list.json"
    listed.write_text(json.dumps({"_meta": {"hostvars": {"b": {"ansible_connection": "local"}}},
                                  "all": {"children": ["ungrouped"]}, "ungrouped": {"hosts": ["b"]}}))
    assert read_inventory(str(own))[2] is False and list(read_inventory(str(own))[0].hosts) == ["a"]
    assert read_inventory(str(listed))[2] is True and read_inventory(str(listed))[0].hosts["b"].address == "local"
    broken_own = tmp_path / "broken.yaml"  # patchkit's by its top-level keys: its own YAML error
    broken_own.write_text("hosts:\n\ta: {}\n")
    with pytest.raises(UsageError, match="a tab"):
        read_inventory(str(broken_own))
    misspelt = tmp_path / "misspelt.yaml"  # not sent to Ansible as a group named `host`
    misspelt.write_text("host:\n  a: {address: local}\n")
    with pytest.raises(UsageError, match="unknown key 'host' \\(did you mean 'hosts'\\?\\)"):
        read_inventory(str(misspelt))


def test_without_ansible_inventory_one_line_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ini = tmp_path / "hosts.ini"
    ini.write_text("[gpu]\ngpu-1\n")
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))  # nothing beside it
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(UsageError) as caught:
        read_inventory(str(ini))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"-i {ini}: not a patchkit inventory") and "ansible-inventory is not installed" in message
    assert f"the JSON of `ansible-inventory -i {ini} --list` as a file" in message


def test_the_review_shows_each_hosts_own_facts_when_variables_differ(tmp_path: Path) -> None:
    from patchkit.recipe.model import read_recipe
    from patchkit.run.results import HostResult, RunReport, StepResult
    from patchkit.report.review import build_review

    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: r\nvars: {dest: /models/a}\nsteps:\n"
                      "  - name: drafter\n    deploy: {src: ./d, dest: '{{ dest }}'}\n")
    source = read_recipe(recipe)
    per_host = {"a": source.render(layered(source.declared, {}, {})),
                "b": source.render(layered(source.declared, {"dest": "/fast/b"}, {})),
                "c": source.render(layered(source.declared, {}, {}))}
    assert per_host["a"] is per_host["c"]  # the same variables: one rendering
    report = RunReport(recipe="r", run_id="x", dry_run=True, command="plan", hosts={
        name: HostResult(status="changed", steps=[StepResult(name="drafter", kind="deploy", status="changed")])
        for name in per_host})
    [step] = build_review(report, per_host["a"], None, per_host).steps
    assert step.facts == [("copies (a, c)", "./d → /models/a"), ("copies (b)", "./d → /fast/b")]
    [same] = build_review(report, per_host["a"], None, {"a": per_host["a"]}).steps
    assert same.facts == [("copies", "./d → /models/a")]  # alike: said once, as before


def test_a_misspelt_special_variable_gets_its_did_you_mean() -> None:
    from patchkit.recipe.variables import unused

    found = unused({"pyhton": "-e", "prot": "-e"}, {"port"})
    assert [(u.name, u.hint) for u in found] == [("pyhton", "python"), ("prot", "port")]
    assert str(found[0]) == "variable 'pyhton' from -e is used by no step of the recipe (did you mean 'python'?)"
