"""Containers and pods: podman://, docker:// and k8s:// hosts, `patchkit bake`, pod selectors.

Real containers (marker `containers`): images built by fixtures/containers.py (debootstrap +
podman import; `make test-inputs` builds them, and the session fixture here builds what is
missing), run with this machine's podman flags and `--network none`. Every behaviour is
checked over podman AND over the `docker` CLI talking to `podman system service` (started
and stopped here, on a socket in a temporary folder, DOCKER_HOST set for patchkit only).

Pods: no Kubernetes API server can run here. kubectl's argument building, selector
resolution (from hand-written `kubectl get pods -o json` documents) and its error texts are
tested as pure functions; the agent path runs through tests/fake_kubectl.py, a FAKE kubectl
that forwards `exec -i` to podman.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from fixtures import containers as images
from patchkit.base.errors import HostError
from patchkit.fleet.inventory import (
    Defaults,
    HostSpec,
    Inventory,
    PodSelector,
)
from patchkit.host.transport.container_errors import classify
from patchkit.host.transport.docker import DockerScheme
from patchkit.host.transport.k8s import K8sOptions, KubectlScheme, parse_pod_address
from patchkit.host.transport.kubectl import (
    get_pods_argv,
    pod_host,
    pods_from_json,
    resolve_selector,
)
from patchkit.host.transport.podman import PodmanScheme
from tests.helpers import PATCHKIT, RECIPES, Result

REPO = Path(__file__).resolve().parents[2]
FAKE_KUBECTL = REPO / "tests" / "fake_kubectl.py"
SPECULATIVE = f"{images.SITE_PACKAGES}/toyllm/config/speculative.py"
MODEL = f"{images.SITE_PACKAGES}/toyllm/config/model.py"
TOY_RECIPE = str(RECIPES / "toyllm_eagle3.yaml")
DOCKER = shutil.which("docker") or "/usr/local/bin/docker"

containers = pytest.mark.containers


# ---------------------------------------------------------------------- engines and containers


@pytest.fixture(scope="session")
def podman_service(built_images: None) -> Iterator[str]:
    """`podman system service` on a fresh socket, for the docker CLI; stopped at the end."""
    if shutil.which("docker") is None:
        pytest.fail("the docker CLI is not installed (machines of our kind have it in /usr/local/bin; Debian's "
                    "docker.io brings it with a daemon this tier does not need)", pytrace=False)
    folder = Path(tempfile.mkdtemp(prefix="patchkit-podman-sock-"))
    sock = folder / "podman.sock"
    proc = subprocess.Popen([images.podman_binary(), *images.ENGINE_ARGS, "system", "service", "--time=0",
                             f"unix://{sock}"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while not sock.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"podman system service did not start: {proc.stderr.read().decode() if proc.stderr else ''}",
                            pytrace=False)
            time.sleep(0.1)
        yield f"unix://{sock}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(folder, ignore_errors=True)


@dataclass
class Engine:
    """podman, or the docker CLI against podman's service: how tests and inventories call it."""

    kind: str
    docker_host: str | None = None
    started: list[str] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.docker_host:
            env["DOCKER_HOST"] = self.docker_host
        return env

    def argv(self, *args: str) -> list[str]:
        if self.kind == "docker":
            return [DOCKER, *args]
        return [images.podman_binary(), *images.ENGINE_ARGS, *args]

    def run(self, *args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(self.argv(*args), check=False, capture_output=True, text=True, env=self.env, input=input,
                              timeout=120)
        if check and done.returncode != 0:
            raise AssertionError(f"{self.argv(*args)} failed: {done.stderr}")
        return done

    def start(self, image: str = images.TOY_IMAGE) -> str:
        name = f"pk-test-{uuid.uuid4().hex[:10]}"
        self.started.append(name)
        self.run("run", "-d", "--name", name, *images.RUN_ARGS, image, "sleep", "infinity")
        return name

    def read(self, container: str, path: str) -> bytes:
        done = subprocess.run(self.argv("exec", container, "cat", path), check=False, capture_output=True, env=self.env,
                              timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def host_entry(self, container: str, **extra: Any) -> dict[str, Any]:
        entry: dict[str, Any] = {"address": f"{self.kind}://{container}"}
        if self.kind == "podman":
            entry["engine_args"] = list(images.ENGINE_ARGS)
        else:
            entry["engine"] = DOCKER
        entry.update(extra)
        return entry

    def server_version(self) -> str:
        return self.run("version", "--format", "{{.Server.Version}}").stdout.strip()

    def bake_args(self) -> list[str]:
        run_args = [f"--run-arg={a}" for a in images.ULIMIT_ARGS]  # bake adds --network none itself
        if self.kind == "podman":
            return [f"--engine-arg={a}" for a in images.ENGINE_ARGS] + run_args
        return ["--engine", DOCKER, *run_args]

    def remove(self, name: str, check: bool = True) -> None:
        """At once: `sleep` as PID 1 ignores SIGTERM, and podman's rm -f would wait 10 s for it."""
        self.run("rm", "-f", *(["-t", "0"] if self.kind == "podman" else []), name, check=check)

    def cleanup(self) -> None:
        for name in self.started:
            self.remove(name, check=False)


@pytest.fixture(params=["podman", "docker"])
def engine(request: pytest.FixtureRequest, built_images: None) -> Iterator[Engine]:
    if request.param == "docker":
        found = Engine("docker", request.getfixturevalue("podman_service"))
    else:
        found = Engine("podman")
    try:
        yield found
    finally:
        found.cleanup()


def inventory(tmp_path: Path, hosts: dict[str, dict[str, Any]], name: str = "inventory.yaml") -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"hosts": hosts}))  # JSON is YAML
    return str(path)


def patchkit(engine: Engine | None, *args: str, timeout: float = 120, env: dict[str, str] | None = None) -> Result:
    run_env = env or (engine.env if engine else dict(os.environ))
    proc = subprocess.run([PATCHKIT, *args], check=False, capture_output=True, text=True, timeout=timeout, env=run_env)
    result = Result(list(args), proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, str(result)
    return result


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def steps(result: Result, host: str) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in result.hosts()[host]["steps"]}


# ---------------------------------------------------------------------- apply, status, rollback


