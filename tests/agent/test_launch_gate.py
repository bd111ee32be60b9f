"""The speculative-decoding gate's rules with a small real HTTP server that speaks the parts
of vLLM's API the gate reads (/v1/models, /v1/completions, /metrics with the spec-decode
counters), its acceptance rate set by the environment. Real vLLM: tests/real/test_launch_vllm.py.

Enough evidence (keep sending prompts until min_draft_tokens), the 95% interval and
fail_when, per-position rates, the regression gate against the last passing run with the
same model, drafter and prompts, and prompts from a file.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from pathlib import Path

import pytest

from tests.agent.test_launch_local import free_port, patchkit

FAKE_VLLM = '''
import json, os, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

RATE = float(os.environ["FAKE_RATE"])  # every draft position accepted with this probability, all or nothing
counters = {"drafts": 0.0, "tokens": 0.0}


class Handler(BaseHTTPRequestHandler):
    def _send(self, data, kind="application/json"):
        data = data.encode()
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/metrics":
            d, t = counters["drafts"], counters["tokens"]
            lines = [f'vllm:spec_decode_num_drafts_total{{engine="0"}} {d}',
                     f'vllm:spec_decode_num_draft_tokens_total{{engine="0"}} {3 * d}',
                     f'vllm:spec_decode_num_accepted_tokens_total{{engine="0"}} {RATE * 3 * d}']
            lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",position="{i}"}} {RATE * d}'
                      for i in range(3)]
            self._send("\\n".join(lines) + "\\n", "text/plain")
        else:
            self._send(json.dumps({"data": [{"id": "m"}]}))

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        counters["drafts"] += 10
        self._send(json.dumps({"choices": [{"text": "x"}], "usage": {"completion_tokens": body["max_tokens"]}}))

    def log_message(self, *args):
        pass


HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
'''


@pytest.fixture
def gate(tmp_path: Path):
    """write(rate, **gate) -> a recipe serving the fake at that acceptance rate; run(...) -> (code, report)."""
    server = tmp_path / "fake_vllm.py"
    server.write_text(FAKE_VLLM)
    for name in ("target", "drafter"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps({"name": name}))
    port = free_port()
    state = tmp_path / "state"

    def write(rate: float, tag: str = "", **spec_decode: object) -> Path:
        """tag: another command (env), so the server restarts and the gate measures again."""
        config = json.dumps({"method": "eagle3", "model": str(tmp_path / "drafter"), "num_speculative_tokens": 3})
        recipe = {"name": "gate", "steps": [{"name": "serve", "launch": {
            "command": [sys.executable, str(server), str(port), "serve", str(tmp_path / "target"),
                        "--speculative-config", config],
            "env": {"FAKE_RATE": str(rate), "FAKE_TAG": tag},
            "health": {"url": f"http://127.0.0.1:{port}/v1/models", "timeout_s": 20, "interval_s": 0.2},
            "spec_decode": {"prompts": ["a", "b"], "max_tokens": 4, **spec_decode}}}]}
        path = tmp_path / f"gate-{rate}-{tag}-{len(spec_decode)}.yaml"
        path.write_text(json.dumps(recipe))
        return path

    def run(*args: str) -> tuple[int, dict]:
        return patchkit(state, *args)

    yield write, run
    for record in (state / "launch").glob("*.json"):
        try:
            os.killpg(json.loads(record.read_text())["pid"], signal.SIGKILL)
        except (ProcessLookupError, ValueError, KeyError):
            pass


def serve(report: dict) -> dict:
    return report["hosts"]["local"]["steps"][0]


def test_prompts_are_sent_until_enough_tokens_were_drafted(gate) -> None:
    write, run = gate
    code, report = run("apply", str(write(0.5, min_draft_tokens=900, max_prompts=100, min_acceptance_rate=0.3)))
    step = serve(report)
    assert code == 0, step
    measured = step["details"]["spec_decode"]
    # 30 drafted tokens a completion: 30 completions (the two prompts, again and again)
    assert measured["prompts_sent"] == 30 and measured["draft_tokens"] == 900, measured
    assert measured["per_position"] == [0.5, 0.5, 0.5]
    assert measured["mean_acceptance_length"] == 2.5
    low, high = measured["acceptance_interval"]
    assert low < 0.5 < high
    # all-or-nothing drafts: 300 drafts are 300 trials, not 900
    assert measured["effective_trials"] == 300
    assert "(per position 0.50, 0.50, 0.50)" in step["message"]

    # max_prompts caps it, and the message says the evidence fell short
    code, report = run("apply", str(write(0.5, "capped", min_draft_tokens=900, max_prompts=5)))
    step = serve(report)
    assert step["details"]["spec_decode"]["prompts_sent"] == 5, step
    assert "only 150 of the 900 drafted tokens asked for" in step["message"], step["message"]


def test_fail_when_upper_passes_what_lower_fails(gate) -> None:
    write, run = gate
    # 0.28 measured over 300 drafts: 95% CI about 23%-33%, so a bar of 30% is inside it
    code, report = run("apply", str(write(0.28, min_draft_tokens=900, min_acceptance_rate=0.3)))
    step = serve(report)
    assert code == 0 and step["status"] == "changed", step
    assert re.search(r"acceptance 28\.0% \(95% CI 2\d\.\d%-3\d\.\d%\)", step["message"]), step["message"]

    code, report = run("apply", str(write(0.28, "strict", min_draft_tokens=900, min_acceptance_rate=0.3,
                                             fail_when="lower")))
    step = serve(report)
    assert code == 1 and step["status"] == "failed", step
    assert re.search(r"acceptance rate 28\.00% \(95% CI 2\d\.\d%-3\d\.\d%\) is below 30%: the interval's lower "
                     r"bound is \(fail_when: lower\) \(252 of 900 drafted tokens accepted over 30 prompts\)",
                     step["message"]), step["message"]

    # far below: fails with upper too, the message saying so
    code, report = run("apply", str(write(0.1, min_draft_tokens=900, min_acceptance_rate=0.3)))
    step = serve(report)
    assert code == 1 and "the interval's upper bound is (fail_when: upper)" in step["message"], step["message"]


def test_a_regression_below_the_last_passing_run_fails_naming_it(gate) -> None:
    write, run = gate
    code, report = run("apply", str(write(0.6, min_draft_tokens=600, max_regression=0.1)))
    first = report["run_id"]
    step = serve(report)
    assert code == 0 and "no earlier passing gate" in step["message"], step
    identity = step["details"]["spec_decode"]["identity"]
    assert identity["model_sha256"] and identity["drafter_sha256"] and identity["prompts_sha256"]

    # Worse, and still far above any fixed bar: the regression gate catches it.
    code, report = run("apply", str(write(0.4, min_draft_tokens=600, max_regression=0.1, min_acceptance_rate=0.2)))
    step = serve(report)
    assert code == 1 and step["status"] == "failed", step
    assert f"in run {report['run_id']} is more than 10% below run {first}'s 60.0%" in step["message"], step["message"]
    assert "floor 54.0%" in step["message"]

    # status shows the last figures (the failed run's)
    code, report = run("status", str(write(0.6, min_draft_tokens=600, max_regression=0.1)))
    step = serve(report)
    assert re.search(r"last gate \(run \S+\): acceptance 40\.0% \(95% CI .*\), mean acceptance length 2\.20 "
                     r"\(per position 0\.40, 0\.40, 0\.40\), failed", step["message"]), step["message"]

    # As good again: passes, compared with the first run (the failed one is no baseline).
    code, report = run("apply", str(write(0.59, min_draft_tokens=600, max_regression=0.1)))
    step = serve(report)
    assert code == 0 and f"within 10% of run {first}'s 60.0%" in step["message"], step["message"]

    # Other prompts are another measurement: nothing to compare with.
    code, report = run("apply", str(write(0.4, min_draft_tokens=600, max_regression=0.1, max_tokens=5)))
    step = serve(report)
    assert code == 0 and "no earlier passing gate" in step["message"], step["message"]


def test_prompts_from_a_file_and_their_hash(gate, tmp_path: Path) -> None:
    write, run = gate
    listed = json.loads(write(0.5).read_text())
    (tmp_path / "prompts.txt").write_text("a\n\nb\n")
    from_file = json.loads(json.dumps(listed))
    del from_file["steps"][0]["launch"]["spec_decode"]["prompts"]
    from_file["steps"][0]["launch"]["spec_decode"]["prompts_file"] = "prompts.txt"
    path = tmp_path / "from_file.yaml"
    path.write_text(json.dumps(from_file))
    code, report = run("apply", str(write(0.5, "listed")))
    listed_hash = serve(report)["details"]["spec_decode"]["prompts_sha256"]
    code, report = run("apply", str(path))
    assert code == 0, report
    assert serve(report)["details"]["spec_decode"]["prompts_sha256"] == listed_hash

    from_file["steps"][0]["launch"]["spec_decode"]["prompts_file"] = "missing.txt"
    path.write_text(json.dumps(from_file))
    import subprocess

    from tests.helpers import PATCHKIT

    proc = subprocess.run([PATCHKIT, "validate", str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "steps[0].launch.spec_decode.prompts_file" in proc.stderr, proc.stderr
    assert "missing.txt" in proc.stderr
