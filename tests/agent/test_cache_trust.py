"""The control machine's cache is trusted only when it is this user's alone (patchkit/base/cache.py),
and an entry only when this user's key sealed it (run/steps/edit_cache.py): the real CLI on a
local sandbox host, with a real second user (useradd) owning the folders it must refuse."""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import Sandbox, recipe, run_patchkit, sandbox_fixture, sha256  # noqa: F401

OTHER = "pk-test-cacheowner"
TOY = recipe("toyllm_eagle3.yaml")
SPECULATIVE = "toyllm/config/speculative.py"


@pytest.fixture(name="other_user", scope="module")
def other_user_fixture() -> Iterator[pwd.struct_passwd]:
    """Another local user (created here, removed at the end)."""
    assert os.geteuid() == 0, "these tests create a user: run them as root (our machines and CI do)"
    assert shutil.which("useradd"), "useradd is missing (Debian's passwd package)"
    try:
        pwd.getpwnam(OTHER)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", OTHER], check=True)
    yield pwd.getpwnam(OTHER)
    subprocess.run(["userdel", OTHER], check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def env_with(cache: Path) -> dict[str, str]:
    return {**os.environ, "PATCHKIT_CACHE_DIR": str(cache)}


def listing(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("command", ["plan", "apply", "status"])
def test_a_cache_another_user_owns_is_refused_in_one_line_before_any_host(
        tmp_path: Path, sandbox: Sandbox, other_user: pwd.struct_passwd, command: str) -> None:
    cache = tmp_path / "cache"
    (cache / "edits").mkdir(parents=True)
    (cache / "edits" / "planted.json").write_text('{"verdict": "changed"}')
    for path in (cache, cache / "edits", cache / "edits" / "planted.json"):
        os.chown(path, other_user.pw_uid, other_user.pw_gid)
    before, target = listing(cache), sha256(sandbox.file(SPECULATIVE))
    result = run_patchkit(*sandbox.argv(command, TOY), env=env_with(cache))
    assert result.returncode == 2, result
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"patchkit: cache folder {cache} is owned by {OTHER} (uid {other_user.pw_uid}), "
                           "not by this user (root (uid 0))"), line
    assert "nothing done" in line and "Traceback" not in result.stderr
    assert listing(cache) == before and sha256(sandbox.file(SPECULATIVE)) == target
    assert not sandbox.state.exists()  # the host was not contacted: no journal


def test_a_subfolder_another_user_owns_is_refused_too(tmp_path: Path, sandbox: Sandbox,
                                                      other_user: pwd.struct_passwd) -> None:
    cache = tmp_path / "cache"
    (cache / "edits").mkdir(parents=True, mode=0o700)
    cache.chmod(0o700)
    os.chown(cache / "edits", other_user.pw_uid, other_user.pw_gid)
    result = run_patchkit(*sandbox.argv("plan", TOY), env=env_with(cache))
    assert result.returncode == 2, result
    assert result.stderr.startswith(f"patchkit: cache folder {cache / 'edits'} is owned by {OTHER}"), result
    assert not sandbox.state.exists()


def test_a_cache_above_which_another_user_can_rename_is_refused(tmp_path: Path, sandbox: Sandbox,
                                                                 other_user: pwd.struct_passwd) -> None:
    """A folder of the other user's above the cache: they could swap the cache for one of theirs."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, other_user.pw_uid, other_user.pw_gid)
    result = run_patchkit(*sandbox.argv("plan", TOY), env=env_with(theirs / "cache"))
    assert result.returncode == 2, result
    assert result.stderr.startswith(f"patchkit: cache folder {theirs} is owned by {OTHER}"), result
    assert not (theirs / "cache").exists()


def test_a_cache_folder_others_can_write_is_refused(tmp_path: Path, sandbox: Sandbox) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o777)
    result = run_patchkit(*sandbox.argv("plan", TOY), env=env_with(cache))
    assert result.returncode == 2, result
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"patchkit: cache folder {cache} (owner root (uid 0)) is writable by other users"), line
    assert listing(cache) == {}


def test_patchkit_test_refuses_another_users_cache(tmp_path: Path, other_user: pwd.struct_passwd) -> None:
    cache = tmp_path / "cache"
    (cache / "release-plans").mkdir(parents=True)
    os.chown(cache / "release-plans", other_user.pw_uid, other_user.pw_gid)
    result = run_patchkit("test", TOY, "--versions", "0.16.0", env={**env_with(cache), "PIP_NO_INDEX": "1",
                                                                   "PIP_CONFIG_FILE": os.devnull})
    assert result.returncode == 2, result
    assert result.stderr.startswith(f"patchkit: cache folder {cache / 'release-plans'} is owned by {OTHER}"), result


def test_a_new_cache_is_the_users_alone(tmp_path: Path, sandbox: Sandbox) -> None:
    cache = tmp_path / "new" / "cache"
    result = run_patchkit(*sandbox.argv("plan", TOY), env=env_with(cache))
    assert result.returncode == 0, result
    folders = [cache, *(p for p in cache.rglob("*") if p.is_dir())]
    files = [p for p in cache.rglob("*") if p.is_file()]
    assert (cache / "edits") in folders and files
    assert {stat.S_IMODE(p.stat().st_mode) for p in folders} == {0o700}
    assert {stat.S_IMODE(p.stat().st_mode) for p in files} == {0o600}


def test_a_poisoned_edit_entry_whose_hashes_match_is_never_applied(tmp_path: Path, sandbox: Sandbox) -> None:
    """The poisoner edits the cached source and recomputes every hash the entry carries: plan
    and apply still write the edit of the file, and the poison runs nowhere."""
    cache = tmp_path / "cache"
    first = run_patchkit(*sandbox.argv("plan", TOY, "--steps", "eagle3-whitelist"), env=env_with(cache))
    assert first.returncode == 0, first
    poison = 'import os; os.makedirs(' + json.dumps(str(tmp_path / "poison-ran")) + ')\n'
    for entry in (cache / "edits").glob("*.json"):
        data = json.loads(entry.read_text())
        if data.get("verdict") != "changed":
            continue
        data["source"] = data["source"] + poison
        data["sha256_after"] = hashlib.sha256(data["source"].encode()).hexdigest()
        entry.write_text(json.dumps(data))
    plan = run_patchkit(*sandbox.argv("plan", TOY, "--steps", "eagle3-whitelist"), env=env_with(cache))
    assert plan.returncode == 0 and "os.makedirs" not in plan.stdout, plan
    apply = run_patchkit(*sandbox.argv("apply", TOY, "--steps", "eagle3-whitelist"), env=env_with(cache))
    assert apply.returncode == 0, apply
    written = sandbox.file(SPECULATIVE).read_text()
    assert '"kimi_k2"' in written and "os.makedirs" not in written
    assert not (tmp_path / "poison-ran").exists()


SECRET = "sk-live-7f3a9c0e5d1b"
SECRET_RECIPE = f"""name: secret-edit
vars: {{api_token: "{SECRET}"}}
steps:
  - name: token-in-list
    patch:
      package: toyllm
      modules: [toyllm.config.model]
      edit: {{list_insert: {{names: [_FLOAT16_DTYPES], values: ["{{{{ api_token }}}}"]}}}}
"""


def test_an_edit_with_a_secret_value_leaves_no_trace_in_the_cache(tmp_path: Path, sandbox: Sandbox) -> None:
    recipe_file = tmp_path / "secret.yaml"
    recipe_file.write_text(SECRET_RECIPE)
    cache = tmp_path / "cache"
    for command in ("plan", "apply", "plan"):
        result = run_patchkit(*sandbox.argv(command, str(recipe_file)), env=env_with(cache))
        assert result.returncode == 0 and SECRET not in result.stdout, result
    assert SECRET in sandbox.file("toyllm/config/model.py").read_text()  # the host got the real value
    assert not [name for name, data in listing(cache).items() if SECRET.encode() in data]
    # The same cache keeps an edit without a secret: the check above looked where entries go.
    assert run_patchkit(*sandbox.argv("plan", TOY), env=env_with(cache)).returncode == 0
    assert list((cache / "edits").glob("*.json"))


def test_patchkit_test_keeps_no_secret_value_in_its_caches(tmp_path: Path) -> None:
    from tests.agent.test_release_test import build_wheel, pip_sees_only  # noqa: PLC0415 - the toy index

    links = tmp_path / "links"
    links.mkdir()
    build_wheel(links, "0.16.0")
    recipe_file = tmp_path / "secret.yaml"
    recipe_file.write_text(SECRET_RECIPE)
    env = pip_sees_only(links, tmp_path / "cache")
    result = run_patchkit("test", str(recipe_file), "--json", env=env, timeout=180)
    assert result.returncode == 0, result
    assert result.json()["steps"]["token-in-list"]["releases"]["0.16.0"]["status"] == "changed"
    kept = listing(tmp_path / "cache")
    assert any(name.startswith("release-files/") for name in kept)
    assert not [name for name, data in kept.items() if SECRET.encode() in data]
