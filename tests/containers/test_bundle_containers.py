"""Start-up bundles in real containers: an unmodified image, the bundle mounted, the server wrapped.

The image is the toyllm test image (fixtures/containers.py: Debian's python3, toyllm 0.16.0's
files in its dist-packages, no patchkit, nothing else). The bundles are built from the toy
releases of tests/agent/test_bundle.py. Containers run with `--network none`: the served
code is asked over HTTP on the container's own loopback (`podman exec ... urllib`).
`podman kube play` runs the shipped example manifest (examples/bundle/pod.yaml) with only its
image and its server's command line replaced by the toy ones.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from fixtures import containers as images
from tests.agent.test_bundle import bundle_recipe
from tests.agent.test_release_test import RELEASES, build_wheel, pip_sees_only
from tests.helpers import REPO, run_patchkit

SPECULATIVE = f"{images.SITE_PACKAGES}/toyllm/config/speculative.py"
PORT = 8000
# A stand-in for `vllm serve`: answers, over HTTP, whether the code it imported accepts a model
# type as an EAGLE-3 target; exits 42 on SIGTERM (PID 1 in a container: no default action).
SERVER = """
import http.server, json, signal, sys
import toyllm.config.speculative as spec
from toyllm.config.model import ModelConfig
signal.signal(signal.SIGTERM, lambda *_: sys.exit(42))
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        kind = self.path.strip("/")
        try:
            spec.SpeculativeConfig("eagle3", ModelConfig(kind))._verify_args()
            ok = True
        except ValueError:
            ok = False
        body = json.dumps({"model_type": kind, "eagle3": ok, "file": spec.__file__}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
print("serving", flush=True)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""
ASK = ("import sys, urllib.request, time\n"
       "for _ in range(100):\n"
       "    try:\n"
       "        print(urllib.request.urlopen('http://127.0.0.1:%d/' + sys.argv[1]).read().decode()); break\n"
       "    except OSError:\n"
       "        time.sleep(0.1)\n") % PORT


@pytest.fixture(name="bundles", scope="module")
def bundles_fixture(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """fix.pyz (built for every toy release), old.pyz (for 0.10.x only: the image's 0.16.0 is
    unknown to it), nofix.pyz (its verify program fails)."""
    root = tmp_path_factory.mktemp("container-bundles")
    links = root / "links"
    links.mkdir()
    for version in RELEASES:
        build_wheel(links, version)
    env = pip_sees_only(links, root / "cache")
    out = {}
    for name, recipe, extra in [("fix", bundle_recipe(root), []),
                                ("old", bundle_recipe(root), ["--versions", "0.10.1,0.10.2"]),
                                ("nofix", bundle_recipe(root, verify="import sys; sys.exit('no')", name="nofix"), [])]:
        out[name] = root / f"{name}.pyz"
        built = run_patchkit("bundle", str(recipe), "-o", str(out[name]), *extra, env=env, timeout=180)
        assert built.returncode == 0, built
    out["recipe"] = bundle_recipe(root)
    return out


def podman(*args: str, check: bool = True, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([images.podman_binary(), *images.ENGINE_ARGS, *args], capture_output=True, text=True,
                          check=False, timeout=120, env=env)
    assert done.returncode == 0 or not check, done.stderr
    return done


@pytest.fixture(name="names")
def names_fixture(built_images: None) -> Iterator[list[str]]:
    """Containers this test started, removed at its end."""
    started: list[str] = []
    yield started
    for name in started:
        podman("rm", "-f", "-t", "0", name, check=False)


def start(names: list[str], tmp_path: Path, bundle: Path, *bundle_args: str) -> tuple[str, Path]:
    """A container of the toy image, unmodified: the bundle and the server mounted read-only, a
    journal folder of the host mounted at /state, the server's command wrapped by the bundle."""
    name = f"patchkit-bundle-{os.getpid()}-{len(names)}-{time.monotonic_ns() % 10**6}"
    state = tmp_path / f"state-{len(names)}"
    state.mkdir(mode=0o700)
    (tmp_path / "server.py").write_text(SERVER)
    names.append(name)
    podman("run", "-d", "--name", name, *images.RUN_ARGS,
           "-v", f"{bundle}:/bundle/fix.pyz:ro", "-v", f"{tmp_path / 'server.py'}:/srv/server.py:ro",
           "-v", f"{state}:/state", images.TOY_IMAGE,
           "python3", "/bundle/fix.pyz", "--state-dir", "/state", *bundle_args, "--", "python3", "/srv/server.py",
           str(PORT))
    return name, state


def wait_exit(name: str, timeout: float = 60) -> int:
    return int(podman("wait", name).stdout.strip().splitlines()[-1])


def logs(name: str) -> str:
    """What the container printed, both streams in the order printed (each line once)."""
    done = subprocess.run([images.podman_binary(), *images.ENGINE_ARGS, "logs", name], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, check=False, timeout=60)
    return done.stdout


def wait_serving(name: str, times: int = 1, timeout: float = 60) -> None:
    """Until the server said `serving` (the `times`th time: a restarted container's logs keep the last run's)."""
    deadline = time.monotonic() + timeout
    while logs(name).count("serving\n") < times:
        state = podman("inspect", "--format", "{{.State.Status}}", name).stdout.strip()
        assert state == "running" and time.monotonic() < deadline, logs(name)
        time.sleep(0.1)


def ask(name: str, model_type: str) -> dict[str, object]:
    done = podman("exec", name, "python3", "-c", ASK, model_type)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def copied_out(name: str, tmp_path: Path) -> bytes:
    """The container's speculative.py now (podman cp: the container may have exited)."""
    copied = tmp_path / f"copied-{name}"
    copied.mkdir()
    podman("cp", f"{name}:{SPECULATIVE}", str(copied))
    return (copied / "speculative.py").read_bytes()


def original_bytes() -> bytes:
    """The image's file, from a throw-away container of it (never the container under test)."""
    return podman("run", "--rm", *images.RUN_ARGS, images.TOY_IMAGE, "cat", SPECULATIVE).stdout.encode()


def test_an_unmodified_image_serves_the_patched_code_and_a_second_start_is_ok_and_fast(
        bundles: dict[str, Path], names: list[str], tmp_path: Path) -> None:
    name, state = start(names, tmp_path, bundles["fix"])
    wait_serving(name)
    served = ask(name, "kimi_k2")
    assert served == {"model_type": "kimi_k2", "eagle3": True, "file": SPECULATIVE}, served
    first = logs(name)
    assert "whitelist: changed" in first and "applied in" in first, first
    # The server is the container's main process: `podman stop` signals it, its exit code is the container's.
    podman("stop", "-t", "20", name)
    assert wait_exit(name) == 42
    # Second start of the same container: the fix is in its layer already.
    started = time.monotonic()
    podman("start", name)
    wait_serving(name, times=2)
    took = time.monotonic() - started
    second = logs(name)[len(first):]
    said = next(line for line in second.splitlines() if "in place" in line)
    seconds = float(said.split(" in ")[-1].split(" s;")[0])
    print(f"second start: bundle {seconds:.3f} s, podman start to serving {took:.2f} s")
    assert said.startswith("patchkit-bundle: toyfix: in place (whitelist ok)") and seconds < 0.5, said
    assert "changed" not in second
    assert ask(name, "kimi_k2")["eagle3"] is True
    # The journal on the mounted folder: one apply run, read by status/history through the podman transport.
    (record,) = (state / "runs" / "toyfix").glob("*.json")
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(f"hosts:\n  pod: {{address: 'podman://{name}', state_dir: /state, python: python3}}\n")
    status = run_patchkit("status", str(bundles["recipe"]), "-i", str(inventory), "--json")
    assert status.returncode == 0, status
    steps = {s["name"]: s for s in status.json()["hosts"]["pod"]["steps"]}
    assert steps["whitelist"]["status"] == "applied" and record.stem in steps["whitelist"]["message"]
    history = run_patchkit("history", "-i", str(inventory))
    assert history.returncode == 0 and record.stem in history.stdout, history


def test_a_release_the_bundle_does_not_know_stops_the_container_before_the_server(
        bundles: dict[str, Path], names: list[str], tmp_path: Path) -> None:
    name, state = start(names, tmp_path, bundles["old"])
    assert wait_exit(name) == 1
    said = logs(name)
    assert "serving" not in said, said
    assert said.strip().splitlines() == [
        "patchkit-bundle: refused: toyllm 0.16.0 is not a release this bundle was built for (step whitelist knows "
        "toyllm 0.10.1, 0.10.2); nothing changed, python3 not started (--on-unknown run would start it unpatched)"]
    assert copied_out(name, tmp_path) == original_bytes()
    assert list(state.iterdir()) == []


def test_a_failing_verify_leaves_the_original_bytes_in_the_container(
        bundles: dict[str, Path], names: list[str], tmp_path: Path) -> None:
    name, state = start(names, tmp_path, bundles["nofix"])
    assert wait_exit(name) == 1
    said = logs(name)
    assert "serving" not in said and "verify program failed" in said and "original restored" in said, said
    assert copied_out(name, tmp_path) == original_bytes()
    (record,) = (state / "runs" / "nofix").glob("*.json")
    steps = {s["name"]: s for s in json.loads(record.read_text())["steps"]}
    assert steps["whitelist"]["status"] == "failed" and steps["whitelist"]["restored"] is True


def test_podman_kube_play_runs_the_shipped_example_manifest(bundles: dict[str, Path], built_images: None,
                                                            tmp_path: Path) -> None:
    shipped = yaml.safe_load((REPO / "examples" / "bundle" / "pod.yaml").read_text())
    (container,) = shipped["spec"]["containers"]
    assert container["command"][:2] == ["python3", "/patchkit/fix.pyz"] and container["command"][-1] == "--"
    name = f"patchkit-bundle-pod-{os.getpid()}"
    shipped["metadata"]["name"] = name
    container["image"] = images.TOY_IMAGE  # the toy server instead of vLLM: the rest as shipped
    # one line: podman's reader of kube files trips on a multi-line argument
    one_line = f"import base64; exec(base64.b64decode({base64.b64encode(SERVER.encode()).decode()!r}))"
    container["args"] = ["python3", "-c", one_line, str(PORT)]
    pod = tmp_path / "pod.yaml"
    pod.write_text(yaml.safe_dump(shipped))
    configmap = yaml.safe_load((REPO / "examples" / "bundle" / "configmap.yaml").read_text())
    assert list(configmap["binaryData"]) == ["fix.pyz"]
    configmap["binaryData"]["fix.pyz"] = base64.b64encode(bundles["fix"].read_bytes()).decode()
    (tmp_path / "configmap.yaml").write_text(yaml.safe_dump(configmap))
    # The pod's containers get the ulimits this machine allows (kube play takes no --ulimit).
    conf = tmp_path / "containers.conf"
    text = Path(os.environ.get("CONTAINERS_CONF", "/usr/share/containers/containers.conf")).read_text()
    ulimits = 'default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]'
    conf.write_text(text.replace("\n[containers]\n", f"\n[containers]\n{ulimits}\n", 1) if "\n[containers]\n" in text
                    else f"[containers]\n{ulimits}\n{text}")
    env = {**os.environ, "CONTAINERS_CONF": str(conf)}
    try:
        podman("kube", "play", "--network", "none", "--configmap", str(tmp_path / "configmap.yaml"), str(pod), env=env)
        server = f"{name}-server"
        wait_serving(server)
        assert ask(server, "kimi_k2")["eagle3"] is True
        assert ask(server, "llama")["eagle3"] is True and ask(server, "mistral")["eagle3"] is False
        assert "whitelist: changed" in logs(server)
        # The journal in a 0700 folder the bundle made inside the pod's volume (Kubernetes makes an
        # emptyDir world-writable, which the bundle refuses as a state dir), read by status.
        journal = container["command"][container["command"].index("--state-dir") + 1]
        seen = podman("exec", server, "python3", "-c", "import os, sys; d = sys.argv[1]; "
                      "print(oct(os.stat(d).st_mode & 0o777), os.listdir(d + '/runs/toyfix') != [])", journal)
        assert seen.stdout.split() == ["0o700", "True"] and os.path.dirname(journal) == "/patchkit-state", seen.stdout
        inventory = tmp_path / "inventory.yaml"
        inventory.write_text(f"hosts:\n  pod: {{address: 'podman://{server}', state_dir: {journal}, python: python3}}\n")
        status = run_patchkit("status", str(bundles["recipe"]), "-i", str(inventory), "--json")
        assert status.returncode == 0, status
        assert {s["name"]: s["status"] for s in status.json()["hosts"]["pod"]["steps"]}["whitelist"] == "applied"
    finally:
        podman("kube", "down", str(pod), check=False, env=env)
