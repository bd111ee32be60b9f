"""A `diff` edit with `base:` (the release it was written against): a three-way merge with the
host's file, end to end. Real pip (pointed at a folder of toy wheels built here: no network),
the real cache, the real agent on a sandbox host, the real CLI.

The story: the fix was made on toyllm 0.16.0 (`git diff` of that release's files and the
fixed ones); the host runs a release whose files differ from 0.16.0 near the fix, so the
plain diff's context is not there, but the host's differences and the fix do not overlap.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.agent.test_release_test import pip_sees_only
from tests.helpers import Sandbox, make_sandbox, run_patchkit, sha256, write_wheel

BASE_LIMITS = '''"""Limits (toy)."""


def max_len(config):
    # the model's context window
    limit = config.get("max_len", 2048)
    limit = min(limit, 1 << 20)
    limit = max(limit, 16)
    return limit


def batch(config):
    return config.get("batch", 8)
'''
FIXED_LIMITS = BASE_LIMITS.replace('"max_len", 2048', '"max_len", 4096')
# The host's release: an older docstring, and `return int(limit)`: the third line of the
# fix's context differs (the plain diff finds no place), two unchanged lines from the fix.
HOST_LIMITS = BASE_LIMITS.replace('"""Limits (toy)."""', '"""Limits."""').replace("return limit", "return int(limit)")
MERGED_LIMITS = HOST_LIMITS.replace('"max_len", 2048', '"max_len", 4096')

BASE_DEVICES = '''"""Devices (toy)."""


def device(config):
    return config.get("device", "cpu")
'''
FIXED_DEVICES = BASE_DEVICES.replace('"cpu")', '"cpu").lower()')


def git_diff(old: dict[str, str], new: dict[str, str], scratch: Path) -> str:
    """`git diff` of two trees of files (index lines and all), paths a/toyllm/..., b/toyllm/..."""
    for side, files in (("a", old), ("b", new)):
        for rel, text in files.items():
            (scratch / side / rel).parent.mkdir(parents=True, exist_ok=True)
            (scratch / side / rel).write_text(text)
    out = subprocess.run(["git", "diff", "--no-index", "--no-color", "--no-prefix", "a", "b"], cwd=scratch, capture_output=True,
                         text=True, check=False)
    assert out.returncode == 1, out.stderr
    return out.stdout


def wheel(links: Path, version: str, files: dict[str, str]) -> None:
    write_wheel(links, "toyllm", version, {"toyllm/__init__.py": "", "toyllm/_version.py": f'__version__ = "{version}"\n',
                                           **files})


RELEASES = {  # what `patchkit test` finds on each release
    "0.15.0": {"toyllm/limits.py": HOST_LIMITS, "toyllm/devices.py": BASE_DEVICES},  # merges: changed
    "0.16.0": {"toyllm/limits.py": BASE_LIMITS, "toyllm/devices.py": BASE_DEVICES},  # the base: changed
    "0.17.0": {"toyllm/limits.py": FIXED_LIMITS, "toyllm/devices.py": FIXED_DEVICES},  # fixed: already
    "0.18.0": {"toyllm/limits.py": BASE_LIMITS.replace("2048", "1024"), "toyllm/devices.py": BASE_DEVICES},  # conflict
}


@pytest.fixture(name="world")
def world_fixture(tmp_path: Path) -> tuple[Sandbox, dict[str, str], Path]:
    """A host running the 0.15.0-like files, an index of toy releases, and a folder for recipes."""
    links = tmp_path / "links"
    links.mkdir()
    for version, files in RELEASES.items():
        wheel(links, version, files)
    box = make_sandbox(tmp_path / "host", packages=("toyllm",))
    box.file("toyllm/limits.py").write_text(HOST_LIMITS)
    box.file("toyllm/devices.py").write_text(BASE_DEVICES)
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    return box, pip_sees_only(links, tmp_path / "cache"), recipes


def write_recipe(recipes: Path, diff: str, base: str | None = "toyllm==0.16.0", reverse: bool = False,
                 name: str = "fix.yaml") -> str:
    (recipes / "fix.patch").write_text(diff)
    based = f"\n          base: \"{base}\"" if base else ""
    (recipes / name).write_text(f"""name: backport
steps:
  - name: fix
    patch:
      package: toyllm
      edit:
        diff:
          file: fix.patch{based}
          reverse: {str(reverse).lower()}
