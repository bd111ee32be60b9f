"""Secrets never reach outputs: launch env values, secret variables and -e values.

Every test runs the real CLI against the local host with unique secret strings, then reads
back everything patchkit wrote or printed: stdout (JSON and human), stderr (console and JSON
logs), every file under the state dir (journal, launch records, logs). A secret may appear
nowhere, while the process or file on the host still gets the real value.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest
from tests.helpers import Result, Sandbox, mode, run_patchkit, sandbox_fixture  # noqa: F401 - fixture

# The "server": writes what it received to a proof file outside the state dir, then serves.
SERVER = """\
import http.server, json, os, sys
proof, port = sys.argv[1], int(sys.argv[2])
with open(proof + ".tmp", "w") as f:
    json.dump({"argv": sys.argv[3:], "env": {k: os.environ.get(k) for k in ("PLAIN_SETTING", "HF_TOKEN")}}, f)
os.replace(proof + ".tmp", proof)
http.server.ThreadingHTTPServer(("127.0.0.1", port), http.server.SimpleHTTPRequestHandler).serve_forever()
"""


def secret(what: str) -> str:
    return f"sk-test-{what}-{secrets.token_hex(12)}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Outputs:
    """Everything patchkit printed in a test, and (at scan time) everything under its state dir."""

    def __init__(self, state: Path, extra_files: tuple[Path, ...] = ()) -> None:
        self.state = state
        self.extra_files = extra_files
        self.results: list[Result] = []

    def run(self, *args: str, expect: int | None = 0) -> Result:
        result = run_patchkit(*args, timeout=120)
        assert "Traceback" not in result.stderr, result
        if expect is not None:
            assert result.returncode == expect, result
        self.results.append(result)
        return result

    def texts(self) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        for i, r in enumerate(self.results):
            out[f"run {i} ({' '.join(r.args[:2])}) stdout"] = r.stdout.encode()
            out[f"run {i} ({' '.join(r.args[:2])}) stderr"] = r.stderr.encode()
        files = [p for p in self.state.rglob("*") if p.is_file()] if self.state.is_dir() else []
        for path in [*files, *self.extra_files]:
            out[str(path)] = path.read_bytes()
        return out

    def assert_clean(self, *values: str, allow: Callable[[str, bytes], bytes] | None = None) -> int:
        """No secret anywhere; returns how many outputs were read."""
        texts = self.texts()
        found = []
        for where, data in texts.items():
            if allow:
                data = allow(where, data)
            for value in values:
                if value.encode() in data:
                    found.append(f"{value} in {where}")
        assert not found, "secrets leaked:\n" + "\n".join(found)
        assert any(self.state.rglob("*.json")), "nothing under the state dir to read"
        print(f"\nscanned {len(texts)} outputs for {len(values)} secrets: 0 found")
        return len(texts)


def launch_recipe(path: Path, port: int, proof: Path, plain_setting: str, hf_token: str, serve_auth: str,
                  log: Path | None = None, argv_secrets: bool = True) -> Path:
    """A server that gets secrets four ways: an env literal, a var marked in `secrets:` (in argv),
    a var secret by its name (hf_token: in env and in argv), and -e (given by the test).
    argv_secrets=False: secrets in env only."""
    script = path.parent / "server.py"
    script.write_text(SERVER)
    www = path.parent / "www"
    www.mkdir(exist_ok=True)
    launch: dict[str, Any] = {
        "command": [sys.executable, str(script), str(proof), "{{ port }}",
                    *(["--auth", "{{ serve_auth }}", "--hf-token={{ hf_token }}"] if argv_secrets else [])],
        "env": {"PLAIN_SETTING": plain_setting, "HF_TOKEN": "{{ hf_token }}"},
        "cwd": str(www),
        "health": {"url": "http://127.0.0.1:{{ port }}/", "timeout_s": 30, "interval_s": 0.2},
        "stop_timeout_s": 10,
    }
    if log:
        launch["log"] = str(log)
    recipe = {
        "name": "secretweb",
        "secrets": ["serve_auth"],
        "vars": {"port": port, "serve_auth": serve_auth, "hf_token": hf_token},
        "steps": [{"name": "web", "launch": launch}],
    }
    path.write_text(json.dumps(recipe))  # JSON is YAML
    return path


def step_of(result: Result) -> dict[str, Any]:
    return result.json()["hosts"]["local"]["steps"][0]


def read_proof(proof: Path, timeout: float = 15) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while not proof.exists():
        assert time.monotonic() < deadline, f"{proof} never written: the server did not start"
        time.sleep(0.05)
    return json.loads(proof.read_text())


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


def stop_everything(state: Path) -> None:
    """Never leave a server behind, whatever the test did."""
    for record in (state / "launch").glob("*.json"):
        try:
            pid = json.loads(record.read_text())["pid"]
            os.killpg(pid, signal.SIGKILL)
        except (ValueError, KeyError, ProcessLookupError, PermissionError):
            pass


@pytest.fixture
def web(tmp_path: Path):
    state = tmp_path / "state"
    yield tmp_path, state
    stop_everything(state)


def test_launch_secrets_reach_the_server_and_no_output(web) -> None:
    tmp, state = web
    plain, auth, auth_e, token = secret("env"), secret("marked"), secret("dash-e"), secret("byname")
    port, proof = free_port(), tmp / "outside" / "proof.json"
    proof.parent.mkdir()
    recipe = str(launch_recipe(tmp / "web.yaml", port, proof, plain, token, auth))
    common = ["--state-dir", str(state)]
    out = Outputs(state)

    out.run("plan", recipe, *common)
    first = out.run("apply", recipe, "--json", "--log-format", "json", *common)
    assert step_of(first)["status"] == "changed", first
    got = read_proof(proof)
    assert got["env"] == {"PLAIN_SETTING": plain, "HF_TOKEN": token}
    assert got["argv"] == ["--auth", auth, f"--hf-token={token}"]
    shown = step_of(first)["details"]["servers"][0]
    assert shown["argv"][-3:] == ["--auth", "<secret:serve_auth>", "--hf-token=<secret:hf_token>"], shown
    assert shown["env_names"] == ["HF_TOKEN", "PLAIN_SETTING"] and "env" not in shown, shown
    log = state / "launch" / "web.log"
    assert mode(log) == 0o600
    assert "<secret:serve_auth>" in log.read_text()

    again = out.run("apply", recipe, "--json", *common)
    assert step_of(again)["status"] == "ok", again
    out.run("status", recipe, "--json", *common)
    out.run("status", recipe, "-v", *common)

    # -e gives the marked variable another value: a change, and the server gets the new one.
    proof.unlink()
    changed = out.run("apply", recipe, "-e", f"serve_auth={auth_e}", "--json", "-v", *common)
    assert step_of(changed)["status"] == "changed", changed
    assert read_proof(proof)["argv"][1] == auth_e
    assert step_of(changed)["details"]["replaced"]["pid"] == shown["pid"]
    same = out.run("apply", recipe, "-e", f"serve_auth={auth_e}", "--json", "--log-format", "json", *common)
    assert step_of(same)["status"] == "ok", same

    # Rollback restarts the replaced server from the recipe's values (none were stored).
    proof.unlink()
    back = out.run("rollback", recipe, "--json", "--log-format", "json", *common)
    assert "restarted the server it replaced" in step_of(back)["message"], back
    assert read_proof(proof)["argv"][1] == auth
    assert mode(log) == 0o600
    out.run("history", "--json", *common)
    out.run("history", "-v", *common)
    # the first run's server was restarted under a new pid: only --force stops it
    assert "--force stops it" in step_of(out.run("rollback", recipe, "--json", *common, expect=1))["message"]
    out.run("rollback", recipe, "--force", "--json", *common)
    out.assert_clean(plain, auth, auth_e, token)


def test_an_env_change_is_a_change_and_rollback_needs_the_values_it_ran_with(web) -> None:
    tmp, state = web
    before, after, token, auth = secret("before"), secret("after"), secret("token"), secret("auth")
    port, proof = free_port(), tmp / "outside" / "proof.json"
    proof.parent.mkdir()
    path = tmp / "web.yaml"
    recipe = str(launch_recipe(path, port, proof, before, token, auth, argv_secrets=False))
    common = ["--state-dir", str(state)]
    out = Outputs(state)

    first = out.run("apply", recipe, "--json", *common)
    assert step_of(first)["status"] == "changed", first
    assert read_proof(proof)["env"]["PLAIN_SETTING"] == before
    assert read_proof(proof)["argv"] == []  # the secrets are in env only: argv is no help to the hash

    launch_recipe(path, port, proof, after, token, auth, argv_secrets=False)  # only an env value differs
    planned = out.run("plan", recipe, "--json", *common)
    assert step_of(planned)["status"] == "changed", planned
    assert "a different command runs" in step_of(planned)["message"]
    proof.unlink()
    second = out.run("apply", recipe, "--json", *common)
    assert step_of(second)["status"] == "changed", second
    assert read_proof(proof)["env"]["PLAIN_SETTING"] == after
    assert step_of(out.run("apply", recipe, "--json", *common))["status"] == "ok"

    # The replaced server ran with `before`, which the journal does not hold: with this recipe
    # rollback stops the new server and refuses to restart the old one with other values.
    refused = out.run("rollback", recipe, "--json", *common, expect=1)
    message = step_of(refused)["message"]
    assert "stopped web" in message and "not restarted" in message and "PLAIN_SETTING" in message, refused
    second_pid = step_of(second)["details"]["servers"][0]["pid"]
    time.sleep(0.2)
    assert not alive(second_pid)

    # Given the values it ran with, a second rollback restarts it.
    launch_recipe(path, port, proof, before, token, auth, argv_secrets=False)
    proof.unlink()
    back = out.run("rollback", recipe, "--json", *common)
    assert "restarted the server it replaced" in step_of(back)["message"], back
    assert read_proof(proof)["env"]["PLAIN_SETTING"] == before
    out.run("rollback", recipe, "--force", "--json", *common)
    out.assert_clean(before, after, token, auth)


def test_a_failed_launch_quotes_its_log_without_the_secrets(web) -> None:
    tmp, state = web
    token, auth, pinned = secret("token"), secret("auth"), secret("pin")
    custom_log = tmp / "logs" / "dies.log"
    recipe = {
        "name": "dies",
        "secrets": ["db_auth"],
        "vars": {"hf_token": token, "db_auth": auth},
        "steps": [{"name": "dies", "launch": {
            # the server itself prints a secret it was given (patchkit cannot stop that being
            # in its log), then dies: the step's message quotes the log
            "command": [sys.executable, "-c", "import sys; print('Error: bad token ' + sys.argv[1]); sys.exit(3)",
                        "{{ hf_token }}", "{{ db_auth }}", "--api-key", pinned],
            "log": str(custom_log),
            "health": {"url": f"http://127.0.0.1:{free_port()}/", "timeout_s": 30, "interval_s": 0.2},
        }}],
    }
    path = tmp / "dies.yaml"
    path.write_text(json.dumps(recipe))
    common = ["--state-dir", str(state)]
    out = Outputs(state, extra_files=(custom_log,))

    failed = out.run("apply", str(path), "--json", "--log-format", "json", *common, expect=1)
    message = step_of(failed)["message"]
    assert "exit status 3" in message and "Error: bad token <secret:hf_token>" in message, failed
    assert "<secret:db_auth> --api-key <secret:api-key>" in message.replace("'", "").replace(",", ""), message
    assert "step.done" in failed.stderr  # the JSON log has the message too
    out.run("apply", str(path), "-v", *common, expect=1)  # console log and the human table
    out.run("history", *common)
    assert mode(custom_log) == 0o600

    # A command that cannot start at all names its program, redacted.
    recipe["steps"][0]["launch"]["command"] = [str(tmp / f"no-such-{token}"), "{{ db_auth }}"]
    path.write_text(json.dumps(recipe))
    cannot = out.run("apply", str(path), "--json", *common, expect=1)
    assert "cannot start" in step_of(cannot)["message"] and "<secret:hf_token>" in step_of(cannot)["message"]

    def without_the_servers_own_output(where: str, data: bytes) -> bytes:
        # only lines patchkit wrote; the server's own "Error: bad token ..." is its business
        if where == str(custom_log):
            return b"\n".join(line for line in data.splitlines() if line.startswith(b"=== patchkit"))
        return data

    assert custom_log.read_bytes().count(token.encode()) == 2  # what the server printed, twice
    out.assert_clean(token, auth, pinned, allow=without_the_servers_own_output)


def test_patch_and_check_secrets_stay_out_of_diffs_messages_and_journal(sandbox: Sandbox, tmp_path: Path) -> None:
    api_key = secret("apikey")
    recipe = tmp_path / "toy.yaml"
    recipe.write_text(json.dumps({
        "name": "toysecret",
        "vars": {"api_key": api_key},
        "steps": [
            {"name": "set-key", "patch": {"package": "toyllm", "modules": ["toyllm.config.model"],
                                          "edit": {"set_value": {"names": ["_FLOAT16_DTYPES"],
                                                                 "value": ["float16", "{{ api_key }}"]}}}},
            {"name": "key-check", "check": {"python": "print('key is {{ api_key }}')"}},
        ],
    }))
    out = Outputs(sandbox.state)
    args = ["-i", str(sandbox.inventory), "-e", f"python={sandbox.python}"]
    plan = out.run("plan", str(recipe), *args)
    assert "<secret:api_key>" in plan.stdout, plan
    applied = out.run("apply", str(recipe), "--json", "--log-format", "json", *args)
    steps = {s["name"]: s for s in applied.json()["hosts"]["local"]["steps"]}
    assert "<secret:api_key>" in steps["set-key"]["diff"] and steps["key-check"]["message"] == \
        "passed: key is <secret:api_key>", applied
    assert api_key in sandbox.file("toyllm/config/model.py").read_text()  # the host has the real value
    out.run("status", str(recipe), "--json", *args)
    out.run("rollback", str(recipe), "-v", *args)
    out.run("history", *args)
    assert api_key not in sandbox.file("toyllm/config/model.py").read_text()
    out.assert_clean(api_key)


def test_recipe_errors_do_not_echo_secret_values(tmp_path: Path) -> None:
    token = secret("dest")
    recipe = tmp_path / "bad.yaml"
    recipe.write_text(json.dumps({
        "name": "bad", "vars": {"hf_token": token},
        "steps": [{"name": "d", "deploy": {"src": ".", "dest": "{{ hf_token }}"}}],
    }))
    result = run_patchkit("validate", str(recipe))
    assert result.returncode == 2 and "dest '<secret:hf_token>' must be an absolute path" in result.stderr, result
    assert token not in result.stderr + result.stdout

    # a name under `secrets:` that is no variable is a typo that would leak: an error at its place
    recipe.write_text("name: bad\nvars: {db_pass: x}\nsecrets: [db_pas]\n"
                      "steps: [{name: c, check: {python: 'pass'}}]\n")
    result = run_patchkit("validate", str(recipe))
    assert result.returncode == 2 and f"{recipe}:3:" in result.stderr and "'db_pas'" in result.stderr, result


def test_which_names_are_secret_and_placeholders_round_trip() -> None:
    from patchkit.recipe.redact import Redactor, find_secrets, is_secret_name

    assert all(map(is_secret_name, ["hf_token", "HF_TOKEN", "apikey", "--api-key", "db_password", "client_secret"]))
    # settings whose small values would garble every message if they were redacted
    assert not any(map(is_secret_name, ["max_tokens", "tokenizer", "--max-num-batched-tokens", "port"]))
    found = find_secrets({"hf_token": "tok", "max_tokens": 8, "auth": "aaa", "flag": True}, ["auth"],
                         commands=[["serve", "--api-key", "k1", "--use-api-key", "--port", "1", "--token=k2"]],
                         envs=[{"OPENAI_API_KEY": "k3", "VLLM_CPU_KVCACHE_SPACE": "1"}])
    assert found == {"hf_token": "tok", "auth": "aaa", "api-key": "k1", "token": "k2", "OPENAI_API_KEY": "k3"}
    redactor = Redactor({"outer": "ab-secret-cd", "inner": "secret"})
    shown = redactor.text("x=ab-secret-cd y=secret")
    assert shown == "x=<secret:outer> y=<secret:inner>"
    assert redactor.reveal(shown) == ("x=ab-secret-cd y=secret", [])
    assert Redactor().reveal(shown)[1] == ["outer", "inner"]


# Answers health and /v1/models; a completion fails with a body whose 300-character cut
# (what a step message quotes) falls inside the secret.
CLIPPING_SERVER = """\
import http.server, json, sys
port, token = int(sys.argv[1]), sys.argv[2]
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"data": [{"id": "m"}]}).encode() if self.path == "/v1/models" else b"ok"
        self.send_response(200); self.end_headers(); self.wfile.write(body)
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(500); self.end_headers(); self.wfile.write(("x" * 280 + token).encode())
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