@containers
def test_apply_reapply_status_rollback_in_a_container(engine: Engine, tmp_path: Path) -> None:
    name = engine.start()
    before = {p: engine.read(name, p) for p in (SPECULATIVE, MODEL)}
    inv = inventory(tmp_path, {"c1": engine.host_entry(name)})

    plan = patchkit(engine, "plan", TOY_RECIPE, "-i", inv, "--json")
    assert plan.returncode == 0, plan
    assert '+                "kimi_k2",' in steps(plan, "c1")["eagle3-whitelist"]["diff"]
    assert {p: engine.read(name, p) for p in before} == before  # a plan writes nothing

    applied = patchkit(engine, "apply", TOY_RECIPE, "-i", inv, "--json")
    assert applied.returncode == 0, applied
    host = applied.hosts()["c1"]
    assert host["status"] == "changed"
    assert [s["status"] for s in host["steps"]] == ["ok", "changed", "changed"]
    assert host["exec_requests"] == 1  # one exec per container per run
    assert len(host["notices"]) == 1 and "lost when the container is recreated" in host["notices"][0]
    after = engine.read(name, SPECULATIVE)
    assert b'"kimi_k2"' in after and b'"deepseek_v3"' in after
    assert steps(applied, "c1")["eagle3-whitelist"]["sha256_after"] == sha(after)

    again = patchkit(engine, "apply", TOY_RECIPE, "-i", inv, "--json")
    assert again.returncode == 0, again
    assert again.hosts()["c1"]["status"] == "ok"
    assert again.hosts()["c1"]["notices"] == []  # nothing changed: nothing to lose
    assert engine.read(name, SPECULATIVE) == after

    status = patchkit(engine, "status", TOY_RECIPE, "-i", inv, "--json")
    assert status.returncode == 0, status
    assert steps(status, "c1")["eagle3-whitelist"]["status"] == "applied"
    assert steps(status, "c1")["fp32-dtype"]["status"] == "applied"

    rolled = patchkit(engine, "rollback", TOY_RECIPE, "-i", inv, "--json")
    assert rolled.returncode == 0, rolled
    assert {p: engine.read(name, p) for p in before} == before  # byte for byte

    history = patchkit(engine, "history", "-i", inv, "--json")
    assert [r["command"] for r in history.hosts()["c1"]["runs"]].count("apply") == 2


@containers
def test_the_report_says_once_that_container_changes_are_lost_and_they_are(engine: Engine, tmp_path: Path) -> None:
    name = engine.start()
    inv = inventory(tmp_path, {"c1": engine.host_entry(name)})
    out = patchkit(engine, "apply", TOY_RECIPE, "-i", inv)
    assert out.returncode == 0, out
    assert out.stdout.count("lost when the container is recreated") == 1, out
    # ... and it is: the same name, recreated from the same image, is pending again
    engine.remove(name)
    engine.run("run", "-d", "--name", name, *images.RUN_ARGS, images.TOY_IMAGE, "sleep", "infinity")
    status = patchkit(engine, "status", TOY_RECIPE, "-i", inv, "--json")
    assert status.returncode == 3, status
    assert steps(status, "c1")["eagle3-whitelist"]["status"] == "pending"


@containers
def test_deploy_into_a_container(engine: Engine, tmp_path: Path) -> None:
    name = engine.start()
    src = tmp_path / "payload"
    (src / "sub").mkdir(parents=True)
    (src / "weights.bin").write_bytes(os.urandom(3 << 20) + b"\n~.\n")  # binary, with an ssh escape in it
    (src / "sub" / "config.json").write_text('{"a": 1}\n')
    recipe = tmp_path / "deploy.yaml"
    recipe.write_text(json.dumps({"name": "ship", "steps": [
        {"name": "ship", "deploy": {"src": str(src), "dest": "/models/payload"}}]}))
    inv = inventory(tmp_path, {"c1": engine.host_entry(name)})

    first = patchkit(engine, "apply", str(recipe), "-i", inv, "--json")
    assert first.returncode == 0, first
    assert first.hosts()["c1"]["status"] == "changed"
    for rel in ("weights.bin", "sub/config.json"):
        assert engine.read(name, f"/models/payload/{rel}") == (src / rel).read_bytes()
    second = patchkit(engine, "apply", str(recipe), "-i", inv, "--json")
    assert second.hosts()["c1"]["status"] == "ok", second
    rolled = patchkit(engine, "rollback", str(recipe), "-i", inv, "--json")
    assert rolled.returncode == 0, rolled
    gone = engine.run("exec", name, "test", "-e", "/models/payload/weights.bin", check=False)
    assert gone.returncode == 1  # what the deploy created is removed


