"""The deploy step end to end: the real `patchkit` executable, real files, real sshd.

Locally (a `local` host with its own state dir) and over the sshd fleet of tests/sshd.py:
content-addressed sync (a re-deploy sends nothing, a changed file is the only one sent),
status, rollback (all or nothing unless --force), EAGLE-3 drafter validation of the source
before anything is sent and of the destination after (undone when it fails), resume of an
interrupted transfer from its part file, and the size+mtime hash cache vs --verify-all.

Every test points PATCHKIT_CACHE_DIR (the control side's source hash cache) and the host's
state dir at its own temp dirs.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import tests.helpers as helpers

from fixtures.make_drafter import (
    INDEX_NAME,
    SHARD_NAMES,
    SINGLE_NAME,
    VARIANTS,
    make_drafter,
    safetensors_data_start,
    write_target_config,
)
from tests.sshd import (  # noqa: F401 - pytest fixtures
    require,
    HostEnv,
    Testbed,
    fleet,
    login_users,
    patchkit_executable,
    sshd_root,
    testbed,
)
from tests.ssh.test_ssh import SYSTEM_PYTHON

pytestmark = pytest.mark.timeout(120)

STEP = "deploy-drafter"
PART_SUFFIX = ".patchkit-part"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tree(root: Path) -> dict[str, tuple[str, int]]:
    """rel path -> (sha256, mode) of every file under root."""
    return {p.relative_to(root).as_posix(): (sha256(p), p.stat().st_mode & 0o7777)
            for p in sorted(root.rglob("*")) if p.is_file()}


def part_of(final: Path) -> Path:
    return final.with_name("." + final.name + PART_SUFFIX)


def write_random(path: Path, size: int, chunk: int = 1 << 20) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        for start in range(0, size, chunk):
            f.write(os.urandom(min(chunk, size - start)))
    return path


def deploy_recipe(path: Path, dest: Path, src: str = "./drafter", validate: bool = True,
                  target: dict[str, Any] | None = None, name: str = "drafter") -> Path:
    spec: dict[str, Any] = {"src": src, "dest": str(dest)}
    if validate:
        spec["validate"] = "eagle3-drafter"
    if target is not None:
        spec["target"] = target
    doc = {"name": name, "steps": [{"name": STEP, "deploy": spec}]}
    path.write_text(json.dumps(doc, indent=1))  # JSON is YAML
    return path


class Result(helpers.Result):
    def step(self, host: str = "local") -> dict[str, Any]:
        steps = {s["name"]: s for s in self.hosts()[host]["steps"]}
        assert STEP in steps, self
        return steps[STEP]


def _argv(args: tuple[str, ...]) -> list[str]:
    return [*patchkit_executable(), *args]


@dataclass
class Local:
    """A local host: its own state dir, a recipe folder holding ./drafter, a dest path."""

    root: Path
    env: dict[str, str]

    @property
    def src(self) -> Path:
        return self.root / "recipes" / "drafter"

    @property
    def dest(self) -> Path:
        return self.root / "host" / "models" / "drafter"

    @property
    def state(self) -> Path:
        return self.root / "host" / "state"

    @property
    def inventory(self) -> Path:
        path = self.root / "inventory.yaml"
        if not path.exists():
            path.write_text(json.dumps({"hosts": {"local": {"address": "local", "state_dir": str(self.state)}}}))
        return path

    def recipe(self, filename: str = "drafter.yaml", **kwargs: Any) -> Path:
        kwargs.setdefault("dest", self.dest)
        return deploy_recipe(self.root / "recipes" / filename, **kwargs)

    def run(self, command: str, recipe: Path, *args: str, timeout: float = 60) -> Result:
        full = (command, str(recipe), "--json", "-i", str(self.inventory), *args)
        proc = subprocess.run(_argv(full), capture_output=True, text=True, timeout=timeout, env=self.env,
                              check=False)
        return Result(list(full), proc.returncode, proc.stdout, proc.stderr)

    def start(self, command: str, recipe: Path, *args: str) -> tuple[subprocess.Popen[str], list[str]]:
        full = [command, str(recipe), "--json", "-i", str(self.inventory), *args]
        return subprocess.Popen(_argv(tuple(full)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=self.env), full


def finish(proc: subprocess.Popen[str], args: list[str], timeout: float = 60) -> Result:
    out, err = proc.communicate(timeout=timeout)
    return Result(args, proc.returncode, out, err)


@pytest.fixture
def local(tmp_path: Path) -> Local:
    (tmp_path / "recipes").mkdir()
    env = {**os.environ, "PATCHKIT_CACHE_DIR": str(tmp_path / "control-cache")}
    return Local(tmp_path, env)


def assert_deployed(src: Path, dest: Path) -> None:
    """Byte-identical, same modes, nothing else (no part files left behind)."""
    assert dest.is_dir()
    assert tree(dest) == tree(src)


# ====================================================================== local: sync and status


@pytest.mark.parametrize("variant", ["valid", "valid-sharded"])
def test_valid_drafter_deploys_then_nothing_to_send_then_one_file(local: Local, variant: str) -> None:
    make_drafter(local.src, variant)
    (local.src / "config.json").chmod(0o600)  # modes travel with the files
    names = {"config.json", SINGLE_NAME} if variant == "valid" else {"config.json", INDEX_NAME, *SHARD_NAMES}
    assert {p.name for p in local.src.iterdir()} == names
    total = sum(p.stat().st_size for p in local.src.iterdir())
    recipe = local.recipe()

    pending = local.run("status", recipe)
    assert pending.returncode == 3, pending
    assert pending.step()["status"] == "pending"
    assert not local.dest.exists()  # status writes nothing

    first = local.run("apply", recipe)
    assert first.returncode == 0, first
    step = first.step()
    assert step["status"] == "changed", first
    assert first.hosts()["local"]["exec_requests"] == 1
    details = step["details"]
    assert (details["files_total"], details["bytes_total"]) == (len(names), total)
    assert (details["files_to_send"], details["bytes_to_send"], details["bytes_sent"]) == (len(names), total, total)
    assert {f["rel"] for f in details["files"]} == names
    for f in details["files"]:
        assert f["path"] == str(local.dest / f["rel"])
        assert f["sha256_after"] == sha256(local.src / f["rel"])
        assert (f["sha256_before"], f["backup"], f["resumed_from"]) == (None, None, 0)
    assert_deployed(local.src, local.dest)
    assert (local.dest / "config.json").stat().st_mode & 0o777 == 0o600
    assert "eagle3-drafter valid at" in step["message"]

    status = local.run("status", recipe)
    assert status.returncode == 0, status
    assert status.step()["status"] == "applied", status
    assert status.step()["message"].startswith("deployed by patchkit"), status

    again = local.run("apply", recipe)
    assert again.returncode == 0, again
    step = again.step()
    assert step["status"] == "ok", again
    assert (step["details"]["files_to_send"], step["details"]["bytes_to_send"]) == (0, 0)
    assert step["details"].get("bytes_sent", 0) == 0
    assert again.hosts()["local"]["status"] == "ok"
    if variant != "valid":
        return  # the rest does not depend on the layout (and every run costs a patchkit start)

    # one file changes at the source: only that one travels
    config = json.loads((local.src / "config.json").read_text())
    config["note"] = "re-exported"
    (local.src / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    size = (local.src / "config.json").stat().st_size
    newer = local.run("status", recipe)  # a new version at the source is pending, not drift
    assert newer.returncode == 3, newer
    assert newer.step()["status"] == "pending", newer
    assert newer.step()["message"].startswith("the source changed since the last deploy: 1 of 2 files differ")
    third = local.run("apply", recipe)
    assert third.returncode == 0, third
    step = third.step()
    assert step["status"] == "changed", third
    assert (step["details"]["files_to_send"], step["details"]["bytes_sent"]) == (1, size)
    [sent] = step["details"]["files"]
    assert sent["rel"] == "config.json" and sent["backup"] and sent["sha256_before"] != sent["sha256_after"]
    assert_deployed(local.src, local.dest)

    # changed behind patchkit's back: drifted (exit 3), nothing written by status
    target = local.dest / SINGLE_NAME
    with open(target, "r+b") as f:
        f.seek(safetensors_data_start(target) + 4)
        f.write(b"\xff\xff")
    before = sha256(target)
    drifted = local.run("status", recipe)
    assert drifted.returncode == 3, drifted
    assert drifted.step()["status"] == "drifted", drifted
    assert drifted.step()["message"] == f"1 file(s) changed on the host since patchkit deployed them: {target}"
    assert drifted.step()["details"]["files_to_send"] == 1
    assert sha256(target) == before

    # apply puts it right again (and keeps the tampered copy as the backup)
    fix = local.run("apply", recipe)
    assert fix.returncode == 0 and fix.step()["status"] == "changed", fix
    assert fix.step()["details"]["bytes_sent"] == target.stat().st_size
    assert_deployed(local.src, local.dest)


def test_rollback_restores_overwritten_and_removes_created(local: Local) -> None:
    make_drafter(local.src, "valid", seed=0)
    v1 = {p.name: p.read_bytes() for p in local.src.iterdir()}
    recipe = local.recipe()
    first = local.run("apply", recipe)
    assert first.returncode == 0, first
    assert not local.run("status", recipe).returncode

    # v2: other weights (same size), an extra file; config.json rewritten with the same bytes
    make_drafter(local.src, "valid", seed=1)
    (local.src / "generation_config.json").write_text('{"max_new_tokens": 8}\n')
    assert (local.src / SINGLE_NAME).read_bytes() != v1[SINGLE_NAME]
    second = local.run("apply", recipe)
    assert second.returncode == 0, second
    files = {f["rel"]: f for f in second.step()["details"]["files"]}
    assert set(files) == {SINGLE_NAME, "generation_config.json"}  # config.json: same content, not sent
    assert files[SINGLE_NAME]["backup"] and files[SINGLE_NAME]["sha256_before"] == hashlib.sha256(
        v1[SINGLE_NAME]).hexdigest()
    assert files["generation_config.json"]["backup"] is None
    assert_deployed(local.src, local.dest)

    undo = local.run("rollback", recipe)
    assert undo.returncode == 0, undo
    assert undo.step()["status"] == "changed", undo
    assert {p.name: p.read_bytes() for p in local.dest.iterdir()} == v1  # v1 byte for byte, nothing extra
    assert (local.dest / SINGLE_NAME).stat().st_mode & 0o777 == 0o644

    # the source is v2 now, dest v1 as the (still live) first deploy left it: pending, not drifted
    status = local.run("status", recipe)
    assert status.step()["status"] == "pending", status
    assert status.step()["message"].startswith("the source changed since the last deploy"), status

    undo_v1 = local.run("rollback", recipe)
    assert undo_v1.returncode == 0, undo_v1
    assert undo_v1.step()["status"] == "changed", undo_v1
    assert not local.dest.exists()  # the files and the folders the first deploy created
    assert not local.dest.parent.exists()  # models/ was created by it too


def test_rollback_refuses_a_changed_file_and_touches_nothing_then_force(local: Local) -> None:
    make_drafter(local.src, "valid", seed=0)
    v1 = tree(local.src)
    recipe = local.recipe()
    assert local.run("apply", recipe).returncode == 0
    make_drafter(local.src, "valid", seed=1)
    (local.src / "tokenizer_config.json").write_text("{}\n")
    assert local.run("apply", recipe).returncode == 0

    # someone edits the deployed config by hand; the weights are still what v2 wrote
    edited = local.dest / "tokenizer_config.json"
    edited.write_text('{"edited": true}\n')
    before = tree(local.dest)
    refused = local.run("rollback", recipe)
    assert refused.returncode == 1, refused
    step = refused.step()
    assert step["status"] == "failed"
    assert str(edited) in step["message"] and "changed since" in step["message"], step["message"]
    assert "--force" in step["message"]
    assert tree(local.dest) == before  # all or nothing: the weights were NOT put back either

    forced = local.run("rollback", recipe, "--force")
    assert forced.returncode == 0, forced
    assert tree(local.dest) == v1  # the weights restored byte for byte, the edited file removed anyway


# ====================================================================== validation


SHARD2 = SHARD_NAMES[1]
EXPECTED = {
    "missing-d2t": ["model.safetensors: d2t is missing, expected I64 [256] ([draft_vocab_size])"],
    "d2t-wrong-dtype": ["model.safetensors: d2t has dtype F32, expected I64"],
    "fc-wrong-shape": ["model.safetensors: fc.weight has shape [64, 128], expected [64, 192] "
                       "([hidden_size, 3*target_hidden_size])"],
    "wrong-architecture": ["config.json: architectures is ['LlamaForCausalLM'], expected LlamaForCausalLMEagle3"],
    "missing-shard": [f"{SHARD2}: missing, but model.safetensors.index.json names it for 5 "
                      f"tensor(s): d2t, fc.weight, lm_head.weight, norm.weight, t2d"],
    "truncated": [],  # checked by prefix below
}


def test_every_broken_variant_is_covered() -> None:
    assert set(VARIANTS) == set(EXPECTED) | {"valid", "valid-sharded"}


def test_broken_variants_are_refused_and_nothing_is_written(local: Local) -> None:
    """All broken variants side by side (one patchkit each; start-up dominates)."""
    runs = {}
    for variant in sorted(EXPECTED):
        make_drafter(local.root / "recipes" / variant, variant)
        recipe = local.recipe(f"{variant}.yaml", src=f"./{variant}", dest=local.root / "host" / variant / "d",
                              name=f"drafter-{variant}")
        runs[variant] = local.start("apply", recipe)
    for variant, (proc, args) in runs.items():
        result = finish(proc, args)
        assert result.returncode == 1, result
        step = result.step()
        assert step["status"] == "failed", result
        src = local.root / "recipes" / variant
        head, *problems = step["message"].split("\n")
        assert head == f"source {src} is not a valid eagle3-drafter; nothing sent:", step["message"]
        if variant == "truncated":
            size = (src / SINGLE_NAME).stat().st_size
            assert len(problems) == 1, problems
            assert problems[0].startswith(f"model.safetensors: truncated: file is {size} bytes, but the data "
                                          f"of tensor "), problems
        else:
            assert problems == EXPECTED[variant], (variant, problems)
        assert not (local.root / "host" / variant).exists(), variant  # not even the parent folder
    backups = local.state / "backups"
    assert not backups.exists() or not any(p.is_file() for p in backups.rglob("*"))


def test_target_checks(local: Local) -> None:
    make_drafter(local.src, "valid")
    host_target = write_target_config(local.root / "host" / "target", hidden_size=128)

    # a target config on the host that does not fit: copied, validated there, undone
    on_host = local.recipe("on-host.yaml", target={"config": str(host_target)})
    result = local.run("apply", on_host)
    assert result.returncode == 1, result
    step = result.step()
    assert step["status"] == "failed"
    assert f"{local.dest} on the host is not a valid eagle3-drafter" in step["message"], step["message"]
    assert "config.json: target_hidden_size is 64, but the target's hidden_size is 128" in step["message"]
    assert "removed 2 file(s) the deploy had created" in step["message"], step["message"]  # not "put back"
    assert "put back 2" not in step["message"]
    assert step["details"]["files"] == []
    assert not local.dest.exists()
    assert not local.dest.parent.exists()  # models/ was created by the deploy, removed by its undo

    # the same target as values: known before anything is sent
    values = local.recipe("values.yaml", target={"hidden_size": 128, "vocab_size": 1024, "num_hidden_layers": 2})
    result = local.run("apply", values)
    assert result.returncode == 1, result
    message = result.step()["message"]
    assert "nothing sent" in message and "target_hidden_size is 64, but the target's hidden_size is 128" in message
    assert not local.dest.parent.exists()

    # aux layer ids beyond a 1-layer target
    shallow = local.recipe("shallow.yaml", target={"num_hidden_layers": 1})
    result = local.run("apply", shallow)
    assert result.returncode == 1, result
    assert "2 is beyond the target's 1 layers (valid ids are 0..1)" in result.step()["message"], result
    assert not local.dest.parent.exists()

    # a fitting target: deployed; then the target changes and a new drafter version fails
    # its post-copy check: the old version is put back byte for byte
    write_target_config(host_target.parent, hidden_size=64)
    assert local.run("apply", on_host).returncode == 0
    v1 = tree(local.dest)
    write_target_config(host_target.parent, hidden_size=128)
    make_drafter(local.src, "valid", seed=1)
    result = local.run("apply", on_host)
    assert result.returncode == 1, result
    assert "put back 1 file(s)" in result.step()["message"], result
    assert tree(local.dest) == v1


# ====================================================================== resume, single file, caches


def test_single_file_resumes_from_a_verified_part_file(local: Local) -> None:
    """A single-file src: the part file sits next to dest. A verified prefix is resumed,
    a prefix that does not match the source is started over."""
    blob = write_random(local.root / "recipes" / "blob.bin", 3 * (1 << 20) + 12345)
    data = blob.read_bytes()
    dest = local.root / "host" / "store" / "weights.bin"
    recipe = local.recipe("blob.yaml", src="./blob.bin", dest=dest, validate=False)
    dest.parent.mkdir(parents=True)
    part = part_of(dest)
    part.write_bytes(data[: 1 << 20])  # what an interrupted transfer left

    first = local.run("apply", recipe)
    assert first.returncode == 0, first
    [f] = first.step()["details"]["files"]
    assert (f["rel"], f["resumed_from"]) == ("weights.bin", 1 << 20), f
    assert first.step()["details"]["bytes_sent"] == len(data) - (1 << 20)
    assert "(1 resumed)" in first.step()["message"]
    assert dest.read_bytes() == data and not part.exists()
    assert local.run("apply", recipe).step()["status"] == "ok"

    # a part file that is not a prefix of the source: not trusted, sent whole
    blob.write_bytes(data[::-1])
    part.write_bytes(b"\0" * (1 << 20))
    second = local.run("apply", recipe)
    assert second.returncode == 0, second
    [f] = second.step()["details"]["files"]
    assert f["resumed_from"] == 0 and second.step()["details"]["bytes_sent"] == len(data)
    assert dest.read_bytes() == data[::-1] and not part.exists()


def test_verify_all_rehashes_what_the_size_mtime_cache_trusts(local: Local) -> None:
    make_drafter(local.src, "valid")
    recipe = local.recipe()
    assert local.run("apply", recipe).returncode == 0
    weights = local.dest / SINGLE_NAME
    st = weights.stat()
    with open(weights, "r+b") as f:  # bit rot: same size, mtime put back
        f.seek(st.st_size - 16)
        f.write(b"\x00" * 16)
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert weights.stat().st_mtime_ns == st.st_mtime_ns and weights.stat().st_size == st.st_size
    corrupt = sha256(weights)
    assert corrupt != sha256(local.src / SINGLE_NAME)

    # the trade-off: size and mtime match the host's hash cache, so the file counts as in place
    trusted = local.run("apply", recipe)
    assert trusted.returncode == 0, trusted
    assert trusted.step()["status"] == "ok" and trusted.step()["details"]["files_to_send"] == 0
    assert sha256(weights) == corrupt

    checked = local.run("apply", recipe, "--verify-all")
    assert checked.returncode == 0, checked
    step = checked.step()
    assert step["status"] == "changed", checked
    assert (step["details"]["files_to_send"], step["details"]["bytes_sent"]) == (1, st.st_size)
    assert step["details"]["files"][0]["sha256_before"] == corrupt
    assert_deployed(local.src, local.dest)


def test_files_go_out_back_to_back_and_their_answers_are_read_after(
        local: Local, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """No round trip per file: every receive_file request (with its bytes) is out before the
    first answer to one is read. Run in-process to see the protocol events."""
    from patchkit.cli import main as cli
    from patchkit.host.agent.client import AgentClient

    for name in ("a.bin", "b.bin", "c.bin"):
        write_random(local.src / name, 300_000)
    events: list[tuple[str, str]] = []
    real_send, real_reply = AgentClient._send, AgentClient._reply

    async def send(self: AgentClient, op: str, *args: Any, **kwargs: Any) -> Any:
        pending = await real_send(self, op, *args, **kwargs)
        events.append(("sent", op))
        return pending

    async def reply(self: AgentClient, request_id: int, op: str, timeout: float | None) -> Any:
        answer = await real_reply(self, request_id, op, timeout)
        events.append(("answered", op))
        return answer

    monkeypatch.setattr(AgentClient, "_send", send)
    monkeypatch.setattr(AgentClient, "_reply", reply)
    monkeypatch.setenv("PATCHKIT_CACHE_DIR", local.env["PATCHKIT_CACHE_DIR"])
    with pytest.raises(SystemExit) as exited:
        cli.main(["apply", str(local.recipe(validate=False)), "--json", "-i", str(local.inventory)])
    assert exited.value.code == 0, capsys.readouterr()
    assert_deployed(local.src, local.dest)
    files = [i for i, event in enumerate(events) if event[1] == "receive_file"]
    assert [events[i][0] for i in files] == ["sent"] * 3 + ["answered"] * 3, events


def test_a_file_that_cannot_land_fails_the_step_and_the_files_around_it_are_undone(local: Local) -> None:
    for name in ("a.bin", "b.bin", "c.bin"):
        write_random(local.src / name, 200_000)
    blocker = local.dest / "b.bin" / "keep"  # a folder where b.bin should go: its rename fails
    blocker.parent.mkdir(parents=True)
    blocker.write_text("not patchkit's\n")
    result = local.run("apply", local.recipe(validate=False))
    assert result.returncode == 1, result
    step = result.step()
    assert step["status"] == "failed", result
    assert "b.bin" in step["message"], step["message"]
    assert step["details"]["files"] == [], step
    # a.bin landed before it and c.bin after it (sent without waiting): both removed again
    assert sorted(p.relative_to(local.dest).as_posix() for p in local.dest.rglob("*")) == ["b.bin", "b.bin/keep"]
    assert blocker.read_text() == "not patchkit's\n"


# ====================================================================== over real sshd


def home_python(env: HostEnv) -> Path:
    """The host's interpreter with HOME set to a folder of the host's own: the fleet's hosts all
    live on this machine, so `dest: ~/models/drafter` is what tells their disks apart."""
    home = env.root / "home"
    home.mkdir(exist_ok=True)
    wrapper = env.root / "python-home"
    wrapper.write_text(f'#!/bin/sh\nHOME="{home}" exec "{env.python}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def test_fleet_deploy_one_exec_per_host_then_nothing_to_send(testbed: Testbed, tmp_path: Path) -> None:
    tb = testbed
    servers = tb.fleet.servers[:3]
    envs = {s.name: tb.add(s.name, s) for s in servers}
    tb.fleet.write_known_hosts(tb.known_hosts, servers)
    inventory = str(tb.inventory(**{name.replace("-", "_"): {"python": str(home_python(env))}
                                    for name, env in envs.items()}))
    src = make_drafter(tb.root / "drafter", "valid-sharded")
    recipe = str(deploy_recipe(tb.root / "deploy.yaml", dest="~/models/drafter"))
    env = tb.env(PATCHKIT_CACHE_DIR=str(tmp_path / "cache"))
    dests = {name: e.root / "home" / "models" / "drafter" for name, e in envs.items()}
    total = sum(p.stat().st_size for p in src.iterdir())

    pending = tb.run("status", recipe, "-i", inventory, "--json", env=env)
    assert pending.returncode == 3, pending
    assert {h["steps"][0]["status"] for h in pending.hosts().values()} == {"pending"}

    first = tb.run("apply", recipe, "-i", inventory, "--json", env=env)
    assert first.returncode == 0, first
    hosts = first.hosts()
    assert set(hosts) == set(envs)
    for name, dest in dests.items():
        step = hosts[name]["steps"][0]
        assert step["status"] == "changed", first
        assert hosts[name]["exec_requests"] == 1, first  # manifest, files, validation: one exec
        assert step["details"]["bytes_sent"] == total
        assert {f["path"] for f in step["details"]["files"]} == {str(dest / p.name) for p in src.iterdir()}
        assert_deployed(src, dest)
        assert len(envs[name].runs("drafter")) == 1

    again = tb.run("apply", recipe, "-i", inventory, "--json", env=env)
    assert again.returncode == 0, again
    for name, host in again.hosts().items():
        step = host["steps"][0]
        assert step["status"] == "ok", again
        assert (step["details"]["files_to_send"], step["details"].get("bytes_sent", 0)) == (0, 0)
        assert host["exec_requests"] == 1

    status = tb.run("status", recipe, "-i", inventory, "--json", env=env)
    assert status.returncode == 0, status
    assert {h["steps"][0]["status"] for h in status.hosts().values()} == {"applied"}

    undo = tb.run("rollback", recipe, "-i", inventory, "--json", env=env)
    assert undo.returncode == 0, undo
    for dest in dests.values():
        assert not dest.exists() and not dest.parent.exists()


def test_deploy_with_become_lands_root_owned_files_through_sudo(testbed: Testbed, login_users: dict[str, str],
                                                              tmp_path: Path) -> None:
    """A login user with the sudo right deploys into a folder only root may write: the bytes
    reach the agent through sudo (spliced from its stdin pipe on the host) and land as root's."""
    require(shutil.which("sudo") is not None, "sudo is missing: `make test` installs it (scripts/install-system-deps.sh)")
    tb = testbed
    server = tb.fleet.servers[4]
    env = tb.add("become-deploy", server, base_python=SYSTEM_PYTHON)
    tb.fleet.write_known_hosts(tb.known_hosts, [server])
    inventory = str(tb.inventory(become_deploy={"user": login_users["sudoer"], "become": True}))
    src = tmp_path / "weights"
    write_random(src / "model.safetensors", (3 << 20) + 17)
    (src / "config.json").write_text('{"architectures": ["LlamaForCausalLMEagle3"]}\n')
    dest = env.root / "models" / "weights"  # under the host's root-owned folder
    recipe = str(deploy_recipe(tmp_path / "deploy.yaml", dest=dest, src=str(src), validate=False))
    run_env = tb.env(PATCHKIT_CACHE_DIR=str(tmp_path / "cache"))

    first = tb.run("apply", recipe, "-i", inventory, "--json", env=run_env)
    assert first.returncode == 0, first
    host = first.hosts()["become-deploy"]
    assert host["steps"][0]["status"] == "changed" and host["exec_requests"] == 1, first
    assert_deployed(src, dest)
    assert {p.stat().st_uid for p in dest.iterdir()} == {0}

    undo = tb.run("rollback", recipe, "-i", inventory, "--json", env=run_env)
    assert undo.returncode == 0, undo
    assert not dest.exists()