def test_cut_outputs_never_keep_half_a_secret(web) -> None:
    tmp, state = web
    token = secret("clip")
    half = len(token) // 2
    script = tmp / "clipping.py"
    script.write_text(CLIPPING_SERVER)
    port = free_port()
    common = ["--state-dir", str(state)]
    out = Outputs(state)

    def recipe(name: str, launch: dict[str, Any]) -> str:
        path = tmp / f"{name}.yaml"
        launch = {"health": {"url": f"http://127.0.0.1:{port}/health", "timeout_s": 30, "interval_s": 0.2},
                  "log": str(tmp / "server-logs" / f"{name}.log"), **launch}  # its own output: not scanned
        path.write_text(json.dumps({"name": name, "vars": {"hf_token": token},
                                    "steps": [{"name": name, "launch": launch}]}))
        return str(path)

    clipped = out.run("apply", recipe("smoke", {
        "command": [sys.executable, str(script), str(port), "{{ hf_token }}"],
        "ready": {"completion": {"prompt": "Hello"}}}), "--json", *common, expect=1)
    assert "smoke completion failed: 500: xxx" in step_of(clipped)["message"], clipped

    # The log's last 64 KiB start in the middle of the secret the server printed.
    filler = 64 * 1024 - (len(token) - half) - 2
    code = f"import sys; print('token ' + sys.argv[1]); print('.' * {filler}); sys.exit(3)"
    cut = out.run("apply", recipe("tail", {"command": [sys.executable, "-c", code, "{{ hf_token }}"]}),
                  "--json", "--log-format", "json", *common, expect=1)
    assert "exit status 3" in step_of(cut)["message"], cut
    assert (tmp / "server-logs" / "tail.log").read_text().count(token) == 1
    out.assert_clean(token[:half], token[half:])


