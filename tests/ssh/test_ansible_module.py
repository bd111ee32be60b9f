"""The patchkit.fleet.patchkit Ansible module, run by a real `ansible-playbook` against real
sshd hosts on 127.0.0.1 (tests/sshd.py).

patchkit runs on the controller (the action plugin) and logs in over SSH with the fleet's client
key, checking each host key against a known_hosts file of the test's own (patchkit_known_hosts);
each host's Python is a bare venv without patchkit or its dependencies, with its own toyllm
copy, so each inventory host patches its own files. ansible-playbook is the one beside the test
interpreter, never one found on PATH, and its home, temp dirs and config are the test's.
"""

from __future__ import annotations

import difflib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import run_patchkit
from tests.ssh.test_ssh import SYSTEM_PYTHON
from tests.sshd import (  # noqa: F401 - pytest fixtures
    Fleet,
    HostEnv,
    Testbed,
    fleet,
    login_users,
    require,
    sha256,
    sshd_root,
    testbed,
)

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
CALLBACKS = REPO / "tests" / "ansible_plugins" / "callback"
MODEL = "toyllm/config/model.py"
SECRET = "pk-secret-7f3a9c"  # a recipe secret: must never reach ansible's output

RECIPE = """\
name: ansible_toy
description: the EAGLE-3 whitelist (list_insert) and a fix from a diff file next to the recipe
vars: {first_value: kimi_k2, token: ""}
secrets: [token]
steps:
  - name: token-given
    check:
      python: |
        assert len("{{ token }}") > 0, "no token"
  - name: eagle3-whitelist
    patch:
      package: toyllm
      modules: [toyllm.config.speculative]
      edit:
        list_insert:
          names: [eagle3_target_supported, aux_hidden_states_supported]
          within: SpeculativeConfig._verify_args
          values: ["{{ first_value }}"]
          after: "afmoe"
    verify:
      import: [toyllm.config.speculative]
  - name: fp32-dtype
    patch:
      package: toyllm
      edit: {diff: {file: patches/fp32.patch}}
    verify:
      import: [toyllm.config]
"""

BROKEN_RECIPE = """\
name: ansible_broken
steps:
  - name: eagle3-whitelist
    patch:
      package: brokenllm
      modules: [brokenllm.config.speculative]
      edit:
        list_insert:
          names: [EAGLE3_TARGETS]
          values: [kimi_k2]
    verify:
      import: [brokenllm.config.speculative]
"""

TASK = """\
- hosts: all
  gather_facts: false
  tasks:
    - name: patchkit
      patchkit.fleet.patchkit:
        recipe: recipes/toy.yaml
        state: {state}
        python: "{{{{ patchkit_python }}}}"
        state_dir: "{{{{ patchkit_state }}}}"
        vars:
          first_value: "{{{{ first_value }}}}"
          token: "{{{{ patchkit_token }}}}"
"""

LIFE_CYCLE = """\
- hosts: all
  gather_facts: false
  module_defaults:
    patchkit.fleet.patchkit:
      recipe: recipes/toy.yaml
      python: "{{ patchkit_python }}"
      state_dir: "{{ patchkit_state }}"
      vars: {first_value: "{{ first_value }}", token: "{{ patchkit_token }}"}
  tasks:
    - {name: status applied, patchkit.fleet.patchkit: {state: status}}
    # on one host only: these options do not depend on the host, and each task costs time
    - {name: planned, patchkit.fleet.patchkit: {state: planned}, when: inventory_hostname == "gpu-1"}
    - name: status, recipe on the target, patchkit by its command
      patchkit.fleet.patchkit: {state: status, remote_src: true, recipe: "{{ recipe_on_target }}",
                                executable: "{{ patchkit_command }}"}
      when: inventory_hostname == "gpu-1"
    - {name: roll back, patchkit.fleet.patchkit: {state: rolled_back}}
    - {name: roll back again, patchkit.fleet.patchkit: {state: rolled_back}}
    - {name: status pending, patchkit.fleet.patchkit: {state: status}}
"""

