"""The launch step's supervision rules with a small real server (python -m http.server).

The vLLM-specific gates (acceptance rate, baseline) run against real `vllm serve` in
test_launch_vllm.py; here the point is the life cycle: start detached, idempotent
re-apply, status after a kill behind our back, restart on a new command, --no-restart,
fail fast with the log tail, rollback leaves nothing running.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import PATCHKIT


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_recipe(path: Path, command: list[str], port: int, timeout_s: float = 20) -> Path:
    recipe = {
        "name": "web",
        "steps": [{
            "name": "web",
            "launch": {
                "command": command,
                "cwd": str(path.parent),
                "health": {"url": f"http://127.0.0.1:{port}/", "timeout_s": timeout_s, "interval_s": 0.2},
                "ready": {"completion": None},
            },
        }],
    }
    path.write_text(json.dumps(recipe))  # JSON is YAML
    return path


def patchkit(state: Path, *args: str) -> tuple[int, dict]:
    proc = subprocess.run([PATCHKIT, *args, "--json", "--state-dir", str(state)],
                          capture_output=True, text=True, timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def step_of(report: dict) -> dict:
    return report["hosts"]["local"]["steps"][0]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state != "Z"


@pytest.fixture
def web(tmp_path: Path):
    port = free_port()
    recipe = write_recipe(tmp_path / "web.yaml", [sys.executable, "-m", "http.server", str(port),
                                                  "--bind", "127.0.0.1"], port)
    state = tmp_path / "state"
    yield recipe, state, port
    patchkit(state, "rollback", str(recipe), "--force")  # never leave a server behind


def test_life_cycle(web) -> None:
    recipe, state, port = web
    code, report = patchkit(state, "apply", str(recipe))
    step = step_of(report)
    assert code == 0 and step["status"] == "changed", step["message"]
    pid = step["details"]["servers"][0]["pid"]
    assert alive(pid)
    assert os.getsid(pid) == pid  # its own session: survives the agent and any SSH connection

    code, report = patchkit(state, "apply", str(recipe))
    assert code == 0 and step_of(report)["status"] == "ok" and str(pid) in step_of(report)["message"]

    code, report = patchkit(state, "status", str(recipe))
    assert code == 0 and step_of(report)["status"] == "applied"

    os.killpg(pid, signal.SIGKILL)
    time.sleep(0.3)
    code, report = patchkit(state, "status", str(recipe))
    assert code == 3 and step_of(report)["status"] == "pending" and "stopped" in step_of(report)["message"]

    code, report = patchkit(state, "apply", str(recipe))
    assert code == 0 and step_of(report)["status"] == "changed"
    new_pid = step_of(report)["details"]["servers"][0]["pid"]
    assert new_pid != pid and alive(new_pid)

    code, report = patchkit(state, "rollback", str(recipe))
    assert code == 0 and "stopped web" in step_of(report)["message"]
    time.sleep(0.2)
    assert not alive(new_pid)
    log = state / "launch" / "web.log"
    assert "patchkit launch web" in log.read_text()


def test_a_new_command_restarts_unless_no_restart(web, tmp_path: Path) -> None:
    recipe, state, port = web
    code, report = patchkit(state, "apply", str(recipe))
    first = step_of(report)["details"]["servers"][0]["pid"]
    other = write_recipe(tmp_path / "web2.yaml", [sys.executable, "-m", "http.server", str(port), "--bind",
                                                  "127.0.0.1", "--directory", str(tmp_path)], port)
    other.write_text(other.read_text().replace('"name": "web"', '"name": "web"', 1))

    code, report = patchkit(state, "apply", str(other), "--no-restart")
    assert code == 1 and "--no-restart" in step_of(report)["message"]
    assert alive(first)

    code, report = patchkit(state, "apply", str(other))
    assert code == 0 and step_of(report)["status"] == "changed", step_of(report)["message"]
    second = step_of(report)["details"]["servers"][0]["pid"]
    time.sleep(0.2)
    assert second != first and not alive(first) and alive(second)
    assert step_of(report)["details"]["replaced"]["pid"] == first

    # Undoing the restart stops the new server and starts the one it replaced again.
    code, report = patchkit(state, "rollback", str(other))
    assert code == 0 and "restarted the server it replaced" in step_of(report)["message"]
    time.sleep(0.2)
    assert not alive(second)


def test_a_server_that_dies_fails_fast_with_its_log(tmp_path: Path) -> None:
    """The death ends the wait, not the health timeout: that is an hour, far beyond the
    test's own limit on the run (patchkit() gives it 120 s), so no timing is asserted."""
    port = free_port()
    recipe = write_recipe(tmp_path / "dies.yaml",
                          [sys.executable, "-c", "import sys; print('model does not fit'); sys.exit(3)"],
                          port, timeout_s=3600)
    code, report = patchkit(tmp_path / "state", "apply", str(recipe))
    step = step_of(report)
    assert code == 1 and step["status"] == "failed"
    assert step["message"].startswith("web exited before it was healthy (exit status 3)"), step["message"]
    assert "model does not fit" in step["message"] and "not healthy after" not in step["message"]


