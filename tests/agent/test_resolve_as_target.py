"""`verified` and `applied` are about the file the target loads, not a same-named copy elsewhere.

The agent starts as `python -c`, which puts its working folder first on sys.path: a `toyllm/`
there (a source checkout in the user's cwd; over SSH, the login's HOME: tests/ssh) must neither
be patched nor shadow what the target imports. After a write, the import check holds what it
imported to what patchkit wrote; `status` holds the journal to what the target resolves now.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.helpers import PKGS, TOY_SPECULATIVE, Sandbox, make_sandbox, recipe, run_patchkit, sha256, step
from tests.helpers import sandbox_fixture  # noqa: F401  (pytest fixture)

EAGLE3 = "eagle3-whitelist"


def shadow_checkout(folder: Path) -> Path:
    """A same-named copy of toyllm in `folder` (as a vLLM source checkout sits in a user's cwd)."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copytree(PKGS / "toyllm" / "toyllm", folder / "toyllm")
    return folder / "toyllm"


def test_a_copy_in_the_cwd_is_neither_patched_nor_imported(sandbox: Sandbox, tmp_path: Path) -> None:
    cwd = tmp_path / "checkout"
    shadow = shadow_checkout(cwd)
    shadow_bytes = (shadow / "config" / "speculative.py").read_bytes()
    argv = sandbox.argv("apply", recipe("toyllm_eagle3.yaml"), "--json", "--steps", EAGLE3)

    result = run_patchkit(*argv, cwd=cwd)
    assert result.returncode == 0, result
    done = step(result, EAGLE3)
    assert done["status"] == "changed" and done["file"] == str(sandbox.file(TOY_SPECULATIVE)), done
    assert '"kimi_k2"' in sandbox.file(TOY_SPECULATIVE).read_text()
    assert (shadow / "config" / "speculative.py").read_bytes() == shadow_bytes  # the checkout untouched

    status = run_patchkit(*sandbox.argv("status", recipe("toyllm_eagle3.yaml"), "--json", "--steps", EAGLE3),
                          cwd=cwd)
    assert status.returncode == 0 and step(status, EAGLE3)["status"] == "applied", status
    again = run_patchkit(*argv, cwd=cwd)
    assert again.returncode == 0 and step(again, EAGLE3)["status"] == "ok", again


def test_checks_run_without_a_working_folder_on_their_path(sandbox: Sandbox, tmp_path: Path) -> None:
    """The agent, a check step, the import check and a verify program all see the path a server sees."""
    path0 = "import sys\nassert sys.path[0] != '', sys.path\nprint('clean path')\n"
    recipe_file = tmp_path / "clean.yaml"
    recipe_file.write_text(
        "name: clean\nsteps:\n"
        "  - name: look\n    check:\n      python: |\n" + "".join(f"        {line}\n" for line in path0.splitlines())
        + "  - name: patch\n    patch:\n      package: toyllm\n      modules: [toyllm.config.model]\n"
        "      edit: {list_insert: {names: [_FLOAT16_DTYPES], values: [float32]}}\n"
        "    verify:\n      import: [toyllm.config]\n      python: |\n"
        + "".join(f"        {line}\n" for line in path0.splitlines()))
    result = sandbox.run("apply", str(recipe_file), json_out=True)
    assert result.returncode == 0, result
    assert step(result, "look")["status"] == "ok" and step(result, "patch")["status"] == "changed", result
    assert [c["name"] for c in step(result, "patch")["checks"]] == ["read-back", "syntax", "import", "python"]


def test_a_module_the_target_imports_from_elsewhere_fails_and_is_restored(sandbox: Sandbox, tmp_path: Path) -> None:
    """toyllm.config puts another folder first on its __path__ at import time: the agent cannot see
    that without importing; the import check does, and the write is undone."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(sandbox.file(TOY_SPECULATIVE), elsewhere / "speculative.py")
    init = sandbox.file("toyllm/config/__init__.py")
    init.write_text(f"__path__.insert(0, {str(elsewhere)!r})\n" + init.read_text())
    before = sha256(sandbox.file(TOY_SPECULATIVE))

    result = sandbox.run("apply", recipe("toyllm_eagle3.yaml"), "--steps", EAGLE3, json_out=True)
    assert result.returncode == 1, result
    failed = step(result, EAGLE3)
    assert failed["status"] == "failed", failed
    assert (f"the target imports toyllm.config.speculative from {elsewhere / 'speculative.py'}; "
            f"patchkit wrote {sandbox.file(TOY_SPECULATIVE)}") in failed["message"], failed
    assert "original restored" in failed["message"]
    assert sha256(sandbox.file(TOY_SPECULATIVE)) == before


def test_status_is_not_applied_once_the_target_loads_another_file(sandbox: Sandbox) -> None:
    """A package folder beside the patched module wins at import: the journaled file is no longer it."""
    applied = sandbox.run("apply", recipe("toyllm_eagle3.yaml"), "--steps", EAGLE3, json_out=True)
    assert applied.returncode == 0, applied
    package = sandbox.file("toyllm/config/speculative")
    package.mkdir()
    shutil.copy(PKGS / "toyllm" / TOY_SPECULATIVE, package / "__init__.py")

    status = sandbox.run("status", recipe("toyllm_eagle3.yaml"), "--steps", EAGLE3, json_out=True)
    seen = step(status, EAGLE3)
    assert status.returncode == 3 and seen["status"] == "drifted", status
    assert str(sandbox.file(TOY_SPECULATIVE)) in seen["message"] and str(package / "__init__.py") in seen["message"]


def test_a_compiled_module_beside_the_source_is_refused(tmp_path: Path) -> None:
    """An extension module wins over x.py at import: patching x.py would change nothing that runs."""
    box = make_sandbox(tmp_path / "host")
    compiled = box.file("toyllm/config/speculative.abi3.so")
    compiled.write_bytes(b"\x7fELF not really")
    result = box.run("apply", recipe("toyllm_eagle3.yaml"), "--steps", EAGLE3, json_out=True)
    assert result.returncode == 1, result
    message = step(result, EAGLE3)["message"]
    assert f"the target imports it from {compiled}" in message, message
    assert '"kimi_k2"' not in box.file(TOY_SPECULATIVE).read_text()


def test_the_package_itself_resolving_elsewhere_fails_the_import_check(sandbox: Sandbox, tmp_path: Path) -> None:
    """The import check imports a plugin that puts another toyllm first on the path (as plugin
    loaders do): the target's `toyllm` is then not the folder patchkit patched, though no module
    the check imported is a file patchkit wrote."""
    other = tmp_path / "plugins"
    shadow_checkout(other)
    (sandbox.pkgs / "toy_plugin.py").write_text(f"import sys\nsys.path.insert(0, {str(other)!r})\n")
    recipe_file = tmp_path / "plugin.yaml"
    recipe_file.write_text(Path(recipe("toyllm_eagle3.yaml")).read_text().replace(
        "      import: [toyllm.config.speculative]", "      import: [toy_plugin]"))
    before = sha256(sandbox.file(TOY_SPECULATIVE))

    result = sandbox.run("apply", str(recipe_file), "--steps", EAGLE3, json_out=True)
    assert result.returncode == 1, result
    message = step(result, EAGLE3)["message"]
    assert (f"the target imports toyllm from {other / 'toyllm'}; patchkit patched the copy at "
            f"{sandbox.pkgs / 'toyllm'}") in message, message
    assert sha256(sandbox.file(TOY_SPECULATIVE)) == before