@containers
def test_launch_a_server_inside_a_container_with_its_health_gate(engine: Engine, tmp_path: Path) -> None:
    name = engine.start()
    port = 8731  # the container's own loopback (--network none): no clash with the host's ports
    recipe = tmp_path / "web.yaml"
    recipe.write_text(json.dumps({"name": "web", "steps": [{"name": "web", "launch": {
        "command": ["python3", "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        "cwd": "/tmp",
        "health": {"url": f"http://127.0.0.1:{port}/", "timeout_s": 20, "interval_s": 0.2},
        "ready": {"completion": None}}}]}))
    inv = inventory(tmp_path, {"c1": engine.host_entry(name)})

    up = patchkit(engine, "apply", str(recipe), "-i", inv, "--json")
    assert up.returncode == 0, up
    assert up.hosts()["c1"]["status"] == "changed"
    probe = engine.run("exec", name, "python3", "-c",
                       f"import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:{port}/').status)")
    assert probe.stdout.strip() == "200"  # it outlived the exec that started it
    assert patchkit(engine, "apply", str(recipe), "-i", inv, "--json").hosts()["c1"]["status"] == "ok"
    status = patchkit(engine, "status", str(recipe), "-i", inv, "--json")
    assert steps(status, "c1")["web"]["status"] == "applied", status
    down = patchkit(engine, "rollback", str(recipe), "-i", inv, "--json")
    assert down.returncode == 0, down
    after = engine.run("exec", name, "python3", "-c",
                       f"import urllib.request;urllib.request.urlopen('http://127.0.0.1:{port}/', timeout=2)",
                       check=False)
    assert after.returncode != 0  # stopped
    status = patchkit(engine, "status", str(recipe), "-i", inv, "--json")
    assert steps(status, "c1")["web"]["status"] == "pending", status


@containers
def test_a_container_stopped_mid_run_fails_its_host_and_a_rerun_converges(engine: Engine, tmp_path: Path) -> None:
    name = engine.start()
    recipe = tmp_path / "slow.yaml"
    recipe.write_text(json.dumps({"name": "slow", "vars": {"nap": 0}, "steps": [
        {"name": "fp32-dtype", "patch": {"package": "toyllm", "modules": ["toyllm.config.model"],
                                         "edit": {"list_insert": {"names": ["_FLOAT16_DTYPES"], "values": ["float32"]}}},
         "verify": {"import": ["toyllm.config"]}},
        {"name": "nap", "check": {"python": "import time\nopen('/tmp/napping', 'w').close()\ntime.sleep({{ nap }})\n"}},
        {"name": "eagle3-whitelist", "patch": {"package": "toyllm", "modules": ["toyllm.config.speculative"],
                                               "edit": {"list_insert": {"names": ["eagle3_target_supported"],
                                                                        "within": "SpeculativeConfig._verify_args",
                                                                        "values": ["kimi_k2"]}}}},
    ]}))
    other = engine.start()
    inv = inventory(tmp_path, {"c1": engine.host_entry(name), "c2": engine.host_entry(other)})
    proc = subprocess.Popen([PATCHKIT, "apply", str(recipe), "-i", inv, "--json", "-e", "nap=60", "-l", "c1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=engine.env)
    deadline = time.monotonic() + 60
    while engine.run("exec", name, "test", "-e", "/tmp/napping", check=False).returncode != 0:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)  # until the first patch is in, verified and recorded, and the run naps
    assert b"float32" in engine.read(name, MODEL)
    engine.run("kill", name)
    out, err = proc.communicate(timeout=60)
    cut = Result([], proc.returncode, out, err)
    assert cut.returncode == 1, cut
    host = cut.hosts()["c1"]
    assert host["status"] == "failed", cut
    assert host["message"].startswith("c1: "), cut
    # how the exec ended, whichever pipe noticed first (a write: connection lost; a read: agent exited)
    assert "exec exited with 137 (the container was stopped or removed?)" in host["message"], cut

    engine.run("start", name)
    rerun = patchkit(engine, "apply", str(recipe), "-i", inv, "--json")
    assert rerun.returncode == 0, rerun
    assert [s["status"] for s in rerun.hosts()["c1"]["steps"]] == ["ok", "ok", "changed"]
    assert rerun.hosts()["c2"]["status"] == "changed"  # the other container, never stopped
    status = patchkit(engine, "status", str(recipe), "-i", inv, "--json")
    assert status.returncode == 0, status


# ---------------------------------------------------------------------- clear errors


@containers
def test_engine_errors_are_one_line_each_and_other_hosts_go_on(engine: Engine, tmp_path: Path) -> None:
    good = engine.start()
    stopped = engine.start()
    engine.run("stop", "-t", "0", stopped)
    nopy = engine.start(images.NOPY_IMAGE)
    inv = inventory(tmp_path, {
        "good": engine.host_entry(good),
        "missing": engine.host_entry("pk-test-no-such-container"),
        "stopped": engine.host_entry(stopped),
        "nopython": engine.host_entry(nopy),
        "badpython": engine.host_entry(good, python="/opt/no/python3"),
        "noengine": engine.host_entry(good, engine="/opt/no/engine"),
        "nouser": engine.host_entry(good, user="nobody9"),
    })
    out = patchkit(engine, "apply", TOY_RECIPE, "-i", inv, "--json")
    assert out.returncode == 1, out
    hosts = out.hosts()
    assert hosts["good"]["status"] == "changed"
    expect = {
        "missing": "missing: container pk-test-no-such-container not found (",
        "stopped": f"stopped: container {stopped} is not running (",
        "nopython": f"nopython: no interpreter python3 in container {nopy} (",
        "badpython": f"badpython: no interpreter /opt/no/python3 in container {good} (",
        "noengine": "noengine: the container engine `/opt/no/engine` is not on this machine",
        # podman names the user; podman's Docker API only answers `unable to upgrade to tcp, received 500`
        "nouser": f"nouser: container {good} has no user nobody9" if engine.kind == "podman" else
                  "cannot start python3 on nouser: nouser: agent exited during hello: docker exec exited with 1: ",
    }
    for name, start in expect.items():
        message = hosts[name]["message"]
        assert hosts[name]["status"] == "failed"
        assert message.startswith(start), (name, message)
        assert "\n" not in message and "Traceback" not in message


@containers
def test_docker_without_its_service_is_one_line(built_images: None, tmp_path: Path) -> None:
    inv = inventory(tmp_path, {"d1": {"address": "docker://web", "engine": DOCKER}})
    sock = tmp_path / "nobody-listens.sock"
    out = patchkit(None, "apply", TOY_RECIPE, "-i", inv, "--json",
                   env=dict(os.environ, DOCKER_HOST=f"unix://{sock}"))
    assert out.returncode == 1, out
    assert out.hosts()["d1"]["message"] == (
        f"d1: docker cannot reach its service: Cannot connect to the Docker daemon at unix://{sock}. "
        "Is the docker daemon running?"), out


# ---------------------------------------------------------------------- bake


@containers
def test_bake_then_status_in_containers_of_the_baked_and_the_original_image(engine: Engine, tmp_path: Path) -> None:
    tag = f"localhost/pk-test-baked-{uuid.uuid4().hex[:8]}"
    try:
        baked = patchkit(engine, "bake", TOY_RECIPE, "--from", images.TOY_IMAGE, "-t", tag, "--json",
                         *engine.bake_args())
        if engine.kind == "docker" and engine.server_version().startswith("4."):
            # podman 4.x's Docker API refuses the docker CLI's body-less /commit (podman #26261): the
            # bake does all its work, then says so in one line and leaves nothing behind.
            assert baked.returncode == 1, baked
            assert baked.hosts()["bake"]["status"] == "changed"
            assert baked.stderr.strip().splitlines()[-1].startswith("patchkit: bake: `docker commit` failed: "), baked
            assert "podman issue #26261" in baked.stderr and "No image written" in baked.stderr
            assert engine.run("image", "inspect", tag, check=False).returncode != 0
            assert "patchkit-bake-" not in engine.run("ps", "-a", "--format", "{{.Names}}").stdout
            return
        assert baked.returncode == 0, baked
        assert baked.hosts()["bake"]["status"] == "changed"
        assert "the plan:" in baked.stderr and f"wrote {tag}" in baked.stderr
        assert engine.run("image", "inspect", tag, check=False).returncode == 0
        leftovers = engine.run("ps", "-a", "--format", "{{.Names}}").stdout
        assert "patchkit-bake-" not in leftovers  # the container is gone
        config = "{{json .Config.Entrypoint}} {{json .Config.Cmd}}"
        assert (engine.run("image", "inspect", "--format", config, tag).stdout
                == engine.run("image", "inspect", "--format", config, images.TOY_IMAGE).stdout)

        from_baked, from_original = engine.start(tag), engine.start()
        inv = inventory(tmp_path, {"baked": engine.host_entry(from_baked),
                                   "original": engine.host_entry(from_original)})
        status = patchkit(engine, "status", TOY_RECIPE, "-i", inv, "--json")
        assert status.returncode == 3, status  # the original is pending
        assert steps(status, "baked")["eagle3-whitelist"]["status"] == "applied"
        assert steps(status, "original")["eagle3-whitelist"]["status"] == "pending"
        assert b'"kimi_k2"' in engine.read(from_baked, SPECULATIVE)

        rolled = patchkit(engine, "rollback", TOY_RECIPE, "-i", inv, "-l", "baked", "--json")
        assert rolled.returncode == 0, rolled  # the journal came with the image
        assert engine.read(from_baked, SPECULATIVE) == engine.read(from_original, SPECULATIVE)
    finally:
        engine.cleanup()  # its containers first: rmi -f would stop them with a 10 s grace
        engine.started.clear()
        engine.run("rmi", "-f", tag, check=False)


@containers
def test_a_baked_image_starts_as_its_source_did(built_images: None, tmp_path: Path) -> None:
    """The bake container only sleeps (--entrypoint sleep); TAG gets IMAGE's ENTRYPOINT and CMD back."""
    podman = Engine("podman")
    source = f"localhost/pk-test-entry-{uuid.uuid4().hex[:8]}"
    tag = f"{source}-baked"
    (tmp_path / "Containerfile").write_text(
        f"FROM {images.TOY_IMAGE}\nENTRYPOINT [\"python3\", \"-c\"]\n"
        "CMD [\"import toyllm.config.model as m; print('dtypes', m._FLOAT16_DTYPES)\"]\n")
    try:
        podman.run("build", "--layers=false", "--network", "none", "-t", source, "-f", str(tmp_path / "Containerfile"),
                   str(tmp_path))
        baked = patchkit(None, "bake", TOY_RECIPE, "--from", source, "-t", tag, "--steps", "fp32-dtype",
                         *podman.bake_args())
        assert baked.returncode == 0, baked
        ran = podman.run("run", "--rm", *images.RUN_ARGS, tag).stdout
        assert ran.strip() == "dtypes ('float16', 'bfloat16', 'float32')"  # its own CMD, patched
        assert podman.run("run", "--rm", *images.RUN_ARGS, source).stdout.strip() == "dtypes ('float16', 'bfloat16')"
    finally:
        podman.run("rmi", "-f", tag, source, check=False)


@containers
def test_bake_with_a_failed_verification_writes_no_image(engine: Engine, tmp_path: Path) -> None:
    recipe = tmp_path / "bad.yaml"
    recipe.write_text(json.dumps({"name": "bad", "steps": [
        {"name": "fp32-dtype", "patch": {"package": "toyllm", "modules": ["toyllm.config.model"],
                                         "edit": {"list_insert": {"names": ["_FLOAT16_DTYPES"], "values": ["float32"]}}},
         "verify": {"import": ["toyllm.no_such_module"]}}]}))
    tag = f"localhost/pk-test-never-{uuid.uuid4().hex[:8]}"
    out = patchkit(engine, "bake", str(recipe), "--from", images.TOY_IMAGE, "-t", tag, *engine.bake_args())
    assert out.returncode == 1, out
    assert "no image written" in out.stderr, out
    assert "failed" in out.stdout
    assert engine.run("image", "inspect", tag, check=False).returncode != 0
    assert "patchkit-bake-" not in engine.run("ps", "-a", "--format", "{{.Names}}").stdout


@containers
def test_bake_from_a_missing_image_is_one_line(built_images: None) -> None:
    out = patchkit(None, "bake", TOY_RECIPE, "--from", "localhost/pk-test-no-such-image", "-t", "localhost/x",
                   *[f"--engine-arg={a}" for a in images.ENGINE_ARGS])
    assert out.returncode == 1
    assert out.stderr.strip().startswith("patchkit: bake: `podman image` failed:"), out
    assert len(out.stderr.strip().splitlines()) == 1


def bake_containers(engine: Engine) -> list[str]:
    """Names of the containers any bake labelled, running or not."""
    listed = engine.run("ps", "-a", "--filter", "label=patchkit.commands.bake.owner", "--format", "{{.Names}}")
    return listed.stdout.split()


def spy_engine(tmp_path: Path) -> tuple[Path, Path]:
    """podman behind a script that notes each call's arguments (one line each) first."""
    calls, spy = tmp_path / "engine-calls", tmp_path / "podman-spy"
    spy.write_text(f'#!/bin/sh\necho "$@" >> "{calls}"\nexec "{images.podman_binary()}" "$@"\n')
    spy.chmod(0o755)
    return spy, calls


@containers
@pytest.mark.parametrize("flag, value", [
    ("--tag", "--change=ENV X=1"),  # once: an untagged image carrying X=1, exit 0, "wrote --change=ENV X=1"
    ("--tag", "--squash"),
    ("--from", "--privileged"),
    ("--tag", "Upper/Case:x"),
    ("--tag", "localhost/x@sha256:" + "0" * 64),  # commit names a tag, not a digest
    ("--from", "localhost/toy llm"),
])
def test_bake_refuses_a_tag_or_image_that_is_not_an_image_reference(built_images: None, tmp_path: Path, flag: str,
                                                                     value: str) -> None:
    """A usage error (exit 2) before any engine runs, naming the flag."""
    spy, calls = spy_engine(tmp_path)
    argv = {"--from": images.TOY_IMAGE, "--tag": "localhost/pk-test-never"}
    argv[flag] = value
    out = patchkit(None, "bake", TOY_RECIPE, f"--from={argv['--from']}", f"--tag={argv['--tag']}",
                   "--engine", str(spy), *[f"--engine-arg={a}" for a in images.ENGINE_ARGS],
                   *[f"--run-arg={a}" for a in images.ULIMIT_ARGS])
    assert out.returncode == 2, out
    [line] = out.stderr.strip().splitlines()
    assert line.startswith("patchkit: bake ") and (flag if flag == "--from" else "-t/--tag") in line, line
    assert repr(value) in line and ("cannot start with '-'" in line or "not an image reference" in line), line
    assert not calls.exists(), calls.read_text()  # the engine never ran


@containers
def test_every_positional_of_bake_follows_a_double_dash(built_images: None, tmp_path: Path) -> None:
    """IMAGE, TAG and the container's name come after `--` in each engine call."""
    spy, calls = spy_engine(tmp_path)
    tag = f"localhost/pk-test-dashes-{uuid.uuid4().hex[:8]}"
    try:
        out = patchkit(None, "bake", TOY_RECIPE, "--from", images.TOY_IMAGE, "-t", tag, "--steps", "fp32-dtype",
                       "--engine", str(spy), *[f"--engine-arg={a}" for a in images.ENGINE_ARGS],
                       *[f"--run-arg={a}" for a in images.ULIMIT_ARGS])
        assert out.returncode == 0, out
        lines = [line.split()[len(images.ENGINE_ARGS):] for line in calls.read_text().splitlines()]
        by_command = {words[0] if words[0] != "image" else "image inspect": words for words in lines
                      if words and words[0] in ("image", "run", "commit", "stop", "rm")}
        assert by_command["image inspect"][-2:] == ["--", images.TOY_IMAGE], lines
        assert by_command["run"][-3:-1] == ["--", images.TOY_IMAGE] and by_command["run"][-1] == "3600", lines
        assert by_command["commit"][-3:] == ["--", by_command["run"][by_command["run"].index("--name") + 1], tag]
        assert by_command["stop"][-2] == "--" and by_command["rm"][-2] == "--", lines
    finally:
        Engine("podman").run("rmi", "-f", tag, check=False)


def docs_bake_flags() -> list[str]:
    """The engine flags the docs say a host like ours needs for bake (the second sh block of
    docs/containers.md's bake section), as words."""
    section = (REPO / "docs" / "containers.md").read_text().split("## `patchkit bake`", 1)[1].split("\n## ", 1)[0]
    blocks = section.split("```sh\n")[1:]
    assert len(blocks) >= 2, "the docs' bake section lost its engine flags block"
    words = blocks[1].split("```", 1)[0].replace("\\\n", " ").split()
    return [w for w in words if w.startswith(("--engine-arg=", "--run-arg="))]


@containers
def test_bake_with_every_step_skipped_writes_no_image_unless_allowed(built_images: None, tmp_path: Path) -> None:
    """Every step outside `versions` must not give exit 0 and "wrote TAG" (an unpatched
    image). Run with the docs' flags for hosts like ours, as written there."""
    podman = Engine("podman")
    recipe = tmp_path / "out-of-range.yaml"
    recipe.write_text(json.dumps({"name": "oor", "steps": [
        {"name": "fp32-dtype", "patch": {"package": "toyllm", "versions": "<0.0.1", "modules": ["toyllm.config.model"],
                                         "edit": {"list_insert": {"names": ["_FLOAT16_DTYPES"], "values": ["float32"]}}}},
        {"name": "also-old", "check": {"package": "toyllm", "versions": "<0.0.1", "python": "pass"}}]}))
    tag = f"localhost/pk-test-skipped-{uuid.uuid4().hex[:8]}"
    flags = docs_bake_flags()
    assert "--engine-arg=--runtime=runc" in flags and "--run-arg=--ulimit=nproc=1024:1024" in flags, flags
    before = set(bake_containers(podman))  # other bakes on this machine may run meanwhile
    try:
        out = patchkit(None, "bake", str(recipe), "--from", images.TOY_IMAGE, "-t", tag, *flags)
        assert out.returncode == 1, out
        last = out.stderr.strip().splitlines()[-1]
        assert "every step was skipped" in last and "no image written" in last, last
        assert "fp32-dtype: " in last and "also-old: " in last and "<0.0.1" in last, last
        assert "--allow-skipped" in last
        assert podman.run("image", "inspect", tag, check=False).returncode != 0
        allowed = patchkit(None, "bake", str(recipe), "--from", images.TOY_IMAGE, "-t", tag, "--allow-skipped", *flags)
        assert allowed.returncode == 0, allowed
        assert podman.run("image", "inspect", tag, check=False).returncode == 0
        assert set(bake_containers(podman)) <= before
    finally:
        podman.run("rmi", "-f", tag, check=False)


@containers
def test_a_bake_whose_run_fails_leaves_no_container(built_images: None) -> None:
    """An rlimit the runtime refuses (nproc above the current one) fails
    `podman run` after the container was created; the cleanup covers the run."""
    podman = Engine("podman")
    before = set(podman.run("ps", "-a", "--format", "{{.Names}}").stdout.split())
    out = patchkit(None, "bake", TOY_RECIPE, "--from", images.TOY_IMAGE, "-t", "localhost/pk-test-never",
                   *[f"--engine-arg={a}" for a in images.ENGINE_ARGS], "--run-arg=--ulimit=nofile=1024:1024")
    assert out.returncode == 1, out
    assert out.stderr.strip().splitlines()[-1].startswith("patchkit: bake: `podman run` failed: "), out
    assert "rlimit" in out.stderr, out
    names = set(podman.run("ps", "-a", "--format", "{{.Names}}").stdout.split()) - before
    assert not [n for n in names if n.startswith("patchkit-bake-")], names


@containers
def test_a_killed_bake_leaves_a_bounded_labelled_container_that_the_next_bake_removes(built_images: None,
                                                                                      tmp_path: Path) -> None:
    """`kill -9` of bake must not leave `sleep infinity` forever: its container sleeps the bake's timeout (and removes itself then: --rm), carries the owner
    label, and the next bake removes it; a labelled container whose bake still runs is kept."""
    podman = Engine("podman")
    recipe = tmp_path / "slow.yaml"
    recipe.write_text(json.dumps({"name": "slow", "steps": [
        {"name": "wait", "check": {"package": "toyllm", "python": "import time; time.sleep(120)", "timeout_s": 150}}]}))
    argv = [PATCHKIT, "bake", str(recipe), "--from", images.TOY_IMAGE, "-t", "localhost/pk-test-never",
            "--timeout", "300", *podman.bake_args()]
    alive = f"pk-test-alive-{uuid.uuid4().hex[:8]}"  # labelled by a bake that runs: this test's process
    stat = Path(f"/proc/{os.getpid()}/stat").read_text().rsplit(")", 1)[1].split()
    podman.started.append(alive)
    podman.run("run", "-d", "--name", alive, "--label", f"patchkit.commands.bake.owner={os.uname().nodename} {os.getpid()} "
               f"{stat[19]}", *images.RUN_ARGS, images.TOY_IMAGE, "sleep", "300")
    before = set(bake_containers(podman))  # other bakes on this machine may run meanwhile
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    left: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while not left:
            left = [n for n in bake_containers(podman) if n.startswith("patchkit-bake-") and n not in before]
            if left:
                break
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
        [name] = left
        config = podman.run("container", "inspect", "--format", "{{json .Config.Cmd}} {{.HostConfig.AutoRemove}} "
                            '{{index .Config.Labels "patchkit.commands.bake.owner"}}', name).stdout.split()
        assert config[:2] == ['["300"]', "true"], config
        assert config[2:4] == [os.uname().nodename, str(proc.pid)], config
        assert podman.run("container", "inspect", "--format", "{{.State.Running}}", name).stdout.strip() == "true"

        again = patchkit(None, "bake", TOY_RECIPE, "--from", "localhost/pk-test-no-such-image", "-t",
                         "localhost/pk-test-never", *podman.bake_args())
        assert again.returncode == 1, again  # the image is missing, but the sweep came first
        assert "container(s) of earlier bakes whose process is gone: " in again.stderr, again
        assert name in again.stderr.split("whose process is gone: ", 1)[1].splitlines()[0], again
        remaining = bake_containers(podman)
        assert name not in remaining and alive in remaining, remaining
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        for name in left:
            podman.remove(name, check=False)
        podman.cleanup()


@containers
def test_the_dockerfile_alternative_runs_patchkit_apply_in_a_build(built_images: None, tmp_path: Path) -> None:
    """README's `RUN patchkit apply ...` (the local transport inside the build): a failed
    verification fails the build; a good recipe's journal is in the image, so `status` in a
    container of it, over podman://, says applied."""
    podman = Engine("podman")
    context = tmp_path / "context"
    shutil.copytree(REPO / "patchkit", context / "patchkit", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(TOY_RECIPE, context / "good.yaml")
    (context / "bad.yaml").write_text(json.dumps({"name": "bad", "steps": [
        {"name": "fp32-dtype", "patch": {"package": "toyllm", "modules": ["toyllm.config.model"],
                                         "edit": {"list_insert": {"names": ["_FLOAT16_DTYPES"], "values": ["float32"]}}},
         "verify": {"import": ["toyllm.no_such_module"]}}]}))
    tag = f"localhost/pk-test-dockerfile-{uuid.uuid4().hex[:8]}"

    def build(recipe: str) -> subprocess.CompletedProcess[str]:
        (context / "Containerfile").write_text(
            f"FROM {images.DEPS_IMAGE}\n"  # the toyllm image with patchkit's dependencies
            "COPY patchkit /opt/patchkit/patchkit\n"
            f"COPY {recipe} /tmp/patchkit/recipe.yaml\n"
            f"RUN PYTHONPATH=/opt/patchkit:{images.DEPS_IN_IMAGE} python3 -m patchkit apply /tmp/patchkit/recipe.yaml"
            " -e python=python3\n")
        return podman.run("build", "--layers=false", "--network", "none", *images.ULIMIT_ARGS, "-t", tag, "-f",
                          str(context / "Containerfile"), str(context), check=False)

    try:
        failed = build("bad.yaml")
        assert failed.returncode != 0, failed.stdout
        assert "toyllm.no_such_module" in failed.stdout + failed.stderr
        assert podman.run("image", "inspect", tag, check=False).returncode != 0  # no image
        built = build("good.yaml")
        assert built.returncode == 0, built.stderr
        name = podman.start(tag)
        inv = inventory(tmp_path, {"c1": podman.host_entry(name)})
        status = patchkit(podman, "status", TOY_RECIPE, "-i", inv, "--json")
        assert status.returncode == 0, status
        assert steps(status, "c1")["eagle3-whitelist"]["status"] == "applied"
    finally:
        podman.cleanup()
        podman.run("rmi", "-f", tag, check=False)


# ---------------------------------------------------------------------- inventory


@pytest.mark.parametrize("address, problem", [
    ("k8s://onlyns", "want k8s://NAMESPACE/POD or k8s://NAMESPACE/POD/CONTAINER"),
    ("k8s://ns/Pod_1", "pod 'Pod_1' is not a Kubernetes name"),
    ("podman://", "want podman://CONTAINER"),
    ("nope://c1", "unknown scheme 'nope://'"),
])
def test_a_bad_container_address_is_one_line_naming_its_place(tmp_path: Path, address: str, problem: str) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text(f"hosts:\n  c1:\n    address: \"{address}\"\n")
    out = patchkit(None, "status", TOY_RECIPE, "-i", str(inv))
    assert out.returncode == 2, out
    line = out.stderr.strip()
    assert len(line.splitlines()) == 1 and line.startswith(f"patchkit: {inv}:3:5: hosts.c1.address"), line
    assert problem in line


@pytest.mark.parametrize("groups, where, problem", [
    ("  pods: {k8s_selector: app=x, namespace: Bad_NS}\n", "3:31: groups.pods.namespace",
     "namespace 'Bad_NS' is not a Kubernetes name"),
    ("  pods: {k8s_selector: app=x, namespaec: y}\n", "3:31: groups.pods", "unknown key 'namespaec'"),
    ("  pods: {namespace: y}\n", "3:3: groups.pods", "missing required key 'k8s_selector'"),
    ("  pods: [3]\n", "3:10: groups.pods[0]", "expected a string, got 3"),
])
def test_a_bad_selector_group_is_one_line_naming_its_place(tmp_path: Path, groups: str, where: str,
                                                           problem: str) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text("hosts: {}\ngroups:\n" + groups)
    out = patchkit(None, "history", "-i", str(inv))
    assert out.returncode == 2, out
    line = out.stderr.strip()
    assert len(line.splitlines()) == 1 and line.startswith(f"patchkit: {inv}:{where}: {problem}"), out


def test_selector_groups_are_resolved_through_the_resolver_given() -> None:
    inventory = Inventory.model_validate({
        "hosts": {"gpu-1": {"address": "gpu-1.internal"}, "web": {"address": "podman://web"}},
        "groups": {"pods": {"k8s_selector": "app=vllm", "namespace": "serving", "container": "vllm"},
                   "both": ["web", "pods"]},
        "defaults": {"python": "/opt/venv/bin/python", "context": "prod"},
    })
    asked: list[str] = []

    def resolve(group: str, selector: PodSelector, defaults: Defaults) -> tuple[list[HostSpec], list[str]]:
        asked.append(group)
        pods = pods_from_json(POD_LIST, selector.container)
        return ([pod_host(selector, defaults, p.name) for p in pods if p.reason is None],
                [f"{p.name}: {p.reason}" for p in pods if p.reason])

    chosen = inventory.select("both", resolve)
    assert [h.name for h in chosen.hosts] == ["web", "serving/vllm-7d9f-a1", "serving/vllm-7d9f-b2"]
    pod = chosen.hosts[1]
    assert (pod.address, pod.python, pod.options_as(K8sOptions).context, pod.scheme) == (
        "k8s://serving/vllm-7d9f-a1/vllm", "/opt/venv/bin/python", "prod", "k8s")
    assert len(chosen.notes) == 5 and asked == ["pods"]
    everything = inventory.select(None, resolve)  # no -l: every host, and every selector's pods
    assert [h.name for h in everything.hosts][:2] == ["gpu-1", "web"] and len(everything.hosts) == 4
    assert [h.name for h in inventory.select("gpu-1", resolve).hosts] == ["gpu-1"]
    assert asked == ["pods", "pods"]  # a selector not named is never resolved


def test_addresses_parse_into_schemes() -> None:
    assert HostSpec(address="podman://web-1").scheme == "podman"
    assert HostSpec(address="docker://0123abcd").scheme == "docker"
    assert HostSpec(address="gpu-1.internal").scheme == "ssh"
    assert HostSpec(address="local").scheme == "local" and HostSpec(name="localhost").scheme == "local"
    assert HostSpec(name="gpu-7").scheme == "ssh"  # no address: the SSH host of its name, as Ansible
    pod = parse_pod_address("serving/vllm-0/engine")
    assert (pod.namespace, pod.pod, pod.container) == ("serving", "vllm-0", "engine")
    assert str(pod) == "k8s://serving/vllm-0/engine"


def test_container_exec_argv() -> None:
    host = HostSpec(name="c1", address="podman://web", user="app", engine="/usr/bin/podman",
                    engine_args=["--runtime", "runc"])
    assert PodmanScheme().target(host).command(["python3", "-c", "x", "n"]) == [
        "/usr/bin/podman", "--runtime", "runc", "exec", "-i", "--user=app", "--", "web", "python3", "-c", "x", "n"]
    assert DockerScheme().target(HostSpec(name="d", address="docker://web")).command(["py"]) == [
        "docker", "exec", "-i", "--", "web", "py"]


def test_kubectl_exec_argv_honours_kubeconfig_and_context() -> None:
    host = HostSpec(name="p", address="k8s://serving/vllm-0/engine", kubeconfig="/etc/kube/config",
                    context="prod-eu", user="root")
    assert KubectlScheme().target(host).command(["python3", "-c", "x"]) == [
        "kubectl", "--kubeconfig", "/etc/kube/config", "--context", "prod-eu",
        "exec", "-i", "-n", "serving", "vllm-0", "-c", "engine", "--", "python3", "-c", "x"]
    bare = HostSpec(name="p", address="k8s://default/vllm-0")
    assert KubectlScheme().target(bare).command(["py"]) == ["kubectl", "exec", "-i", "-n", "default", "vllm-0",
                                                               "--", "py"]


def test_kubectl_takes_engine_args_after_its_config_flags_for_exec_and_get() -> None:
    """One kubectl command line for a pod's exec and for listing a selector's pods: the
    selector's options over the defaults', config flags first, then engine_args."""
    defaults = Defaults(engine="/opt/kubectl", engine_args=["--request-timeout", "5s"], kubeconfig="/k/config")
    selector = PodSelector(k8s_selector="app=vllm", namespace="serving", context="prod-eu")
    prefix = ["/opt/kubectl", "--kubeconfig", "/k/config", "--context", "prod-eu", "--request-timeout", "5s"]
    assert get_pods_argv(selector, defaults) == [*prefix, "get", "pods", "-l", "app=vllm", "-n", "serving", "-o",
                                                 "json"]
    pod = pod_host(selector, defaults, "vllm-0")
    assert KubectlScheme().target(pod).command(["py"]) == [*prefix, "exec", "-i", "-n", "serving", "vllm-0", "--", "py"]


# ---------------------------------------------------------------------- pods: selectors and kubectl's words


def _pod(name: str, phase: str = "Running", containers: dict[str, dict[str, Any]] | None = None,
         **extra: Any) -> dict[str, Any]:
    """One item of `kubectl get pods -o json`, as a real API server writes it (trimmed)."""
    statuses = [{"name": c, "ready": "running" in state, "restartCount": 0, "image": "vllm/vllm-openai:v0.10.1",
                 "imageID": "docker.io/vllm/vllm-openai@sha256:" + "0" * 64, "state": state}
                for c, state in (containers or {"vllm": {"running": {"startedAt": "2026-12-01T10:00:00Z"}}}).items()]
    status: dict[str, Any] = {"phase": phase, "hostIP": "10.0.0.5", "podIP": "10.244.1.7",
                              "startTime": "2026-12-01T09:59:58Z", "qosClass": "Burstable"}
    if phase in ("Running", "Succeeded", "Failed"):
        status["containerStatuses"] = statuses
    status.update(extra.pop("status", {}))
    metadata = {"name": name, "namespace": "serving", "labels": {"app": "vllm"},
                "uid": str(uuid.UUID(int=len(name))), "creationTimestamp": "2026-12-01T09:59:58Z",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "vllm-7d9f", "uid": "x"}]}
    metadata.update(extra.pop("metadata", {}))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": {"containers": [{"name": c} for c in (containers or {"vllm": {}})], "nodeName": "gpu-node-1"},
            "status": status}