FAILURES = """\
- hosts: all
  gather_facts: false
  tasks:
    - name: import check fails
      patchkit.fleet.patchkit: {recipe: recipes/broken.yaml, python: "{{ patchkit_python }}",
                                state_dir: "{{ patchkit_state }}"}
      ignore_errors: true
    - name: recipe error
      patchkit.fleet.patchkit: {recipe: recipes/typo.yaml, python: "{{ patchkit_python }}",
                                state_dir: "{{ patchkit_state }}"}
      ignore_errors: true
    - name: a connection patchkit has no transport for
      patchkit.fleet.patchkit: {recipe: recipes/toy.yaml, python: "{{ patchkit_python }}",
                                state_dir: "{{ patchkit_state }}"}
      vars: {ansible_connection: winrm}
      ignore_errors: true
    - name: a list is no recipe variable
      patchkit.fleet.patchkit: {recipe: recipes/toy.yaml, python: "{{ patchkit_python }}",
                                state_dir: "{{ patchkit_state }}", vars: {first_value: [1]}}
      ignore_errors: true
"""

REMOTE_CODEMOD = """\
- hosts: all
  gather_facts: false
  tasks:
    - name: codemod from the host
      patchkit.fleet.patchkit: {recipe: "{{ recipe_on_target | dirname }}/codemod.yaml", remote_src: true,
                                python: "{{ patchkit_python }}", state_dir: "{{ patchkit_state }}"}
      ignore_errors: true
"""


@dataclass(repr=False)
class Played:
    """One finished ansible-playbook run: its output and every task result it recorded."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    results: list[dict[str, Any]]

    def record(self, task: str, host: str) -> dict[str, Any]:
        found = [r for r in self.results if r["task"] == task and r["host"] == host]
        assert len(found) == 1, f"{task} on {host}: {len(found)} results\n{self}"
        return found[0]

    def result(self, task: str, host: str) -> dict[str, Any]:
        """The module's result; its outcome (ok, failed) is record()'s, Ansible keeps it apart."""
        return self.record(task, host)["result"]

    def failure(self, task: str, host: str) -> str:
        """The message of a task that failed (and did not change anything)."""
        record = self.record(task, host)
        assert record["outcome"] == "failed", f"{task} on {host} did not fail\n{self}"
        assert record["result"].get("changed") is not True, record
        return str(record["result"]["msg"])

    def recap(self, host: str) -> dict[str, int]:
        """PLAY RECAP's counters of one host: {'ok': 1, 'changed': 0, ...}."""
        recap = self.stdout.rsplit("PLAY RECAP", 1)[-1]
        line = next(ln for ln in recap.splitlines() if ln.startswith(host + " "))
        return {k: int(v) for k, v in (f.split("=") for f in line.split(":", 1)[1].split())}

    def __repr__(self) -> str:
        failed = "".join(f"{r['task']} on {r['host']}: {r['result'].get('msg')}\n" for r in self.results
                         if r["outcome"] != "ok")
        return (f"$ {' '.join(self.argv)}\nexit {self.returncode}\n--- failed tasks\n{failed}--- stdout\n"
                f"{self.stdout[-8000:]}\n--- stderr\n{self.stderr[-4000:]}")