class CuttingProxy:
    """A TCP relay 127.0.0.1:port -> 127.0.0.1:target that drops the connection (both ways)
    once `cut_after` bytes went from the client to the server: the network failing mid-file."""

    def __init__(self, target_port: int, cut_after: int) -> None:
        self.target_port = target_port
        self.cut_after = cut_after
        self.upstream_bytes = 0
        self.cut = threading.Event()
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen()
        self.port = self.listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target_port))
            self._sockets += [client, server]
            threading.Thread(target=self._pipe, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, upstream: bool) -> None:
        try:
            while not self.cut.is_set():
                data = src.recv(1 << 16)
                if not data:
                    break
                if upstream:
                    self.upstream_bytes += len(data)
                    if self.upstream_bytes >= self.cut_after:
                        self.cut.set()
                        break
                dst.sendall(data)
        except OSError:
            pass
        if self.cut.is_set():
            self.close()

    def close(self) -> None:
        for sock in [self.listener, *self._sockets]:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


def wait_until_stable(path: Path, quiet: float = 0.5, timeout: float = 15) -> int:
    """The part file's size once the host's agent has stopped writing to it."""
    deadline = time.monotonic() + timeout
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        size = path.stat().st_size if path.exists() else -1
        if size != last:
            last, since = size, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return size
        time.sleep(0.05)
    raise AssertionError(f"{path} still changing after {timeout}s")


