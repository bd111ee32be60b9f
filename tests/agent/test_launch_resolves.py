"""The server's environment decides: a launch whose PYTHONPATH or cwd brings another copy of the
patched package would serve the old code while apply says changed and status applied. Before it
starts a server, the launch step resolves the patched modules as that server would; another copy
fails the step naming both files, and nothing is started. status says it of a running server."""

from __future__ import annotations

import json
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import PKGS, TOY_SPECULATIVE, Sandbox, make_sandbox, step

EAGLE3 = "eagle3-whitelist"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_recipe(path: Path, port: int, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    launch: dict[str, object] = {
        "command": ["python", "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        "health": {"url": f"http://127.0.0.1:{port}/", "timeout_s": 20, "interval_s": 0.2},
    }
    if env:
        launch["env"] = env
    if cwd:
        launch["cwd"] = str(cwd)
    recipe = {"name": "serve_toy", "steps": [
        {"name": EAGLE3, "patch": {
            "package": "toyllm", "modules": ["toyllm.config.speculative"],
            "edit": {"list_insert": {"names": ["eagle3_target_supported"], "within": "SpeculativeConfig._verify_args",
                                     "values": ["kimi_k2"], "after": "afmoe"}}},
         "verify": {"import": ["toyllm.config.speculative"]}},
        {"name": "serve", "launch": launch},
    ]}
    path.write_text(json.dumps(recipe))  # JSON is YAML
    return str(path)


def copy_of_toyllm(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copytree(PKGS / "toyllm" / "toyllm", folder / "toyllm")
    return folder / "toyllm" / "config" / "speculative.py"


@pytest.fixture
def box(tmp_path: Path) -> Iterator[Sandbox]:
    sandbox = make_sandbox(tmp_path / "host")
    yield sandbox
    for recipe_file in tmp_path.glob("*.yaml"):  # never leave a server behind
        sandbox.run("rollback", str(recipe_file), "--force", timeout=60)


def server_record(box: Sandbox) -> Path:
    return box.state / "launch" / "serve.json"


def test_a_pythonpath_with_another_copy_fails_the_launch_before_it_starts(box: Sandbox, tmp_path: Path) -> None:
    other = copy_of_toyllm(tmp_path / "src")
    recipe_file = write_recipe(tmp_path / "pp.yaml", free_port(), env={"PYTHONPATH": str(tmp_path / "src")})

    result = box.run("apply", recipe_file, json_out=True)
    assert result.returncode == 1, result
    assert step(result, EAGLE3)["status"] == "changed"  # the patch itself is fine: the server would not run it
    serve = step(result, "serve")
    assert serve["status"] == "failed", serve
    assert (f"the server would import toyllm.config.speculative from {other}; "
            f"patchkit wrote {box.file(TOY_SPECULATIVE)}") in serve["message"], serve
    assert "PYTHONPATH" in serve["message"] and "not started" in serve["message"]
    assert not server_record(box).exists()  # nothing started

    plan = box.run("plan", recipe_file, json_out=True)
    assert step(plan, "serve")["status"] == "failed" and str(other) in step(plan, "serve")["message"], plan


def test_a_launch_cwd_holding_a_copy_fails_with_python_m(box: Sandbox, tmp_path: Path) -> None:
    """`python -m` puts its cwd first on sys.path: a checkout there is what the server imports."""
    workdir = tmp_path / "work"
    other = copy_of_toyllm(workdir)
    recipe_file = write_recipe(tmp_path / "cwd.yaml", free_port(), cwd=workdir)

    result = box.run("apply", recipe_file, json_out=True)
    assert result.returncode == 1, result
    serve = step(result, "serve")
    assert serve["status"] == "failed", serve
    assert f"from {other}; patchkit wrote {box.file(TOY_SPECULATIVE)}" in serve["message"], serve
    assert not server_record(box).exists()


def test_a_launch_that_imports_the_patched_copy_starts_and_status_sees_a_copy_appear(box: Sandbox,
                                                                                     tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    recipe_file = write_recipe(tmp_path / "ok.yaml", free_port(), cwd=workdir)
    result = box.run("apply", recipe_file, json_out=True)
    assert result.returncode == 0, result
    assert step(result, "serve")["status"] == "changed", result

    status = box.run("status", recipe_file, json_out=True)
    assert status.returncode == 0 and step(status, "serve")["status"] == "applied", status

    other = copy_of_toyllm(workdir)  # a checkout lands in the running server's cwd
    status = box.run("status", recipe_file, json_out=True)
    serve = step(status, "serve")
    assert status.returncode == 3 and serve["status"] == "stale", status
    assert f"from {other}; patchkit wrote {box.file(TOY_SPECULATIVE)}" in serve["message"], serve