@dataclass
class Controller:
    """The Ansible side: an inventory of sshd hosts, playbooks and recipes, a private Ansible home."""

    root: Path
    hosts: dict[str, HostEnv]

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("ANSIBLE_") and k not in ("SSH_AUTH_SOCK", "SSH_AGENT_PID")}
        home = self.root / "home"
        env.update({
            "HOME": str(home),
            "ANSIBLE_CONFIG": str(self.root / "ansible.cfg"),  # empty: no ansible.cfg of the machine
            "ANSIBLE_HOME": str(home / ".ansible"),
            "ANSIBLE_LOCAL_TEMP": str(self.root / "local-tmp"),
            "ANSIBLE_REMOTE_TEMP": str(self.root / "remote-tmp"),
            "ANSIBLE_SSH_CONTROL_PATH_DIR": str(self.root / "cp"),
            "ANSIBLE_COLLECTIONS_PATH": str(REPO),  # REPO/ansible_collections/patchkit/fleet
            "ANSIBLE_HOST_KEY_CHECKING": "True",
            # no file transfer: the test sshd has no sftp subsystem, and fleets run pipelined
            "ANSIBLE_PIPELINING": "True",
            "ANSIBLE_CALLBACK_PLUGINS": str(CALLBACKS),
            "ANSIBLE_CALLBACKS_ENABLED": "record_results",
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_RETRY_FILES_ENABLED": "False",
            "PATCHKIT_TEST_RESULTS": str(self.root / "results.jsonl"),
        })
        return env

    def play(self, playbook: str, *args: str) -> Played:
        path = self.root / "playbook.yml"
        path.write_text(playbook)
        results = self.root / "results.jsonl"
        results.unlink(missing_ok=True)
        argv = [str(BIN / "ansible-playbook"), "-i", str(self.root / "inventory.yml"), *args, str(path)]
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=self.root, env=self.env(), timeout=240,
                              check=False)
        lines = results.read_text().splitlines() if results.exists() else []
        return Played(argv, proc.returncode, proc.stdout, proc.stderr, [json.loads(ln) for ln in lines])


def fp32_patch(env: HostEnv) -> str:
    text = (env.pkgs / MODEL).read_text()
    new = text.replace("('float16', 'bfloat16')", "('float16', 'bfloat16', 'float32')", 1)
    assert new != text
    return "".join(difflib.unified_diff(text.splitlines(True), new.splitlines(True), f"a/{MODEL}", f"b/{MODEL}"))