""")
    return str(recipes / name)


def run(box: Sandbox, env: dict[str, str], command: str, recipe_file: str, *args: str):
    return run_patchkit(*box.argv(command, recipe_file, "--json", *args), env=env, timeout=120)


def the_step(result) -> dict:
    return result.hosts()["local"]["steps"][0]


def limits_fix(tmp_path: Path) -> str:
    return git_diff({"toyllm/limits.py": BASE_LIMITS}, {"toyllm/limits.py": FIXED_LIMITS}, tmp_path / "d1")


def test_a_backport_merges_where_the_plain_diff_finds_no_place_then_is_already_and_rolls_back(
        world: tuple[Sandbox, dict[str, str], Path], tmp_path: Path) -> None:
    box, env, recipes = world
    diff = limits_fix(tmp_path)
    target = box.file("toyllm/limits.py")
    before = target.read_bytes()

    plain = run(box, env, "apply", write_recipe(recipes, diff, base=None, name="plain.yaml"))
    assert plain.returncode == 1 and "hunk" in the_step(plain)["message"], plain
    assert target.read_bytes() == before

    applied = run(box, env, "apply", write_recipe(recipes, diff))
    assert applied.returncode == 0, applied
    assert the_step(applied)["status"] == "changed"
    assert "merged 1 change of the fix (base toyllm==0.16.0)" in the_step(applied)["message"]
    assert target.read_text() == MERGED_LIMITS  # the fix, and the host's own lines kept
    assert "fetched toyllm 0.16.0" in applied.stderr

    again = run(box, env, "apply", write_recipe(recipes, diff))
    assert again.returncode == 0 and the_step(again)["status"] == "ok", again
    assert target.read_text() == MERGED_LIMITS
    assert "fetched" not in again.stderr  # the base's files came from the cache

    # rollback puts the backups back: it needs no base, so it works with no index and no cache
    offline = pip_sees_only(tmp_path / "no-links", tmp_path / "empty-cache")
    back = run(box, offline, "rollback", write_recipe(recipes, diff))
    assert back.returncode == 0, back
    assert target.read_bytes() == before


def test_reverse_merges_the_inverse(world: tuple[Sandbox, dict[str, str], Path], tmp_path: Path) -> None:
    box, env, recipes = world
    target = box.file("toyllm/limits.py")
    target.write_text(MERGED_LIMITS)  # the host has the fix (put in by hand, say)
    out = run(box, env, "apply", write_recipe(recipes, limits_fix(tmp_path), reverse=True))
    assert out.returncode == 0 and the_step(out)["status"] == "changed", out
    assert target.read_text() == HOST_LIMITS


def test_a_conflict_is_refused_showing_both_sides_and_nothing_is_written(
        world: tuple[Sandbox, dict[str, str], Path], tmp_path: Path) -> None:
    box, env, recipes = world
    target = box.file("toyllm/limits.py")
    target.write_text(HOST_LIMITS.replace("2048", "1024"))
    before = sha256(target)
    out = run(box, env, "apply", write_recipe(recipes, limits_fix(tmp_path)))
    assert out.returncode == 1, out
    message = the_step(out)["message"]
    assert message.startswith(f"{target}: 1 conflict merging the fix (base toyllm==0.16.0) into the host's file; "
                              "nothing changed\n"), message  # a refusal naming the file, not a target not found
    assert '  base |     limit = config.get("max_len", 2048)' in message
    assert '  host |     limit = config.get("max_len", 1024)' in message
    assert '  fix  |     limit = config.get("max_len", 4096)' in message
    assert sha256(target) == before


def test_a_multi_file_fix_is_one_unit_a_conflict_in_one_file_writes_neither(
        world: tuple[Sandbox, dict[str, str], Path], tmp_path: Path) -> None:
    box, env, recipes = world
    diff = git_diff({"toyllm/limits.py": BASE_LIMITS, "toyllm/devices.py": BASE_DEVICES},
                    {"toyllm/limits.py": FIXED_LIMITS, "toyllm/devices.py": FIXED_DEVICES}, tmp_path / "d2")
    limits, devices = box.file("toyllm/limits.py"), box.file("toyllm/devices.py")
    devices.write_text(BASE_DEVICES.replace('"cpu")', '"cuda")'))  # the host changed that line: a conflict
    before = (limits.read_bytes(), devices.read_bytes())
    refused = run(box, env, "apply", write_recipe(recipes, diff))
    assert refused.returncode == 1, refused
    assert the_step(refused)["message"].startswith(f"{devices}: 1 conflict merging the fix"), refused
    assert '  host |     return config.get("device", "cuda")' in the_step(refused)["message"]
    assert (limits.read_bytes(), devices.read_bytes()) == before

    devices.write_text(BASE_DEVICES)
    applied = run(box, env, "apply", write_recipe(recipes, diff))
    assert applied.returncode == 0 and the_step(applied)["status"] == "changed", applied
    assert (limits.read_text(), devices.read_text()) == (MERGED_LIMITS, FIXED_DEVICES)


def test_a_diff_not_made_from_its_base_is_a_recipe_error_before_any_host(
        world: tuple[Sandbox, dict[str, str], Path], tmp_path: Path) -> None:
    box, env, recipes = world
    target = box.file("toyllm/limits.py")
    before = target.read_bytes()
    # made from the host's release, not 0.16.0: its `index` line names another blob
    other = git_diff({"toyllm/limits.py": HOST_LIMITS}, {"toyllm/limits.py": MERGED_LIMITS}, tmp_path / "d3")
    wrong_blob = run(box, env, "apply", write_recipe(recipes, other))
    assert wrong_blob.returncode == 2, wrong_blob
    assert "the diff's `index` line names blob" in wrong_blob.stderr and "toyllm==0.16.0" in wrong_blob.stderr
    # without the index line, the hunk's lines are checked against the base's
    unindexed = "\n".join(line for line in other.split("\n") if not line.startswith("index "))
    not_exact = run(box, env, "apply", write_recipe(recipes, unindexed))
    assert not_exact.returncode == 2, not_exact
    assert "does not apply exactly to base toyllm==0.16.0" in not_exact.stderr
    assert "Traceback" not in wrong_blob.stderr + not_exact.stderr
    assert len(not_exact.stderr.strip().splitlines()) == 1
    absent = run(box, env, "apply", write_recipe(recipes, limits_fix(tmp_path), base="toyllm==9.9.9"))
    assert absent.returncode == 2 and "base toyllm==9.9.9: cannot fetch toyllm==9.9.9" in absent.stderr, absent
    assert target.read_bytes() == before
    assert not box.state.exists() or not any(box.state.rglob("*.json"))  # no host was contacted


def test_a_base_that_is_not_one_release_is_a_recipe_error(world: tuple[Sandbox, dict[str, str], Path],
                                                          tmp_path: Path) -> None:
    box, env, recipes = world
    out = run_patchkit("validate", write_recipe(recipes, limits_fix(tmp_path), base="toyllm>=0.16"), env=env)
    assert out.returncode == 2, out
    assert "expected one release of the package index as DIST==VERSION" in out.stderr
    assert "fix.yaml:" in out.stderr  # the file and line of the field
    # validate reads the recipe alone: a base release is not fetched (nor needs to exist)
    unfetched = run_patchkit("validate", write_recipe(recipes, limits_fix(tmp_path), base="toyllm==9.9.9"), env=env)
    assert unfetched.returncode == 0 and "fetched" not in unfetched.stderr, unfetched


def test_patchkit_test_shows_per_release_applied_already_and_conflict(
        world: tuple[Sandbox, dict[str, str], Path], tmp_path: Path) -> None:
    _box, env, recipes = world
    out = run_patchkit("test", write_recipe(recipes, limits_fix(tmp_path)), "--json", env=env, timeout=180)
    assert out.returncode == 1, out  # a release cannot be patched: 0.18.0
    cells = out.json()["steps"]["fix"]["releases"]
    assert {v: c["status"] for v, c in cells.items()} == {
        "0.15.0": "changed", "0.16.0": "changed", "0.17.0": "ok", "0.18.0": "failed"}
    assert "merged 1 change of the fix" in cells["0.15.0"]["message"]
    assert '  host |     limit = config.get("max_len", 1024)' in cells["0.18.0"]["message"]
    assert '  fix  |     limit = config.get("max_len", 4096)' in cells["0.18.0"]["message"]
    table = run_patchkit("test", write_recipe(recipes, limits_fix(tmp_path)), env=env, timeout=180)
    assert "conflict" in table.stdout and '1024' in table.stdout, table