def test_connection_dropped_mid_file_leaves_a_part_file_and_resumes(testbed: Testbed, tmp_path: Path) -> None:
    tb = testbed
    server = tb.fleet.servers[0]
    host = tb.add(server.name, server)
    src = tb.root / "artifact"
    (src / "config.json").parent.mkdir(parents=True)
    (src / "config.json").write_text('{"kind": "test artifact"}\n')
    size = 64 << 20
    big = write_random(src / "weights.bin", size)
    dest = host.root / "models" / "artifact"
    final = dest / "weights.bin"
    part = part_of(final)
    recipe = str(deploy_recipe(tb.root / "artifact.yaml", dest=dest, src="./artifact", validate=False))
    env = tb.env(PATCHKIT_CACHE_DIR=str(tmp_path / "cache"))

    proxy = CuttingProxy(server.port, cut_after=24 << 20)
    tb.known_hosts.write_text(server.known_hosts_line()
                              + f"[127.0.0.1]:{proxy.port} {server.host_public_key}\n")
    try:
        via_proxy = str(tb.inventory(**{server.name.replace("-", "_"): {"port": proxy.port}}))
        cut = tb.run("apply", recipe, "-i", via_proxy, "--json", env=env, timeout=60)
    finally:
        proxy.close()
    assert proxy.cut.is_set(), f"the transfer ended before the cut ({proxy.upstream_bytes} bytes)\n{cut}"
    assert cut.returncode == 1, cut
    assert cut.hosts()[server.name]["status"] == "failed", cut

    # never a partial file at the final name; the part file holds a verified prefix
    have = wait_until_stable(part)
    assert not final.exists()
    assert 0 < have < size, have
    with open(big, "rb") as f:
        assert sha256(part) == hashlib.sha256(f.read(have)).hexdigest()

    direct = str(tb.inventory())
    resumed = tb.run("apply", recipe, "-i", direct, "--json", env=env, timeout=60)
    assert resumed.returncode == 0, resumed
    step = resumed.hosts()[server.name]["steps"][0]
    assert step["status"] == "changed", resumed
    files = {f["rel"]: f for f in step["details"]["files"]}
    assert files["weights.bin"]["resumed_from"] == have, files
    assert step["details"]["bytes_sent"] == sum(
        (src / rel).stat().st_size - f["resumed_from"] for rel, f in files.items())
    assert resumed.hosts()[server.name]["exec_requests"] == 1
    assert sha256(final) == sha256(big)
    assert not part.exists()
    assert_deployed(src, dest)

    again = tb.run("apply", recipe, "-i", direct, "--json", env=env)
    assert again.returncode == 0 and again.hosts()[server.name]["steps"][0]["status"] == "ok", again

    # Two runs hold changes now: the cut one (what landed before the cut) and the rerun. One
    # rollback undoes the rerun and says the cut run is left; the next undoes that one too.
    undo = tb.run("rollback", recipe, "-i", direct, "--json", env=env)
    assert undo.returncode == 0, undo
    assert "roll back again" in undo.hosts()[server.name]["message"], undo
    assert not final.exists()
    undo_cut = tb.run("rollback", recipe, "-i", direct, "--json", env=env)
    assert undo_cut.returncode == 0, undo_cut
    assert "roll back again" not in undo_cut.hosts()[server.name]["message"], undo_cut
    assert not dest.exists() or not any(dest.rglob("*")), sorted(dest.rglob("*"))