def test_a_record_from_an_older_patchkit_leaves_its_env_values_behind(web) -> None:
    """Records written before this fix hold env values: replacing that server journals the names only."""
    tmp, state = web
    legacy_value = secret("legacy")
    import subprocess

    old = subprocess.Popen(["sleep", "120"], start_new_session=True)
    try:
        proc_start = int(Path(f"/proc/{old.pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        (state / "launch").mkdir(parents=True)
        (state / "launch" / "web.json").write_text(json.dumps({
            "name": "web", "pid": old.pid, "proc_start": proc_start, "argv": ["sleep", "120"],
            "env": {"LEGACY_SETTING": legacy_value}, "cwd": None, "log": str(tmp / "old.log"),
            "command_hash": "0" * 64, "started": time.time()}))
        port, proof = free_port(), tmp / "outside" / "proof.json"
        proof.parent.mkdir()
        recipe = str(launch_recipe(tmp / "web.yaml", port, proof, secret("plain"), secret("tok"), secret("auth")))
        out = Outputs(state)
        replaced = out.run("apply", recipe, "--json", "--state-dir", str(state))
        record = step_of(replaced)["details"]["replaced"]
        assert record["pid"] == old.pid and record["env_names"] == ["LEGACY_SETTING"] and "env" not in record
        old.wait(timeout=10)  # it was stopped
        out.assert_clean(legacy_value)
    finally:
        old.kill()
        old.wait()