POD_LIST = {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": [
    _pod("vllm-7d9f-a1"),
    _pod("vllm-7d9f-b2", containers={"vllm": {"running": {}}, "sidecar": {"running": {}}}),
    _pod("vllm-7d9f-c3", phase="Pending", status={"conditions": [{"type": "PodScheduled", "status": "False",
                                                                   "reason": "Unschedulable"}]}),
    _pod("vllm-7d9f-d4", containers={"vllm": {"waiting": {"reason": "CrashLoopBackOff",
                                                          "message": "back-off 5m0s restarting failed container"}}}),
    _pod("vllm-7d9f-e5", metadata={"deletionTimestamp": "2026-12-01T10:05:00Z", "deletionGracePeriodSeconds": 30}),
    _pod("vllm-job-f6", phase="Succeeded", containers={"vllm": {"terminated": {"reason": "Completed", "exitCode": 0}}}),
    _pod("vllm-7d9f-g7", phase="Failed", status={"reason": "Evicted",
                                                 "message": "The node was low on resource: memory."}),
]}


def test_selector_resolution_keeps_running_pods_and_says_why_others_are_left_out() -> None:
    pods = {p.name: p.reason for p in pods_from_json(json.dumps(POD_LIST), None)}
    assert pods == {
        "vllm-7d9f-a1": None,
        "vllm-7d9f-b2": None,
        "vllm-7d9f-c3": "phase Pending",
        "vllm-7d9f-d4": "container vllm is waiting: CrashLoopBackOff",
        "vllm-7d9f-e5": "terminating (deletionTimestamp set)",
        "vllm-job-f6": "phase Succeeded",
        "vllm-7d9f-g7": "phase Failed (Evicted)",
    }
    sidecar = {p.name: p.reason for p in pods_from_json(POD_LIST, "sidecar")}
    assert sidecar["vllm-7d9f-b2"] is None
    assert sidecar["vllm-7d9f-a1"] == "has no container sidecar (containers: vllm)"