def test_a_server_that_never_gets_healthy_is_stopped(tmp_path: Path) -> None:
    port = free_port()
    recipe = write_recipe(tmp_path / "deaf.yaml", [sys.executable, "-c", "import time; time.sleep(600)"],
                          port, timeout_s=3)
    code, report = patchkit(tmp_path / "state", "apply", str(recipe))
    step = step_of(report)
    assert code == 1 and "not healthy after 3s" in step["message"]
    pid = step["details"]["servers"][0]["pid"]
    time.sleep(0.3)
    assert not alive(pid)


def test_workers_of_a_server_that_died_are_stopped_with_it(tmp_path: Path) -> None:
    port = free_port()
    pid_file = tmp_path / "worker.pid"
    # the "server" starts a worker in its process group, then dies before it is healthy
    script = f"sleep 300 & echo $! > {pid_file}; echo 'worker started, then: CUDA out of memory'; exit 4"
    recipe = write_recipe(tmp_path / "orphans.yaml", ["/bin/sh", "-c", script], port, timeout_s=60)
    code, report = patchkit(tmp_path / "state", "apply", str(recipe))
    step = step_of(report)
    assert code == 1 and "exit status 4" in step["message"], step
    worker = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while alive(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(worker), f"worker {worker} of the dead server still runs"
    assert step["details"]["stopped_after_failure"] is True, step["details"]
    assert "left of its group" in step["details"]["stop"]


SLOW_SERVER = '''
import json, sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer

class Handler(BaseHTTPRequestHandler):
    def _send(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._send({"data": [{"id": "m"}]})

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        time.sleep(2)  # a first completion that takes its time
        self._send({"choices": [{"text": "hi"}]})

    def log_message(self, *args):
        pass

HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
'''


@pytest.mark.parametrize(("timeout_s", "passes"), [(1, False), (6, True)])
def test_the_smoke_completion_is_given_its_own_timeout(tmp_path: Path, timeout_s: float, passes: bool) -> None:
    """`ready.completion.timeout_s` is the request's limit on the host (not the host's 30 s
    default): a 2 s completion fails a 1 s limit and passes a 6 s one."""
    port = free_port()
    server = tmp_path / "slow.py"
    server.write_text(SLOW_SERVER)
    recipe = write_recipe(tmp_path / "r.yaml", [sys.executable, str(server), str(port)], port)
    doc = json.loads(recipe.read_text())
    doc["steps"][0]["launch"]["ready"] = {"completion": {"prompt": "Hi", "max_tokens": 2, "timeout_s": timeout_s}}
    recipe.write_text(json.dumps(doc))
    state = tmp_path / "state"
    try:
        code, report = patchkit(state, "apply", str(recipe))
        step = step_of(report)
        assert (code == 0) == passes, step
        if not passes:
            assert "smoke completion failed" in step["message"] and "timed out" in step["message"], step
    finally:
        patchkit(state, "rollback", str(recipe))


# ------------------------------------------------------------------ running code vs disk

WEBAPP_SERVER = '''
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from webapp.version import VERSION  # read once, at start: as a server imports its code


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        data = VERSION.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
'''


def get(port: int) -> str:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as response:
        return response.read().decode()


@pytest.fixture
def webapp(tmp_path: Path):
    """A package `webapp` (its version module and a server that serves VERSION) in a venv of its
    own, and a recipe that patches VERSION and launches the server."""
    from tests.helpers import make_venv

    pkgs = tmp_path / "pkgs"
    (pkgs / "webapp").mkdir(parents=True)
    (pkgs / "webapp" / "__init__.py").write_text("")
    (pkgs / "webapp" / "version.py").write_text('VERSION = "1.0"\n')
    (pkgs / "webapp" / "serve.py").write_text(WEBAPP_SERVER)
    python = make_venv(tmp_path, [pkgs])
    port = free_port()
    launch = {"name": "web", "launch": {
        "command": ["python", "-m", "webapp.serve", str(port)],
        "health": {"url": f"http://127.0.0.1:{port}/", "timeout_s": 20, "interval_s": 0.2}}}

    def recipe(version: str | None, **patch_extra: object) -> Path:
        steps: list[dict] = []
        if version is not None:
            steps.append({"name": "bump", **patch_extra, "patch": {
                "package": "webapp", "modules": ["webapp.version"],
                "edit": {"set_value": {"names": ["VERSION"], "value": version}}}})
        steps.append(launch)
        path = tmp_path / f"web-{version}-{len(patch_extra)}.yaml"
        path.write_text(json.dumps({"name": "web", "steps": steps}))
        return path

    state = tmp_path / "state"

    def run(*args: str) -> tuple[int, dict]:
        return patchkit(state, *args, "-e", f"python={python}")

    yield recipe, run, port, pkgs / "webapp" / "version.py"
    for record in (state / "launch").glob("*.json"):  # never leave a server behind
        try:
            os.killpg(json.loads(record.read_text())["pid"], signal.SIGKILL)
        except (ProcessLookupError, ValueError, KeyError):
            pass


def steps_by_name(report: dict) -> dict[str, dict]:
    return {s["name"]: s for s in report["hosts"]["local"]["steps"]}


def test_a_patch_under_a_running_server_restarts_it(webapp) -> None:
    recipe, run, port, version_file = webapp
    code, report = run("apply", str(recipe(None)))
    assert code == 0, report
    first = step_of(report)["details"]["servers"][0]["pid"]
    assert get(port) == "1.0"

    # The same recipe plus a patch to the module the server imported: the server restarts.
    patched = recipe("2.0")
    code, report = run("apply", str(patched))
    steps = steps_by_name(report)
    assert code == 0 and steps["bump"]["status"] == "changed", report
    assert steps["web"]["status"] == "changed", steps["web"]
    second = steps["web"]["details"]["servers"][0]["pid"]
    assert second != first and not alive(first) and alive(second)
    assert get(port) == "2.0"
    assert steps["web"]["details"]["replaced"]["pid"] == first

    # Converged: a second apply changes nothing, status says applied and names the change it postdates.
    code, report = run("apply", str(patched))
    assert code == 0 and steps_by_name(report)["web"]["status"] == "ok", report
    code, report = run("status", str(patched))
    web = steps_by_name(report)["web"]
    assert code == 0 and web["status"] == "applied", web
    assert f"pid {second}" in web["message"] and "started after the last change" in web["message"], web
    assert str(version_file) in web["message"]

    # Rollback puts the file back first, then restarts the replaced server: onto the original code.
    code, report = run("rollback", str(patched))
    assert code == 0, report
    assert version_file.read_text() == 'VERSION = "1.0"\n'
    assert not alive(second)
    assert "healthy after" in steps_by_name(report)["web"]["message"], report
    assert get(port) == "1.0"  # rollback waited for the restarted server's health
    code, report = run("status", str(recipe(None)))
    assert code == 0 and step_of(report)["status"] == "applied", report


def test_no_restart_leaves_the_server_stale_and_says_so(webapp) -> None:
    recipe, run, port, version_file = webapp
    code, report = run("apply", str(recipe(None)))
    pid = step_of(report)["details"]["servers"][0]["pid"]

    code, report = run("apply", str(recipe("2.0")), "--no-restart")
    steps = steps_by_name(report)
    assert code == 3, report
    assert steps["bump"]["status"] == "changed" and 'VERSION = "2.0"' in version_file.read_text()
    web = steps["web"]
    assert web["status"] == "stale", web
    run_id = report["run_id"]
    assert re.match(rf"stale: pid {pid} started \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\dZ, before run {re.escape(run_id)} "
                    rf"changed {re.escape(str(version_file))}", web["message"]), web["message"]
    assert alive(pid) and get(port) == "1.0"  # untouched: still the old code
    assert report["hosts"]["local"]["status"] == "stale"

    # status (of any recipe launching it) sees it from the journal: exit 3, the same words.
    code, report = run("status", str(recipe(None)))
    web = step_of(report)
    assert code == 3 and web["status"] == "stale", web
    assert f"before run {run_id} changed {version_file}" in web["message"]

    # plan says what apply would do; a later apply without --no-restart restarts it onto the code on disk.
    code, report = run("plan", str(recipe(None)))
    assert step_of(report)["message"].startswith(f"would restart onto the code on disk: pid {pid} started "), report
    assert alive(pid)
    code, report = run("apply", str(recipe(None)))
    web = step_of(report)
    assert code == 0 and web["status"] == "changed" and "restarted onto the code on disk (pid" in web["message"], web
    assert get(port) == "2.0"


def test_a_patch_applied_and_rolled_back_under_a_server_leaves_it_current(webapp) -> None:
    """Net effect per file: the server's bytes are on disk again, so it is not stale."""
    recipe, run, port, version_file = webapp
    original = version_file.read_text()
    code, report = run("apply", str(recipe(None)))
    pid = step_of(report)["details"]["servers"][0]["pid"]
    patched = recipe("2.0")
    code, report = run("apply", str(patched), "--no-restart")
    assert code == 3
    code, report = run("rollback", str(patched), "--steps", "bump")
    assert code == 0, report
    assert version_file.read_text() == original
    code, report = run("status", str(recipe(None)))
    assert code == 0 and step_of(report)["status"] == "applied", report
    assert alive(pid) and get(port) == "1.0"


def test_notify_restricts_what_restarts_a_server(webapp, tmp_path: Path) -> None:
    """Once a step notifies `web`, the recipe's other changes (here a file the server never
    imported) do not restart it; the notifying step's change does."""
    recipe, run, port, version_file = webapp
    (version_file.parent / "extra.py").write_text("X = 1\n")
    code, report = run("apply", str(recipe(None)))
    pid = step_of(report)["details"]["servers"][0]["pid"]

    def with_extra(x: int, version: str) -> Path:
        doc = json.loads(recipe(version, notify=["web"]).read_text())
        doc["steps"].insert(0, {"name": "extra", "patch": {
            "package": "webapp", "modules": ["webapp.extra"],
            "edit": {"set_value": {"names": ["X"], "value": x}}}})
        path = tmp_path / f"extra-{x}-{version}.yaml"
        path.write_text(json.dumps(doc))
        return path

    code, report = run("apply", str(with_extra(2, "1.0")))
    steps = steps_by_name(report)
    assert code == 0 and steps["extra"]["status"] == "changed" and steps["bump"]["status"] == "ok", steps
    assert steps["web"]["status"] == "ok" and alive(pid), steps["web"]
    code, report = run("status", str(with_extra(2, "1.0")))
    assert code == 0 and steps_by_name(report)["web"]["status"] == "applied", report

    code, report = run("apply", str(with_extra(2, "2.0")))
    web = steps_by_name(report)["web"]
    assert code == 0 and web["status"] == "changed" and "restarted onto the code on disk" in web["message"], web
    assert get(port) == "2.0" and not alive(pid)

    # notify must name a launch step after it
    doc = json.loads(with_extra(2, "2.0").read_text())
    doc["steps"][1]["notify"] = ["extra"]
    bad = tmp_path / "bad.yaml"
    bad.write_text(json.dumps(doc))
    proc = subprocess.run([PATCHKIT, "validate", str(bad)], capture_output=True, text=True, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "notifies 'extra', which is not a launch step after it (launch steps after it: web)" in proc.stderr
