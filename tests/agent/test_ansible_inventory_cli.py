"""Inventories and variables through the real CLI: the real
`ansible-inventory` on INI files, several -i merged, variables per host with -e @file / JSON,
and every error case: broken INI, a connection patchkit lacks, bad JSON, bad -e, unused
variables (a warning, an error with --strict). Local transport: sandboxes as hosts."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from patchkit.base.errors import UsageError
from tests.helpers import Sandbox, make_sandbox, recipe, run_many, run_patchkit

RECIPE = recipe("toyllm_eagle3.yaml")  # `first_value` goes into the whitelist


def ini_of(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "hosts.ini"
    path.write_text(text)
    return path


def local_line(name: str, box: Sandbox, *extra: str) -> str:
    return " ".join([name, "ansible_connection=local", f"ansible_python_interpreter={box.python}",
                     f"patchkit_state_dir={box.state}", *extra])


def test_an_ini_inventory_sets_each_hosts_interpreter_and_variables(tmp_path: Path) -> None:
    boxes = {name: make_sandbox(tmp_path / name, packages=("toyllm",)) for name in ("a", "b")}
    ini = ini_of(tmp_path, "[gpu]\n" + local_line("a", boxes["a"]) + "\n"
                 + local_line("b", boxes["b"], "first_value=kimi_k25") + "\n")
    planned = run_patchkit("plan", RECIPE, "-i", str(ini), "--steps", "eagle3-whitelist", "-v")
    assert planned.returncode == 0, planned
    # two renderings, two diffs: each under the host it is for, never one diff for both
    first, second = planned.stdout.split("# b/eagle3-whitelist\n")
    assert "# a/eagle3-whitelist\n" in first and '+                "kimi_k2",' in first and "kimi_k25" not in first
    assert '+                "kimi_k25",' in second
    assert "# via a: local local" in planned.stdout and "# via b: local local" in planned.stdout
    applied = run_patchkit("apply", RECIPE, "-i", str(ini), "--steps", "eagle3-whitelist", "--json", "-v")
    assert applied.returncode == 0, applied
    assert {n: h["transport"] for n, h in applied.hosts().items()} == {"a": "local", "b": "local"}
    spec = "toyllm/config/speculative.py"
    assert '"kimi_k2"' in (boxes["a"].pkgs / spec).read_text()  # the recipe's default
    assert '"kimi_k25"' in (boxes["b"].pkgs / spec).read_text()  # b's host var


def test_inventory_errors_name_the_file_and_the_host(tmp_path: Path) -> None:
    box = make_sandbox(tmp_path / "a", packages=("toyllm",))
    broken = ini_of(tmp_path, "[gpu\na ansible_connection=local\n")
    winrm = tmp_path / "winrm.ini"
    winrm.write_text("w1 ansible_connection=winrm\n")
    bad_json = tmp_path / "inv.json"
    bad_json.write_text('{"_meta": {"hostvars": {}},\n "all": [}\n')
    wrong_type = tmp_path / "typed.ini"  # first_value is a string in the recipe: a list is refused
    wrong_type.write_text(local_line("a", box, "first_value=\"['x']\"") + "\n")
    runs = run_many([["plan", RECIPE, "-i", str(p)] for p in (broken, winrm, bad_json, wrong_type)]
                    + [["plan", RECIPE, "-i", str(tmp_path / "nowhere.ini")]])
    assert [r.returncode for r in runs] == [2] * 5, runs
    ini_broken, no_transport, json_broken, typed, missing = (r.stderr for r in runs)
    assert f"-i {broken}: ansible-inventory could not read it" in ini_broken and "ini" in ini_broken
    assert f"{winrm}: host w1: ansible_connection=winrm has no patchkit transport" in no_transport
    assert f"patchkit: {bad_json}:2:10: not valid JSON: Expecting value" in json_broken
    assert typed.startswith(f"patchkit: {RECIPE}:6:3: vars.first_value: -i {wrong_type}: host a: vars: "
                            'first_value=["x"]: expected a string'), typed  # where it is declared, and given
    assert f"-i {tmp_path / 'nowhere.ini'}: no such file or folder" in missing


def test_several_inventories_merge_and_the_later_wins_per_host(tmp_path: Path) -> None:
    one, two = (make_sandbox(tmp_path / n, packages=("toyllm",)) for n in ("one", "two"))
    first, second = tmp_path / "first.yaml", tmp_path / "second.json"
    first.write_text(json.dumps({"hosts": {
        "shared": {"address": "local", "python": str(one.python), "state_dir": str(one.state)},
        "only-first": {"address": "local", "python": str(one.python), "state_dir": str(one.state / "x")}}}))
    second.write_text(json.dumps({"_meta": {"hostvars": {"shared": {
        "ansible_connection": "local", "ansible_python_interpreter": str(two.python),
        "patchkit_state_dir": str(two.state)}}}, "all": {"children": ["ungrouped"]},
        "ungrouped": {"hosts": ["shared"]}}))
    merged = run_patchkit("plan", RECIPE, "-i", str(first), "-i", str(second), "-v", "--json")
    assert merged.returncode == 0, merged
    assert list(merged.hosts()) == ["shared", "only-first"]  # the second -i adds, never replaces
    assert (f"host shared is in -i {first} and -i {second}: the later entry wins (python: "
            f"'{one.python}' -> '{two.python}'") in merged.stderr, merged.stderr
    quiet = run_patchkit("plan", RECIPE, "-i", str(first), "-i", str(second), "--json")
    assert "the later entry wins" not in quiet.stderr  # named with -v only


def test_extra_vars_from_files_and_json_and_the_unused_ones(tmp_path: Path) -> None:
    box = make_sandbox(tmp_path / "a", packages=("toyllm",))
    values = tmp_path / "vars.yml"
    values.write_text("first_value: from_file\n")
    broken = tmp_path / "broken.yml"
    broken.write_text("first_value: [x\n")
    inventory = tmp_path / "inv.yaml"
    inventory.write_text(f"hosts:\n  a: {{address: local, python: '{box.python}', state_dir: '{box.state}', "
                         "vars: {frist_value: typo}}\n")
    common = ["plan", RECIPE, "-i", str(inventory), "--steps", "eagle3-whitelist", "--json"]
    from_file, from_json, later_wins, strict, missing, bad_yaml, bad_json, not_object = run_many([
        [*common, "-e", f"@{values}"],
        [*common, "-e", '{"first_value": "from_json", "nosuchvar": 1}'],
        [*common, "-e", f"@{values}", "-e", "first_value=last"],
        [*common, "--strict", "-e", "nosuchvar=1"],
        [*common, "-e", f"@{tmp_path / 'none.yml'}"],
        [*common, "-e", f"@{broken}"],
        [*common, "-e", '{"first_value": }'],
        [*common, "-e", "[1, 2]"],
    ])
    assert '"from_file"' in from_file.hosts()["a"]["steps"][0]["diff"], from_file
    assert '"from_json"' in from_json.hosts()["a"]["steps"][0]["diff"], from_json
    assert '"last"' in later_wins.hosts()["a"]["steps"][0]["diff"], later_wins
    assert ("warning: variable 'nosuchvar' from -e JSON is used by no step of the recipe" in from_json.stderr
            and from_json.returncode == 0)
    assert (f"warning: variable 'frist_value' from -i {inventory} (host a) is used by no step of the recipe "
            "(did you mean 'first_value'?)") in from_file.stderr
    assert strict.returncode == 2 and "variable 'nosuchvar' from -e is used by no step" in strict.stderr, strict
    assert "(--strict)" in strict.stderr and strict.json()["error"]["kind"] == "usage"
    assert missing.returncode == bad_yaml.returncode == bad_json.returncode == not_object.returncode == 2
    assert f"-e @{tmp_path / 'none.yml'}: no such file" in missing.stderr
    assert f"{broken}:2:1: not valid YAML" in bad_yaml.stderr, bad_yaml.stderr
    assert "-e '{\"first_value\": }': not valid JSON" in bad_json.stderr
    assert "-e '[1, 2]': expected KEY=VALUE, @FILE.yml or a JSON object" in not_object.stderr


def test_a_variable_only_some_hosts_have_is_their_error(tmp_path: Path) -> None:
    box = make_sandbox(tmp_path / "a", packages=("toyllm",))
    recipe_file = tmp_path / "r.yaml"
    recipe_file.write_text(Path(RECIPE).read_text().replace('"deepseek_v3"', '"{{ second }}"'))
    inventory = tmp_path / "inv.yaml"
    entry = f"address: local, python: '{box.python}', state_dir: '{box.state}'"
    inventory.write_text(f"hosts:\n  a: {{{entry}, vars: {{second: ok}}}}\n  b: {{{entry}}}\n")
    planned = run_patchkit("plan", str(recipe_file), "-i", str(inventory))
    assert planned.returncode == 2, planned
    assert planned.stderr.startswith(f"patchkit: host b: {recipe_file}:"), planned.stderr
    assert "undefined variable 'second'" in planned.stderr and "host a" not in planned.stderr


def test_a_secret_from_a_host_var_stays_out_of_report_and_logs(tmp_path: Path) -> None:
    box = make_sandbox(tmp_path / "a", packages=("toyllm",))
    recipe_file = tmp_path / "r.yaml"
    recipe_file.write_text("name: s\nsteps:\n  - name: leak\n    check:\n      python: |\n"
                           "        import sys\n        print('token is {{ hf_token }}', file=sys.stderr)\n"
                           "        sys.exit(1)\n")
    inventory = tmp_path / "inv.yaml"
    inventory.write_text(f"hosts:\n  a: {{address: local, python: '{box.python}', state_dir: '{box.state}', "
                         "vars: {hf_token: hf_PerHostValue123}}\n")
    applied = run_patchkit("apply", str(recipe_file), "-i", str(inventory), "-v", "--json")
    assert applied.returncode == 1, applied
    assert "token is <secret:hf_token>" in applied.hosts()["a"]["steps"][0]["message"], applied
    assert "hf_PerHostValue123" not in applied.stdout + applied.stderr
    assert "step.done" in applied.stderr  # the log line that carries the message was written


def test_ansible_yaml_folders_and_scripts_are_read_through_ansible_inventory(tmp_path: Path) -> None:
    box = make_sandbox(tmp_path / "a", packages=("toyllm",))
    settings = {"ansible_connection": "local", "ansible_python_interpreter": str(box.python),
                "patchkit_state_dir": str(box.state)}
    yaml_inventory = tmp_path / "hosts.yml"  # Ansible's YAML form: all -> children -> group -> hosts
    yaml_inventory.write_text(json.dumps({"all": {"children": {"gpu": {"hosts": {"y1": settings}}}}}))
    folder = tmp_path / "inventory"
    (folder / "host_vars").mkdir(parents=True)
    (folder / "hosts").write_text("[gpu]\nf1\n")
    (folder / "host_vars" / "f1.yml").write_text("".join(f"{k}: {v}\n" for k, v in settings.items()))
    script = tmp_path / "dynamic.py"  # a dynamic inventory: --list prints the groups and _meta
    listing = {"gpu": {"hosts": ["s1"]}, "_meta": {"hostvars": {"s1": settings}}}
    script.write_text(f"#!{sys.executable}\nimport json\nprint(json.dumps({listing!r}))\n")
    script.chmod(0o755)
    runs = run_many([["plan", RECIPE, "-i", str(p), "-l", "gpu", "--steps", "eagle3-whitelist", "--json"]
                     for p in (yaml_inventory, folder, script)])
    assert [list(r.hosts()) for r in runs] == [["y1"], ["f1"], ["s1"]], runs
    assert all(r.hosts()[h]["steps"][0]["status"] == "changed" for r, h in zip(runs, ("y1", "f1", "s1")))


def test_validate_checks_the_recipe_with_each_hosts_variables_and_contacts_none(tmp_path: Path) -> None:
    recipe_file = tmp_path / "r.yaml"
    recipe_file.write_text(Path(RECIPE).read_text().replace('"deepseek_v3"', '"{{ second }}"'))
    alone = run_patchkit("validate", str(recipe_file))
    assert alone.returncode == 2 and "undefined variable 'second'" in alone.stderr, alone
    inventory = tmp_path / "inv.yaml"  # unreachable on purpose: validate contacts no host or cluster
    inventory.write_text(json.dumps({"hosts": {"a": {"address": "127.0.0.1", "port": 1, "vars": {"second": "ok"}},
                                               "b": {"address": "127.0.0.1", "port": 1, "vars": {"second": "ok"}}},
                                     "groups": {"pods": {"k8s_selector": "app=x"}}}))
    valid = run_patchkit("validate", str(recipe_file), "-i", str(inventory))
    assert valid.returncode == 0, valid
    assert "valid recipe" in valid.stdout and "(with the variables of 2 hosts)" in valid.stdout, valid
    assert "group pods: resolved at run time (its hosts are not checked here)" in valid.stderr, valid
    inventory.write_text(json.dumps({"hosts": {"a": {"address": "127.0.0.1", "vars": {"second": "ok"}},
                                               "b": {"address": "127.0.0.1"}}}))
    one_lacks = run_patchkit("validate", str(recipe_file), "-i", str(inventory))
    assert one_lacks.returncode == 2 and one_lacks.stderr.startswith("patchkit: host b: "), one_lacks
    assert "undefined variable 'second'" in one_lacks.stderr, one_lacks
    only_a = run_patchkit("validate", str(recipe_file), "-i", str(inventory), "-l", "a", "-e", "nosuch=1", "--strict")
    assert only_a.returncode == 2 and "nosuch" in only_a.stderr, only_a  # -l picks the hosts; --strict as for apply


def test_what_ansible_inventory_prints_is_bounded_and_a_hanging_script_is_ended(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The real ansible-inventory on dynamic inventory scripts, with the limits made small: output
    past the limit stops it (one line, nothing parsed); a script that hangs is ended with it at
    the timeout, its own child too (the process group)."""
    from patchkit.fleet import sources

    big = tmp_path / "big.py"
    big.write_text(f"#!{sys.executable}\nimport json\n"  # small itself, 20 kB printed
                   "host = {'blob': 'x' * 20000}\n"
                   "print(json.dumps({'gpu': {'hosts': ['s1']}, '_meta': {'hostvars': {'s1': host}}}))\n")
    big.chmod(0o755)
    monkeypatch.setattr(sources, "MAX_INVENTORY_BYTES", 10000)
    with pytest.raises(UsageError, match=r"ansible-inventory printed more than .*: stopped, not read"):
        sources.load_inventories([str(big)])
    monkeypatch.setattr(sources, "MAX_INVENTORY_BYTES", 100000)
    assert list(sources.load_inventories([str(big)]).inventory.hosts) == ["s1"]

    pids = tmp_path / "pids"
    hangs = tmp_path / "hangs.py"
    hangs.write_text(f"#!{sys.executable}\nimport os, subprocess, time\n"
                     f"child = subprocess.Popen([{sys.executable!r}, '-c', 'import time; time.sleep(300)'])\n"
                     f"open({str(pids)!r}, 'w').write('%d %d' % (os.getpid(), child.pid))\ntime.sleep(300)\n")
    hangs.chmod(0o755)
    monkeypatch.setattr(sources, "ANSIBLE_INVENTORY_TIMEOUT_S", 8.0)
    with pytest.raises(UsageError, match=r"ansible-inventory did not answer within 8 s"):
        sources.load_inventories([str(hangs)])
    for pid in map(int, pids.read_text().split()):
        deadline = time.monotonic() + 10
        while Path(f"/proc/{pid}").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z":
            assert time.monotonic() < deadline, f"{pid} still runs"
            time.sleep(0.1)