def test_a_selector_without_kubectl_is_one_line() -> None:
    selector = PodSelector(k8s_selector="app=vllm", engine="/opt/no/kubectl")
    with pytest.raises(HostError) as caught:
        resolve_selector("fleet", selector, Defaults())
    assert str(caught.value) == ("group fleet: kubectl `/opt/no/kubectl` is not on this machine (not in PATH); "
                                 "install it or set `engine:` to its path")


def test_get_pods_argv() -> None:
    selector = PodSelector(k8s_selector="app=vllm,tier!=canary", namespace="serving", context="prod-eu")
    assert get_pods_argv(selector, Defaults(kubeconfig="/k/config")) == [
        "kubectl", "--kubeconfig", "/k/config", "--context", "prod-eu",
        "get", "pods", "-l", "app=vllm,tier!=canary", "-n", "serving", "-o", "json"]


@pytest.mark.parametrize("stderr, kind", [
    ('Error from server (NotFound): pods "vllm-0" not found', "not_found"),
    ('Error from server (NotFound): namespaces "serving" not found', "not_found"),
    ('error: unable to upgrade connection: container not found ("engine")', "not_found"),
    ("Error from server (BadRequest): container engine is not valid for pod vllm-0", "not_found"),
    ("error: cannot exec into a container in a completed pod; current phase is Succeeded", "not_running"),
    (("error: Internal error occurred: error executing command in container: failed to exec in container: failed to "
      'start exec "abc": OCI runtime exec failed: exec failed: unable to start container process: exec: "python3": '
      "executable file not found in $PATH: unknown"), "no_python"),
    ("The connection to the server localhost:8080 was refused - did you specify the right host or port?",
     "engine_unreachable"),
    ('error: context "prod-eu" does not exist', "engine_unreachable"),
    (('Error from server (Forbidden): pods "vllm-0" is forbidden: User "ci" cannot create resource "pods/exec" in '
      'API group "" in the namespace "serving"'), "forbidden"),
    ('Error: no container with name or ID "x" found: no such container', "not_found"),
    ("Error response from daemon: No such container: x", "not_found"),
    ("Error response from daemon: container 4f2a is not running", "not_running"),
    ("Error: can only create exec sessions on running containers: container state improper", "not_running"),
    ("Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?",
     "engine_unreachable"),
    ("Traceback (most recent call last):\n  File \"<string>\", line 1\nSyntaxError: invalid syntax", None),
])
def test_engine_stderr_is_classified(stderr: str, kind: str | None) -> None:
    assert classify(stderr.splitlines()) == kind


