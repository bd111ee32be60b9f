"""The pip step kind against a real local host: real pip, run by the host's interpreter,
installing from a wheel house built here (two versions of a tiny distribution; no index, no
network). The real `patchkit` executable does the work; the tests assert what is installed
(the dist-info folder and the module's text in the host's site-packages) and what was said."""

from __future__ import annotations

import json
import os
import subprocess
import sysconfig
from pathlib import Path

import pytest

from tests.helpers import Result, Sandbox, make_sandbox, run_patchkit, step, write_wheel

pytestmark = pytest.mark.agent

DIST = "pkprobe"


def build_wheel(folder: Path, version: str) -> Path:
    """A pure-Python wheel of DIST at `version`: its module says the version."""
    return write_wheel(folder, DIST, version, {f"{DIST}/__init__.py": f'VERSION = "{version}"\n'})


@pytest.fixture(name="host")
def host_fixture(tmp_path: Path) -> tuple[Sandbox, Path]:
    """A sandbox host whose interpreter has pip (the control side's own, on its path through a
    .pth: a folder holding only pip), and a wheel house with DIST 1.0 and 2.0."""
    box = make_sandbox(tmp_path / "host", packages=())
    pip_only = tmp_path / "pip-only"
    pip_only.mkdir()
    import pip

    (pip_only / "pip").symlink_to(Path(pip.__file__).parent)
    (site_packages(box) / "pip_only.pth").write_text(f"{pip_only}\n")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for version in ("1.0", "2.0"):
        build_wheel(wheels, version)
    return box, wheels


def site_packages(box: Sandbox) -> Path:
    venv = box.python.parent.parent
    return Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))


def installed(box: Sandbox) -> tuple[list[str], str | None]:
    """The DIST dist-info folders in the host's site-packages, and its module's text."""
    site = site_packages(box)
    module = site / DIST / "__init__.py"
    return sorted(p.name for p in site.glob(f"{DIST}-*.dist-info")), module.read_text() if module.is_file() else None