def make_controller(testbed: Testbed, names: tuple[str, ...] = ("gpu-1", "gpu-2"), **host: Any) -> Controller:
    require((BIN / "ansible-playbook").is_file(),
            f"{BIN / 'ansible-playbook'} is missing: `make setup` installs ansible-core (the test extras)")
    fleet: Fleet = testbed.fleet
    servers = [s for s in fleet.servers if s.name in names]
    for server in servers:
        env = testbed.add(server.name, server, **host)
        shutil.copytree(REPO / "fixtures" / "pkgs" / "brokenllm" / "brokenllm", env.pkgs / "brokenllm",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    root = testbed.root / "controller"
    (root / "recipes" / "patches").mkdir(parents=True)
    (root / "home").mkdir()
    (root / "remote-tmp").mkdir()
    (root / "ansible.cfg").write_text("")
    known_hosts = fleet.write_known_hosts(root / "known_hosts", servers)
    first = testbed.hosts[names[0]]
    (root / "recipes" / "toy.yaml").write_text(RECIPE)
    (root / "recipes" / "patches" / "fp32.patch").write_text(fp32_patch(first))
    (root / "recipes" / "broken.yaml").write_text(BROKEN_RECIPE)
    (root / "recipes" / "typo.yaml").write_text(RECIPE.replace("    verify:\n      import: [toyllm.config]\n",
                                                               "    verfy:\n      import: [toyllm.config]\n"))
    ssh_args = (f"-F /dev/null -o UserKnownHostsFile={known_hosts} -o GlobalKnownHostsFile=/dev/null "
                "-o StrictHostKeyChecking=yes -o IdentitiesOnly=yes")
    values = {"gpu-1": "kimi_k2", "gpu-2": "deepseek_v3"}
    inventory = {"all": {
        "vars": {"ansible_user": "root", "ansible_ssh_private_key_file": str(fleet.client_key),
                 "ansible_ssh_common_args": ssh_args, "patchkit_known_hosts": str(known_hosts),
                 # a python without toyllm: the tasks' `python` option wins (Ansible's slurp of
                 # remote_src runs with this one)
                 "ansible_python_interpreter": str(Path(sys.base_prefix) / "bin" / "python3"),
                 "patchkit_token": SECRET, "recipe_on_target": str(root / "recipes" / "toy.yaml"),
                 "patchkit_command": str(BIN / "patchkit")},
        "hosts": {name: {"ansible_host": "127.0.0.1", "ansible_port": testbed.hosts[name].server.port,  # type: ignore[union-attr]
                         "patchkit_python": str(testbed.hosts[name].python),
                         "patchkit_state": str(testbed.hosts[name].state),
                         "first_value": values.get(name, "kimi_k2")} for name in names},
    }}
    (root / "inventory.yml").write_text(json.dumps(inventory, indent=1))  # JSON is YAML
    return Controller(root, {name: testbed.hosts[name] for name in names})


def files(env: HostEnv) -> dict[str, str]:
    return {rel: sha256(env.pkgs / rel) for rel in ("toyllm/config/speculative.py", MODEL)}


def test_playbook_applies_checks_diffs_reruns_and_rolls_back(testbed: Testbed) -> None:
    ctl = make_controller(testbed)
    originals = {name: files(env) for name, env in ctl.hosts.items()}
    logins = {name: env.server.ssh_connections() for name, env in ctl.hosts.items()}  # type: ignore[union-attr]

    # --check --diff: the diffs are shown, the hosts would change, nothing is written
    check = ctl.play(TASK.format(state="applied"), "--check", "--diff")
    assert check.returncode == 0, check
    assert '+                "kimi_k2",' in check.stdout, check  # gpu-1's value, in the diff text
    assert '+                "deepseek_v3",' in check.stdout, check  # gpu-2's value
    assert "+_FLOAT16_DTYPES = ('float16', 'bfloat16', 'float32')" in check.stdout, check
    for name, env in ctl.hosts.items():
        assert check.recap(name)["changed"] == 1, check
        assert check.result("patchkit", name)["command"] == "plan"
        assert files(env) == originals[name]
        assert not env.runs("ansible_toy")

    # a real run: changed, each host patched with its own host var, through its own sshd
    first = ctl.play(TASK.format(state="applied"), "-v")
    assert first.returncode == 0, first
    for name, env in ctl.hosts.items():
        assert first.recap(name)["changed"] == 1, first
        got = first.result("patchkit", name)
        assert got["changed"] is True and got["status"] == "changed", got
        assert [s["status"] for s in got["steps"]] == ["ok", "changed", "changed"], got
        assert "diff" not in got  # no --diff: no diff in the result
        assert env.server.ssh_connections() > logins[name]  # type: ignore[union-attr]
        assert files(env) != originals[name]
        assert len(env.runs("ansible_toy")) == 1
    assert '"kimi_k2",' in (ctl.hosts["gpu-1"].pkgs / "toyllm/config/speculative.py").read_text()
    assert '"deepseek_v3",' in (ctl.hosts["gpu-2"].pkgs / "toyllm/config/speculative.py").read_text()
    # the secret var (the recipe lists it under secrets) is masked in the output and the results
    assert SECRET not in first.stdout + first.stderr, first
    assert SECRET not in json.dumps(first.results)
    assert first.results[0]["result"]["invocation"]["module_args"]["vars"]["token"] == "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"
    assert "_recipe_text" not in first.results[0]["result"]["invocation"]["module_args"]
    # Ansible's SSH arguments do not reach patchkit (it reads ~/.ssh/config): each host is told
    assert ("[WARNING]: inventory: host gpu-1: ansible_ssh_common_args is not used by patchkit (set SSH options "
            "in ~/.ssh/config; keys, not passwords)") in first.stderr, first
    patched = {name: files(env) for name, env in ctl.hosts.items()}

    # a re-run is ok
    again = ctl.play(TASK.format(state="applied"))
    assert again.returncode == 0, again
    for name, env in ctl.hosts.items():
        assert again.recap(name)["changed"] == 0 and again.recap(name)["ok"] == 1, again
        assert again.result("patchkit", name)["status"] == "ok"
        assert files(env) == patched[name]

    # status never changes anything; rollback restores the original, and a second one is ok
    cycle = ctl.play(LIFE_CYCLE, "--diff")
    assert cycle.returncode == 0, cycle
    for name, env in ctl.hosts.items():
        applied = cycle.result("status applied", name)
        assert applied["changed"] is False and applied["status"] == "ok", applied
        assert [s["status"] for s in applied["steps"]] == ["not-applicable", "applied", "applied"], applied
        undo = cycle.result("roll back", name)
        assert undo["changed"] is True and undo["command"] == "rollback", undo
        assert cycle.result("roll back again", name)["changed"] is False
        pending = cycle.result("status pending", name)
        assert pending["changed"] is False and pending["status"] == "pending", pending
        assert cycle.recap(name)["changed"] == 1, cycle
        assert files(env) == originals[name]
    planned = cycle.result("planned", "gpu-1")
    assert planned["changed"] is False and planned["would_change"] is False, planned
    remote = cycle.result("status, recipe on the target, patchkit by its command", "gpu-1")
    assert remote["changed"] is False and remote["status"] == "ok", remote
    assert [s["status"] for s in remote["steps"]] == ["not-applicable", "applied", "applied"], remote
    # the rollback's diff reads as the change it made: the patched lines go away
    assert "-_FLOAT16_DTYPES = ('float16', 'bfloat16', 'float32')" in cycle.stdout, cycle
    assert "+_FLOAT16_DTYPES = ('float16', 'bfloat16')" in cycle.stdout, cycle


def test_failures_fail_the_task_with_patchkits_message_and_leave_the_host_original(testbed: Testbed) -> None:
    ctl = make_controller(testbed, ("gpu-3",))
    env = ctl.hosts["gpu-3"]
    broken = env.pkgs / "brokenllm" / "config" / "speculative.py"
    before = broken.read_bytes()
    originals = files(env)

    played = ctl.play(FAILURES)
    assert played.returncode == 0, played  # every task ignores its error; each is asserted below
    assert played.recap("gpu-3")["failed"] == 0 and played.recap("gpu-3")["ignored"] == 4, played

    # the import check fails: patchkit's reason, the original back byte for byte
    verify = played.failure("import check fails", "gpu-3")
    assert verify.startswith("patchkit apply failed on gpu-3: eagle3-whitelist: import check failed: "
                                    "AssertionError: EAGLE3_TARGETS has 4 entries, the kernel table 3; "
                                    "original restored"), verify
    assert "EAGLE3_TARGETS has 4 entries" in played.stdout, played
    assert broken.read_bytes() == before

    # a recipe error names the recipe by its controller path, with line and field
    typo = played.failure("recipe error", "gpu-3")
    recipe = ctl.root / "recipes" / "typo.yaml"
    assert typo.startswith(f"patchkit apply: {recipe}:26:5: "), typo
    assert "unknown key 'verfy'" in typo, typo

    # an ansible_connection patchkit cannot reach a host by: one line naming it
    winrm = played.failure("a connection patchkit has no transport for", "gpu-3")
    assert winrm.startswith("inventory: host gpu-3: ansible_connection=winrm has no patchkit transport "
                            "(patchkit reaches hosts by: docker, kubectl, local, paramiko, paramiko_ssh, podman, "
                            "smart, ssh)"), winrm
    assert "\n" not in winrm, winrm

    bad_var = played.failure("a list is no recipe variable", "gpu-3")
    assert bad_var == "vars.first_value: a recipe variable is a string, number or boolean, not list", bad_var
    assert files(env) == originals

    # a codemod is Python patchkit runs on the controller: never taken from the host
    codemod = ctl.root / "recipes" / "codemod.yaml"
    codemod.write_text("name: cm\nsteps:\n  - {name: c, patch: {package: toyllm, edit: {codemod: "
                       "{file: mods.py, transformer: T}}}}\n")
    (ctl.root / "recipes" / "mods.py").write_text("raise SystemExit('ran on the controller')\n")
    remote = ctl.play(REMOTE_CODEMOD)
    refused = remote.failure("codemod from the host", "gpu-3")
    assert refused == ("remote_src: the recipe's codemod mods.py is Python that would run on the controller, "
                       "taken from the host: keep a recipe with codemods on the controller"), refused
    assert files(env) == originals



def test_a_host_whose_key_is_not_the_known_one_is_never_reached(testbed: Testbed) -> None:
    """Host keys are checked by patchkit, which logs in from the controller: a known_hosts
    (patchkit_known_hosts, as -e here) with another server's key for this port fails the task
    with patchkit's message, and nothing runs on the host."""
    ctl = make_controller(testbed, ("gpu-4",))
    env = ctl.hosts["gpu-4"]
    other = next(s for s in testbed.fleet.servers if s.name == "gpu-5")
    wrong = ctl.root / "wrong_known_hosts"
    wrong.write_text(f"[127.0.0.1]:{env.server.port} {other.host_public_key}\n")  # type: ignore[union-attr]
    originals = files(env)
    played = ctl.play(TASK.format(state="applied"), "-e", json.dumps({"patchkit_known_hosts": str(wrong)}))
    assert played.returncode != 0, played
    message = played.failure("patchkit", "gpu-4")
    assert message.startswith("patchkit apply failed on gpu-4: "), message
    assert "host key" in message.lower() and str(wrong) in message, message
    assert files(env) == originals and not env.runs("ansible_toy")


INI_RECIPE = """\
name: ini_toy
vars: {first_value: kimi_k2, anchor: afmoe, token: ""}
secrets: [token]
steps:
  - name: token-given
    check:
      python: |
        assert len("{{ token }}") > 0, "no token"
  - name: eagle3-whitelist
    patch:
      package: toyllm
      modules: [toyllm.config.speculative]
      edit:
        list_insert:
          names: [eagle3_target_supported]
          within: SpeculativeConfig._verify_args
          values: ["{{ first_value }}"]
          after: "{{ anchor }}"
    verify:
      import: [toyllm.config.speculative]
"""

INI_PLAY = """\
- hosts: kimi
  gather_facts: false
  tasks:
    - {name: patchkit, patchkit.fleet.patchkit: {recipe: recipes/ini.yaml}}
"""


def test_module_and_cli_read_one_ini_inventory_alike_on_a_host_without_patchkit(testbed: Testbed) -> None:
    """One INI inventory with host_vars/ and group_vars/: a host var and a group var change the
    recipe's result, patchkit_* vars set the journal folder and the known_hosts, the host's
    ansible_python_interpreter (a bare venv) is the one patched. The module's files are the
    bytes `patchkit apply -i` of the same inventory writes, and the CLI sees the module's run."""
    ctl = make_controller(testbed, ("gpu-6",))
    env = ctl.hosts["gpu-6"]
    for module in ("patchkit", "pydantic", "yaml"):  # a bare serving venv: nothing of patchkit's
        probe = subprocess.run([str(env.python), "-c", f"import {module}"], capture_output=True, cwd=env.root,
                               check=False)  # not in this checkout, whose patchkit/ `-c` would import
        assert probe.returncode != 0, module
    state = ctl.root / "ini-state"  # not the module's or the CLI's default: only patchkit_state_dir leads there
    inventory = ctl.root / "ini"
    (inventory / "host_vars").mkdir(parents=True)
    (inventory / "group_vars").mkdir()
    (inventory / "hosts.ini").write_text(
        "[kimi]\n"
        f"gpu-6 ansible_host=127.0.0.1 ansible_port={env.server.port} ansible_user=root "  # type: ignore[union-attr]
        f"ansible_ssh_private_key_file={testbed.fleet.client_key}\n")
    (inventory / "host_vars" / "gpu-6.yml").write_text(
        f"ansible_python_interpreter: {env.python}\nfirst_value: deepseek_v3\n")
    (inventory / "group_vars" / "kimi.yml").write_text(
        f"anchor: minicpm\npatchkit_state_dir: {state}\ntoken: {SECRET}\n")  # a recipe secret, from the inventory
    (inventory / "group_vars" / "all.yml").write_text(  # and a variable of other plays, undefined here
        f"patchkit_known_hosts: {ctl.root / 'known_hosts'}\nmotd: '{{{{ motd_of_another_play }}}}'\n")
    (ctl.root / "recipes" / "ini.yaml").write_text(INI_RECIPE)
    ini = ["-i", str(inventory / "hosts.ini")]
    speculative = env.pkgs / "toyllm/config/speculative.py"
    original = speculative.read_bytes()

    def runs() -> list[Path]:
        return sorted((state / "runs" / "ini_toy").glob("*.json")) if state.is_dir() else []

    # --check --diff: the host's and the group's values in the diff, nothing written
    check = ctl.play(INI_PLAY, *ini, "--check", "--diff")
    assert check.returncode == 0 and check.recap("gpu-6")["changed"] == 1, check
    assert '                 "minicpm",  # MiniCPM-4\n+                "deepseek_v3",' in check.stdout, check
    assert speculative.read_bytes() == original and not runs()

    # the module applies, with the inventory's variables, journal where patchkit_state_dir says
    first = ctl.play(INI_PLAY, *ini, "-vvv")
    assert first.returncode == 0 and first.recap("gpu-6")["changed"] == 1, first
    assert SECRET not in first.stdout + first.stderr + json.dumps(first.results), first
    by_module = speculative.read_bytes()
    assert b'"minicpm",  # MiniCPM-4\n                "deepseek_v3",\n                "gpt_oss",' in by_module
    assert len(runs()) == 1
    again = ctl.play(INI_PLAY, *ini)
    assert again.returncode == 0 and again.recap("gpu-6")["changed"] == 0, again
    assert again.result("patchkit", "gpu-6")["status"] == "ok"

    # the CLI of the same inventory: the module's edit is applied (its own run explains it)
    status = run_patchkit("status", *ini, "--json", str(ctl.root / "recipes" / "ini.yaml"), env=ctl.env())
    assert status.returncode == 0, status
    (host,) = json.loads(status.stdout)["hosts"].values()
    assert [s["status"] for s in host["steps"]] == ["not-applicable", "applied"], host
    undone = run_patchkit("rollback", *ini, str(ctl.root / "recipes" / "ini.yaml"), env=ctl.env())
    assert undone.returncode == 0 and speculative.read_bytes() == original, undone
    # ... and writes the very bytes the module wrote
    applied = run_patchkit("apply", *ini, str(ctl.root / "recipes" / "ini.yaml"), env=ctl.env())
    assert applied.returncode == 0, applied
    assert speculative.read_bytes() == by_module
    assert len(runs()) == 4  # the module's two runs, the rollback and this apply: one journal


BECOME_PLAY = """\
- hosts: all
  gather_facts: false
  tasks:
    - {name: as the login user, patchkit.fleet.patchkit: {recipe: recipes/ini.yaml}, ignore_errors: true}
    - {name: with become, patchkit.fleet.patchkit: {recipe: recipes/ini.yaml}, become: true}
"""


def test_the_tasks_become_makes_patchkit_root_on_the_host(testbed: Testbed, login_users: dict[str, str]) -> None:
    """A login user with the sudo right, files only root may write: the task without become
    fails with patchkit's message and leaves the bytes; the task's `become: true` (a keyword,
    no variable) makes patchkit's agent root through sudo, and the file stays root's."""
    require(shutil.which("sudo") is not None, "sudo is missing: `make test` installs it (scripts/install-system-deps.sh)")
    ctl = make_controller(testbed, ("gpu-7",), base_python=SYSTEM_PYTHON)  # root's pyenv: not for other users
    env = ctl.hosts["gpu-7"]
    (ctl.root / "recipes" / "ini.yaml").write_text(INI_RECIPE)
    (ctl.root / "become.ini").write_text(
        f"gpu-7 ansible_host=127.0.0.1 ansible_port={env.server.port} "  # type: ignore[union-attr]
        f"ansible_user={login_users['sudoer']} ansible_ssh_private_key_file={testbed.fleet.client_key} "
        f"ansible_python_interpreter={env.python} patchkit_state_dir={env.state} "
        f"patchkit_known_hosts={ctl.root / 'known_hosts'} token=given\n")
    speculative = env.pkgs / "toyllm/config/speculative.py"
    original = speculative.read_bytes()

    played = ctl.play(BECOME_PLAY, "-i", str(ctl.root / "become.ini"))
    assert played.returncode == 0, played
    denied = played.failure("as the login user", "gpu-7")
    assert denied.startswith("patchkit apply failed on gpu-7: ") and "Permission denied" in denied, denied
    became = played.result("with become", "gpu-7")
    assert became["changed"] is True and became["status"] == "changed", became  # the first wrote nothing
    assert b'"afmoe",\n                "kimi_k2",' in speculative.read_bytes()
    assert speculative.read_bytes() != original and speculative.stat().st_uid == 0