# ---------------------------------------------------------------------- pods through the FAKE kubectl


@pytest.fixture
def fake_kubectl(tmp_path: Path, built_images: None) -> Iterator[tuple[Path, Path, dict[str, str]]]:
    """An executable FAKE kubectl (tests/fake_kubectl.py), its argv log, and the env to run with."""
    wrapper = tmp_path / "kubectl"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE_KUBECTL} \"$@\"\n")
    wrapper.chmod(0o755)
    log = tmp_path / "kubectl.log"
    env = dict(os.environ, FAKE_KUBECTL_LOG=str(log), FAKE_KUBECTL_PODS=str(tmp_path / "pods.json"))
    yield wrapper, log, env


@containers
def test_pods_through_a_fake_kubectl(fake_kubectl: tuple[Path, Path, dict[str, str]], tmp_path: Path) -> None:
    kubectl, log, env = fake_kubectl
    podman = Engine("podman")
    try:
        running, other = podman.start(), podman.start()
        doc = {"apiVersion": "v1", "kind": "List", "items": [
            _pod(running), _pod(other), _pod("vllm-pending", phase="Pending")]}
        Path(env["FAKE_KUBECTL_PODS"]).write_text(json.dumps(doc))
        inv = tmp_path / "inv.yaml"
        inv.write_text(json.dumps({
            "defaults": {"kubeconfig": "/etc/fake/kubeconfig", "context": "fake-ctx", "engine": str(kubectl)},
            "hosts": {"one": {"address": f"k8s://serving/{running}/vllm"},
                      "gone": {"address": "k8s://serving/pk-test-no-such-pod"}},
            "groups": {"fleet": {"k8s_selector": "app=vllm", "namespace": "serving"}},
        }))
        one = patchkit(None, "apply", TOY_RECIPE, "-i", str(inv), "-l", "one,gone", "--json", env=env)
        assert one.returncode == 1, one
        assert one.hosts()["one"]["status"] == "changed"
        assert one.hosts()["gone"]["message"].startswith("gone: pod serving/pk-test-no-such-pod not found (kubectl: "
                                                         'pods "pk-test-no-such-pod" not found)'), one
        execs = [json.loads(line) for line in log.read_text().splitlines()]  # both hosts at once: any order
        mine = next(argv for argv in execs if running in argv)
        assert mine[:4] == ["--kubeconfig", "/etc/fake/kubeconfig", "--context", "fake-ctx"]
        assert mine[4:12] == ["exec", "-i", "-n", "serving", running, "-c", "vllm", "--"]
        assert len(execs) == 2  # one exec per pod per run

        fleet = patchkit(None, "status", TOY_RECIPE, "-i", str(inv), "-l", "fleet", "--json", env=env)
        assert fleet.returncode == 3, fleet  # `other` is pending
        assert set(fleet.hosts()) == {f"serving/{running}", f"serving/{other}"}
        assert steps(fleet, f"serving/{running}")["eagle3-whitelist"]["status"] == "applied"
        assert steps(fleet, f"serving/{other}")["eagle3-whitelist"]["status"] == "pending"
        assert "pod serving/vllm-pending left out: phase Pending" in fleet.stderr
        assert all(h["warnings"] == [] for h in fleet.hosts().values()), fleet  # kubectl's `Defaulted container`
        gets = [argv for argv in map(json.loads, log.read_text().splitlines()) if "get" in argv]
        assert gets == [["--kubeconfig", "/etc/fake/kubeconfig", "--context", "fake-ctx", "get", "pods", "-l",
                         "app=vllm", "-n", "serving", "-o", "json"]]

        src = tmp_path / "drafter"
        src.mkdir()
        (src / "model.safetensors").write_bytes(os.urandom(1 << 20))
        ship = tmp_path / "ship.yaml"
        ship.write_text(json.dumps({"name": "ship", "steps": [
            {"name": "ship", "deploy": {"src": str(src), "dest": "/models/drafter"}}]}))
        shipped = patchkit(None, "apply", str(ship), "-i", str(inv), "-l", "one", "--json", env=env)
        assert shipped.hosts()["one"]["status"] == "changed", shipped  # the bytes through kubectl's stdin
        assert podman.read(running, "/models/drafter/model.safetensors") == (src / "model.safetensors").read_bytes()

        podman.run("stop", "-t", "0", other)
        stopped = patchkit(None, "status", TOY_RECIPE, "-i", str(inv), "-l", "fleet", "--json", env=env)
        assert stopped.hosts()[f"serving/{other}"]["message"] == (
            f"serving/{other}: pod serving/{other} is not running (kubectl: cannot exec into a container in a "
            "completed pod; current phase is Succeeded)"), stopped

        refused = dict(env, FAKE_KUBECTL_REFUSE="The connection to the server 10.0.0.1:6443 was refused - did you "
                                                "specify the right host or port?")
        down = patchkit(None, "status", TOY_RECIPE, "-i", str(inv), "-l", "fleet", env=refused)
        assert down.returncode == 1
        assert down.stderr.strip() == ("patchkit: group fleet: kubectl cannot reach its service: The connection to "
                                       "the server 10.0.0.1:6443 was refused - did you specify the right host or port?")
    finally:
        podman.cleanup()