def pip_env() -> dict[str, str]:
    """No pip configuration of this machine's (its index mirrors, find-links) reaches a run."""
    return {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def pip_by_hand(box: Sandbox, wheels: Path, version: str) -> None:
    """Someone else installs DIST==version on the host."""
    subprocess.run([str(box.python), "-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheels),
                    f"{DIST}=={version}"], check=True, env=pip_env(), cwd="/", capture_output=True)


def write_recipe(box: Sandbox, wheels: Path, version: str) -> str:
    path = box.root / "pinned.yaml"
    path.write_text("name: pinned\nsteps:\n  - name: pin-probe\n    pip:\n"
                    f"      package: {DIST}\n      version: {json.dumps(version)}\n"
                    f"      no_index: true\n      find_links: [{json.dumps(str(wheels))}]\n")
    return str(path)


def run(box: Sandbox, command: str, recipe: str, *args: str) -> Result:
    return run_patchkit(*box.argv(command, recipe, *args), env=pip_env(), timeout=120)


def test_installing_is_a_mutating_op_and_reading_the_version_is_not() -> None:
    """Refused once a journal write failed (the host's guard, and FakeAgent's, read this)."""
    from patchkit.host.agent.client import mutating_ops

    assert "pip_install" in mutating_ops() and "pip_version" not in mutating_ops()


def test_apply_installs_the_pinned_version_and_a_second_apply_changes_nothing(host: tuple[Sandbox, Path]) -> None:
    box, wheels = host
    pip_by_hand(box, wheels, "1.0")
    recipe = write_recipe(box, wheels, "2.0")

    plan = run(box, "plan", recipe, "--json")
    assert plan.returncode == 0, plan
    planned = step(plan, "pin-probe")
    assert planned["status"] == "changed"
    assert f"-m pip install {DIST}==2.0 --find-links={wheels} --no-index" in planned["message"], planned
    assert installed(box) == ([f"{DIST}-1.0.dist-info"], 'VERSION = "1.0"\n')  # a plan installs nothing

    applied = run(box, "apply", recipe, "--json")
    assert applied.returncode == 0, applied
    done = step(applied, "pin-probe")
    assert done["status"] == "changed" and done["message"] == f"installed {DIST} 2.0 (was 1.0)", done
    assert installed(box) == ([f"{DIST}-2.0.dist-info"], 'VERSION = "2.0"\n')
    journaled = box.run_records("pinned")[-1]["steps"][-1]
    assert (journaled["details"]["version_before"], journaled["details"]["version_after"]) == ("1.0", "2.0")

    again = run(box, "apply", recipe, "--json")
    assert again.returncode == 0, again
    assert step(again, "pin-probe")["status"] == "ok", again
    assert installed(box) == ([f"{DIST}-2.0.dist-info"], 'VERSION = "2.0"\n')


def test_status_is_pending_then_applied_then_drifted_when_someone_installs_another_version(
        host: tuple[Sandbox, Path]) -> None:
    box, wheels = host
    recipe = write_recipe(box, wheels, "2.0")
    pending = run(box, "status", recipe, "--json")
    assert pending.returncode == 3 and step(pending, "pin-probe")["status"] == "pending", pending
    assert installed(box) == ([], None)

    assert run(box, "apply", recipe).returncode == 0
    applied = run(box, "status", recipe, "--json")
    assert applied.returncode == 0 and step(applied, "pin-probe")["status"] == "applied", applied

    pip_by_hand(box, wheels, "1.0")
    drifted = run(box, "status", recipe, "--json")
    assert drifted.returncode == 3, drifted
    assert step(drifted, "pin-probe")["status"] == "drifted", drifted
    assert step(drifted, "pin-probe")["message"] == f"{DIST} is 1.0, not the 2.0 patchkit installed"


def test_rollback_puts_back_the_version_it_replaced(host: tuple[Sandbox, Path]) -> None:
    box, wheels = host
    pip_by_hand(box, wheels, "1.0")
    recipe = write_recipe(box, wheels, "2.0")
    assert run(box, "apply", recipe).returncode == 0
    assert installed(box) == ([f"{DIST}-2.0.dist-info"], 'VERSION = "2.0"\n')

    back = run(box, "rollback", recipe, "--json")
    assert back.returncode == 0, back
    assert step(back, "pin-probe")["status"] == "changed", back
    assert installed(box) == ([f"{DIST}-1.0.dist-info"], 'VERSION = "1.0"\n')
    status = run(box, "status", recipe, "--json")
    assert step(status, "pin-probe")["status"] == "pending", status


def test_rollback_uninstalls_what_was_not_installed_before(host: tuple[Sandbox, Path]) -> None:
    box, wheels = host
    recipe = write_recipe(box, wheels, "1.0")
    assert run(box, "apply", recipe).returncode == 0
    assert installed(box) == ([f"{DIST}-1.0.dist-info"], 'VERSION = "1.0"\n')

    back = run(box, "rollback", recipe, "--json")
    assert back.returncode == 0, back
    assert step(back, "pin-probe")["message"] == f"uninstalled {DIST}", back
    assert installed(box) == ([], None)


def test_rollback_refuses_a_version_someone_changed_since_unless_forced(host: tuple[Sandbox, Path]) -> None:
    box, wheels = host
    recipe = write_recipe(box, wheels, "2.0")
    assert run(box, "apply", recipe).returncode == 0
    pip_by_hand(box, wheels, "1.0")

    refused = run(box, "rollback", recipe, "--json")
    assert refused.returncode == 1, refused
    assert step(refused, "pin-probe")["message"].startswith(f"drifted: {DIST} is 1.0, not the 2.0 run "), refused
    assert installed(box) == ([f"{DIST}-1.0.dist-info"], 'VERSION = "1.0"\n')

    forced = run(box, "rollback", recipe, "--force", "--json")
    assert forced.returncode == 0, forced
    assert installed(box) == ([], None)


def test_a_version_that_does_not_exist_fails_in_one_line_and_leaves_the_host_as_it_was(
        host: tuple[Sandbox, Path]) -> None:
    box, wheels = host
    pip_by_hand(box, wheels, "1.0")
    recipe = write_recipe(box, wheels, "9.9")
    before = sorted(str(p.relative_to(site_packages(box))) for p in site_packages(box).rglob("*"))

    failed = run(box, "apply", recipe)
    assert failed.returncode == 1, failed
    assert "Traceback" not in failed.stdout + failed.stderr
    lines = [line for line in (failed.stdout + failed.stderr).splitlines() if "9.9" in line]
    assert lines and all(line.rstrip().endswith(f"pip install {DIST}==9.9 failed: ERROR: No matching distribution "
                                                f"found for {DIST}==9.9") for line in lines), failed
    assert sorted(str(p.relative_to(site_packages(box))) for p in site_packages(box).rglob("*")) == before
    assert installed(box) == ([f"{DIST}-1.0.dist-info"], 'VERSION = "1.0"\n')
    status = run(box, "status", recipe, "--json")  # journaled as failed: nothing of ours is installed
    assert step(status, "pin-probe")["status"] == "pending", status


def test_a_version_that_is_not_one_exact_version_is_a_recipe_error(host: tuple[Sandbox, Path]) -> None:
    box, wheels = host
    recipe = write_recipe(box, wheels, ">=2")
    result = run(box, "apply", recipe)
    assert result.returncode == 2, result
    assert result.stderr.strip().splitlines() == [
        f"patchkit: {recipe}:6:7: steps[0].pip.version: '>=2' is not a version like 4.57.1 (a pip step pins one exact version)"
    ], result
    assert installed(box) == ([], None)
    assert not box.state.exists()  # nothing contacted


def test_the_review_page_says_what_a_pip_step_installs(host: tuple[Sandbox, Path]) -> None:
    box, wheels = host
    recipe = write_recipe(box, wheels, "2.0")
    page = box.root / "plan.html"
    plan = run(box, "plan", recipe, "--html", str(page))
    assert plan.returncode == 0, plan
    assert (f"<dt>installs</dt><dd><pre>python -m pip install {DIST}==2.0 --find-links={wheels} --no-index"
            "</pre></dd>") in page.read_text()


