"""Defaults from the environment and the config files (patchkit/cli/config.py): which wins,
where each value came from, and what is refused — unknown keys with a did-you-mean, wrong
types, and a file another user owns or could write."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from patchkit.base.errors import UsageError
from patchkit.cli import config

pytestmark = pytest.mark.unit


@pytest.fixture
def place(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """A project folder (with a sub folder to run in) and a HOME, with no config yet."""
    project = tmp_path / "project"
    (project / "sub").mkdir(parents=True)
    home = tmp_path / "home"
    home.mkdir()
    for folder in (tmp_path, project, project / "sub", home):
        folder.chmod(0o755)
    return project, home, {"HOME": str(home)}


def user_config(home: Path, text: str) -> Path:
    path = home / ".config" / "patchkit" / "config.toml"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return path


def test_the_environment_beats_the_project_file_which_beats_the_user_file(place: tuple[Path, Path, dict[str, str]]) -> None:
    project, home, env = place
    user_config(home, 'concurrency = 4\nstate_dir = "/srv/user-state"\nlog_format = "json"\n')
    (project / "patchkit.toml").write_text('concurrency = 8\nstate_dir = "/srv/project-state"\n'
                                           'inventory = ["inv/gpu.yml", "/etc/patchkit/all.yml"]\n')
    settings = config.load(project / "sub", {**env, "PATCHKIT_STATE_DIR": "/srv/env-state"})
    assert settings.values == {"concurrency": 8, "state_dir": "/srv/env-state", "log_format": "json",
                               "inventory": [str(project / "inv" / "gpu.yml"), "/etc/patchkit/all.yml"]}
    assert settings.sources["state_dir"] == "PATCHKIT_STATE_DIR"
    assert settings.sources["concurrency"] == str(project / "patchkit.toml")
    assert settings.sources["log_format"] == str(home / ".config" / "patchkit" / "config.toml")
    used = settings.used({"concurrency"})  # given on the command line: not a configured value
    assert ("state_dir", "/srv/env-state", "PATCHKIT_STATE_DIR") in used
    assert [key for key, _, _ in used] == ["inventory", "state_dir", "log_format"]


def test_nothing_configured_is_nothing_set(place: tuple[Path, Path, dict[str, str]]) -> None:
    project, _, env = place
    assert config.load(project, env).values == {}


@pytest.mark.parametrize(("text", "message"), [
    ("concurency = 3\n", "unknown key 'concurency' (did you mean concurrency?)"),
    ("concurrency = 0\n", "concurrency must be a whole number, at least 1, not 0"),
    ("lock_timeout = 'soon'\n", "lock_timeout must be a number of seconds, 0 or more, not 'soon'"),
    ("log_format = 'xml'\n", "log_format must be console or json, not 'xml'"),
    ("inventory = []\n", "inventory must be a path or a list of paths, not []"),
    ("state_dir = \n", "not TOML"),
])
def test_a_bad_project_file_is_one_line_naming_it(place: tuple[Path, Path, dict[str, str]], text: str,
                                                  message: str) -> None:
    project, _, env = place
    (project / "patchkit.toml").write_text(text)
    with pytest.raises(UsageError) as caught:
        config.load(project, env)
    assert str(caught.value).startswith(f"{project / 'patchkit.toml'}: ") and message in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(("name", "value", "message"), [
    ("PATCHKIT_CONCURRENCY", "many", "PATCHKIT_CONCURRENCY must be a whole number, at least 1, not 'many'"),
    ("PATCHKIT_STATE_DIR", " ", "PATCHKIT_STATE_DIR is empty: unset it or give a value"),
])
def test_a_bad_environment_value_names_the_variable(place: tuple[Path, Path, dict[str, str]], name: str, value: str,
                                                    message: str) -> None:
    project, _, env = place
    with pytest.raises(UsageError, match="^" + message.replace("(", r"\(") + "$"):
        config.load(project, {**env, name: value})


def test_a_file_another_user_owns_or_can_write_is_not_read(place: tuple[Path, Path, dict[str, str]]) -> None:
    project, home, env = place
    planted = project / "patchkit.toml"
    planted.write_text('inventory = ["attacker.yml"]\n')
    planted.chmod(0o664)
    with pytest.raises(UsageError, match="writable by other users"):
        config.load(project, env)
    planted.chmod(0o644)
    project.chmod(0o777)
    with pytest.raises(UsageError, match="writable by other users"):
        config.load(project, env)
    project.chmod(0o755)
    if os.geteuid() == 0:  # as root: a file of another uid (as another user: of root, which is trusted)
        os.chown(planted, 65534, 65534)
        with pytest.raises(UsageError, match=r"belongs to another user \(uid 65534\)"):
            config.load(project, env)
        os.chown(planted, 0, 0)
    assert config.load(project, env).get("inventory") == [str(project / "attacker.yml")]
    user = user_config(home, "concurrency = 2\n")
    user.chmod(0o666)
    with pytest.raises(UsageError, match=f"^{user}: not read: {user} is writable by other users"):
        config.load(project, env)