def test_the_data_path_prefers_aes_gcm_unless_ssh_config_sets_ciphers(
        fleet, sshd_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """asyncssh's own default is chacha20-poly1305, twice the CPU of AES-GCM per deployed byte."""
    import asyncio

    from patchkit.host.transport.ssh import SSHTransport
    from patchkit.host.transport.ssh_common import SSHTarget

    server = fleet.servers[0]
    known = tmp_path / "known_hosts"
    fleet.write_known_hosts(known, [server])
    spec = SSHTarget(name=server.name, address="127.0.0.1", port=server.port, user="root",
                     identity_file=str(fleet.client_key), known_hosts=str(known))
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)

    async def negotiated() -> tuple[str, str]:
        transport = SSHTransport(spec)
        try:
            streams = await transport.spawn(["true"])
            await streams.close()
            assert transport._conn is not None
            return transport._conn.get_extra_info("send_cipher"), transport._conn.get_extra_info("recv_cipher")
        finally:
            await transport.close()

    assert asyncio.run(negotiated()) == ("aes128-gcm@openssh.com", "aes128-gcm@openssh.com")
    (home / ".ssh" / "config").write_text("Host *\n  Ciphers chacha20-poly1305@openssh.com,aes256-ctr\n")
    assert asyncio.run(negotiated()) == ("chacha20-poly1305@openssh.com", "chacha20-poly1305@openssh.com")
    (home / ".ssh" / "config").write_text("Host 127.0.0.1\n  Ciphers aes256-ctr\n")
    assert asyncio.run(negotiated()) == ("aes256-ctr", "aes256-ctr")
