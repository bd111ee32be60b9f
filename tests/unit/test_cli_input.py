"""Command-line and inventory input, through the real CLI: an empty value (an unset shell
variable) is a usage error before anything is read or contacted; an inventory is read once
(pipes and `<(...)` work) within a size limit; nesting of groups and of JSON is bounded;
numbers that are no count or no number of seconds are refused. Each: one line, exit 2."""

from __future__ import annotations

import os
import resource
import subprocess
import threading
from pathlib import Path

import pytest

from tests.helpers import PATCHKIT, REPO, run_many, run_patchkit

RECIPE = str(REPO / "fixtures/recipes/toyllm_eagle3.yaml")


def one_line_usage_error(result: object) -> str:
    code, stderr = getattr(result, "returncode"), getattr(result, "stderr")
    assert code == 2, result
    assert "Traceback" not in stderr and stderr.startswith("patchkit: "), result
    assert stderr.count("\n") == 1, result  # one line
    return str(stderr)


def test_empty_inventory_never_reads_the_current_folder(tmp_path: Path) -> None:
    """`-i "$INV"` with INV unset: the folder the command runs in holds an Ansible inventory
    whose host is this machine; it is neither read nor contacted."""
    state = tmp_path / "state"
    (tmp_path / "hosts").write_text(f"[web]\nw1 ansible_connection=local patchkit_state_dir={state}\n")
    result = run_patchkit("plan", RECIPE, "-i", "", cwd=tmp_path)
    assert "-i/--inventory ''" in one_line_usage_error(result)
    assert not state.exists()


@pytest.mark.parametrize("argv", [
    ["plan", ""],
    ["plan", RECIPE, "-l", ""],
    ["apply", RECIPE, "--dry-run", "--steps", ""],
    ["status", RECIPE, "--state-dir", ""],
    ["plan", RECIPE, "--html", ""],
    ["history", "-i", ""],
    ["validate", RECIPE, "-i", ""],
    ["audit", "", "--time-budget", "1"],
    ["rollback", RECIPE, "--run", ""],
], ids=lambda argv: " ".join(map(repr, argv)))
def test_an_empty_value_is_a_usage_error(tmp_path: Path, argv: list[str]) -> None:
    home = tmp_path / "home"  # where a run would keep its journal
    result = run_patchkit(*argv, cwd=tmp_path, env={**os.environ, "HOME": str(home)})
    assert "'': an empty value" in one_line_usage_error(result)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv", [
    ["plan", RECIPE, "--lock-timeout", "nan"],
    ["plan", RECIPE, "--lock-timeout", "inf"],
    ["plan", RECIPE, "--lock-timeout", "-1"],
    ["plan", RECIPE, "--lock-timeout", "1e309"],
    ["audit", "vllm", "--time-budget", "nan"],
    ["plan", RECIPE, "--concurrency", "0"],
    ["plan", RECIPE, "--concurrency", "-3"],
    ["test", RECIPE, "--jobs", "0"],
    ["plan", RECIPE, "-l", "~" + "(" * 3000],
    ["plan", RECIPE, "-i", "a" * 5000],
], ids=lambda argv: " ".join(a[:20] for a in argv[2:]))
def test_numbers_and_patterns_out_of_range_are_refused(tmp_path: Path, argv: list[str]) -> None:
    one_line_usage_error(run_patchkit(*argv, cwd=tmp_path, env={**os.environ, "HOME": str(tmp_path)}))
    assert list(tmp_path.iterdir()) == []


def _validate_from_fd(text: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`patchkit validate R -i <(printf TEXT)`: the inventory is a pipe at /dev/fd/N."""
    read, write = os.pipe()

    def writer() -> None:
        with os.fdopen(write, "w") as stream:
            stream.write(text)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        return subprocess.run([PATCHKIT, "validate", RECIPE, "-i", f"/dev/fd/{read}"], pass_fds=(read,),
                              capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False)
    finally:
        os.close(read)
        thread.join()


@pytest.mark.parametrize("text", [
    "hosts:\n  p1: {address: local}\n",  # patchkit's own
    '{"_meta": {"hostvars": {"p1": {"ansible_connection": "local"}}}, "web": {"hosts": ["p1"]}}',  # --list JSON
    "[web]\np1 ansible_connection=local\n",  # Ansible INI: ansible-inventory reads what the pipe gave
], ids=["own-yaml", "ansible-json", "ansible-ini"])
def test_an_inventory_from_a_pipe_is_read_once(tmp_path: Path, text: str) -> None:
    result = _validate_from_fd(text, tmp_path)
    assert result.returncode == 0, result
    assert "with the variables of 1 host" in result.stdout, result


def test_an_inventory_on_stdin(tmp_path: Path) -> None:
    result = subprocess.run([PATCHKIT, "validate", RECIPE, "-i", "/dev/stdin", "-l", "p1"],
                            input="hosts:\n  p1: {address: local}\n  p2: {address: local}\n",
                            capture_output=True, text=True, timeout=60, cwd=tmp_path, check=False)
    assert result.returncode == 0 and "with the variables of 1 host" in result.stdout, result


def test_a_recipe_problem_with_an_inventory_from_a_pipe_names_only_the_recipe(tmp_path: Path) -> None:
    """The recipe fails to render with the host's variables: its problem, not a second reading
    of the (now empty) pipe."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text((REPO / "fixtures/recipes/toyllm_eagle3.yaml").read_text()
                      .replace("first_value: kimi_k2", "first_value: 3"))
    result = subprocess.run([PATCHKIT, "validate", str(recipe), "-i", "/dev/stdin"],
                            input="hosts:\n  p1: {address: local, vars: {first_value: [1]}}\n",
                            capture_output=True, text=True, timeout=60, cwd=tmp_path, check=False)
    assert result.returncode == 2 and "first_value" in result.stderr, result
    assert result.stderr.count("\n") == 1 and "has no host" not in result.stderr, result


def _limited_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))  # an endless read must not take the machine


def test_an_endless_inventory_is_refused_at_the_size_limit(tmp_path: Path) -> None:
    result = subprocess.run([PATCHKIT, "validate", RECIPE, "-i", "/dev/zero"], capture_output=True, text=True,
                            timeout=60, cwd=tmp_path, check=False, preexec_fn=_limited_memory)
    assert "larger than 64 MiB" in one_line_usage_error(result)


def _chain_yaml(depth: int) -> str:
    lines = ["hosts:\n  h: {address: local}\ngroups:\n", *(f"  g{i}: [g{i + 1}]\n" for i in range(depth))]
    return "".join([*lines, f"  g{depth}: [h]\n"])


def _chain_json(depth: int) -> str:
    groups = ", ".join(f'"g{i}": {{"children": ["g{i + 1}"]}}' for i in range(depth))
    return '{"_meta": {"hostvars": {"h": {"ansible_connection": "local"}}}, %s, "g%d": {"hosts": ["h"]}}' % (
        groups, depth)


def _nested_json(depth: int) -> str:
    value = '{"k": ' * depth + "1" + "}" * depth
    return '{"_meta": {"hostvars": {"h": {"ansible_connection": "local", "v": %s}}}}' % value


def _chain_ini(depth: int) -> str:
    return "".join([f"[g{depth}]\nh ansible_connection=local\n",
                    *(f"[g{i}:children]\ng{i + 1}\n" for i in range(depth))])


FORMS = {"chain.yml": _chain_yaml, "chain.json": _chain_json, "nested.json": _nested_json, "chain.ini": _chain_ini}


def test_nesting_past_the_limit_is_one_line_and_within_it_works(tmp_path: Path) -> None:
    """A ~900-deep chain of groups (patchkit's YAML, the --list JSON, Ansible INI) and deeply
    nested JSON are refused naming the limit; 90 levels still read."""
    argvs, names = [], []
    for name, form in FORMS.items():
        for depth in (900, 90 if name != "nested.json" else 90 - 4):  # 4 levels above a host's variable
            path = tmp_path / f"{depth}-{name}"
            path.write_text(form(depth))
            argvs.append(["validate", RECIPE, "-i", str(path)])
            names.append((name, depth))
    for (name, depth), result in zip(names, run_many(argvs, timeout=120)):
        if depth == 900:
            assert "nested deeper than 100 levels" in one_line_usage_error(result), (name, result)
        else:
            assert result.returncode == 0, (name, result)
