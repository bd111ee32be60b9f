"""The shipped SGLang recipe, unchanged, against a FAKE SGLang server (fixtures/fake_sglang_pkg:
SGLang's HTTP surface in its own names and shapes, no model; SGLang's wheels need a GPU).

The acceptance gate counts exactly the gate's own /generate requests from their meta_info; the
fake's acceptance is set by the environment (FAKE_SGLANG_ACCEPT: the chance that a draft token
is accepted once the ones before it were). A fitting drafter passes with its figures in the JSON
and on the review page; one at ~15% acceptance fails and its server is stopped; a drop against
the last passing gate fails naming both runs.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from tests.agent.test_launch_local import alive, free_port
from tests.helpers import PATCHKIT, REPO

RECIPE = REPO / "recipes" / "kimi_eagle3_sglang.yaml"


@pytest.fixture
def sglang_host(tmp_path: Path):
    """run(command, accept, *extra) -> (exit code, JSON report, stderr) of the shipped recipe on a
    local host whose python has the fake sglang, a Kimi-K2.5-shaped target and a fitting drafter."""
    from fixtures.fake_sglang import fake_sglang_env
    from fixtures.make_drafter import kimi_k25_config, make_drafter, write_config

    python = fake_sglang_env(tmp_path / "env")
    target = write_config(tmp_path / "models" / "kimi-k2.5", kimi_k25_config())
    drafter = make_drafter(tmp_path / "drafter-src", "valid")
    state, port = tmp_path / "state", free_port()
    variables = {"python": str(python), "target_model": str(target), "drafter_src": str(drafter),
                 "drafter_dest": str(tmp_path / "models" / "kimi-k25-eagle3"), "port": str(port), "tp": "1"}

    def run(command: str, accept: float, *extra: str, names: str = "0.5.10") -> tuple[int, dict, str]:
        env = {**os.environ, "FAKE_SGLANG_ACCEPT": str(accept), "FAKE_SGLANG_NAMES": names,
               "FAKE_SGLANG_STARTUP_S": "0.3"}
        args = [a for k, v in variables.items() for a in ("-e", f"{k}={v}")]
        proc = subprocess.run([PATCHKIT, command, str(RECIPE), *args, *extra, "--json", "--state-dir", str(state)],
                              capture_output=True, text=True, timeout=300, env=env)
        assert "Traceback" not in proc.stderr, proc.stderr
        return proc.returncode, json.loads(proc.stdout), proc.stderr

    run.variables = variables  # type: ignore[attr-defined]
    yield run
    for record in (state / "launch").glob("*.json"):
        try:
            os.killpg(json.loads(record.read_text())["pid"], signal.SIGKILL)
        except (ProcessLookupError, ValueError, KeyError):
            pass


def steps(report: dict) -> dict[str, dict]:
    return {s["name"]: s for s in report["hosts"]["local"]["steps"]}


def test_a_fitting_drafter_passes_with_its_figures_in_the_json_and_on_the_review_page(sglang_host,
                                                                                       tmp_path: Path) -> None:
    page = tmp_path / "review.html"
    code, report, _ = sglang_host("apply", 0.7, "--html", str(page))
    done = steps(report)
    assert code == 0, done
    assert done["sglang-preflight"]["status"] == "ok", done["sglang-preflight"]
    assert "KimiK25ForConditionalGeneration (sglang/srt/models/kimi_k25.py) captures EAGLE-3 layers" in \
        done["sglang-preflight"]["message"]
    serve = done["serve"]
    measured = serve["details"]["spec_decode"]
    assert measured["engine"] == "sglang"
    # 128 tokens a request, 8 prompts, 3 drafts a verify step (--speculative-num-draft-tokens 4)
    assert measured["prompts_sent"] == 8 and measured["completion_tokens"] == 8 * 128, measured
    assert measured["draft_tokens"] == 3 * measured["drafts"] >= 300, measured
    # every verify step yields its accepted drafts and one token (the last one cut at max_tokens)
    assert measured["drafts"] + measured["accepted_tokens"] >= 8 * 128
    # p = 0.7 per position given the ones before: rates 0.7, 0.49, 0.343 (mean 0.511)
    low, high = measured["acceptance_interval"]
    assert low < 0.511 < high and 0.42 < measured["acceptance_rate"] < 0.6, measured
    first, second, third = measured["per_position"]
    assert first > second > third and 0.6 < first < 0.8, measured
    assert measured["mean_acceptance_length"] == pytest.approx(1 + 3 * measured["acceptance_rate"])
    # SGLang's own lifetime figure is read and shown beside the gate's exact one
    assert "server_avg_spec_accept_length" in measured["engine_figures"], measured
    assert re.search(r"acceptance \d\d\.\d% \(95% CI .*\), mean acceptance length 2\.\d\d \(per position 0\.\d\d, "
                     r"0\.\d\d, 0\.\d\d\)", serve["message"]), serve["message"]
    assert "SGLang's own figures: its server-lifetime avg_spec_accept_length" in serve["message"]
    html = page.read_text()
    assert f"acceptance_rate: {measured['acceptance_rate']}" in html, html[-3000:]
    assert "engine: sglang" in html


def test_a_drafter_at_15_percent_fails_the_gate_and_its_server_is_stopped(sglang_host) -> None:
    code, report, _ = sglang_host("apply", 0.31)
    serve = steps(report)["serve"]
    assert code == 1 and serve["status"] == "failed", serve
    assert re.search(r"acceptance rate 1\d\.\d\d% \(95% CI .*\) is below 30%: the interval's upper bound is "
                     r"\(fail_when: upper\) \(\d+ of \d+ drafted tokens accepted over 8 prompts\)",
                     serve["message"]), serve["message"]
    details = serve["details"]
    assert details["stopped_after_failure"] is True, details
    assert not alive(details["servers"][0]["pid"])
    assert 1.3 < details["spec_decode"]["mean_acceptance_length"] < 1.6


def test_a_regression_against_the_last_good_gate_fails_naming_both_runs(sglang_host) -> None:
    code, report, _ = sglang_host("apply", 0.8)
    good = report["run_id"]
    assert code == 0, steps(report)["serve"]
    # Another port restarts the server (same model, drafter and prompts: comparable); it answers
    # with 0.5.23's meta_info names (same statistics), worse but above the fixed bar of 20%.
    code, report, _ = sglang_host("apply", 0.55, "-e", f"port={free_port()}", "-e", "min_acceptance=0.2",
                                  names="0.5.23")
    serve = steps(report)["serve"]
    assert code == 1 and serve["status"] == "failed", serve
    assert f"in run {report['run_id']} is more than 10% below run {good}'s" in serve["message"], serve["message"]
    assert serve["details"]["spec_decode"]["regression_baseline"]["run_id"] == good


def test_sglang_s_gauge_is_read_beside_the_exact_figure_and_engine_decides_the_source(tmp_path: Path) -> None:
    """With --enable-metrics the gauge sglang:spec_accept_length is read too; `engine: vllm` on the same
    server reads vLLM's counters, which SGLang does not have; without speculation nothing was drafted."""
    from fixtures.fake_sglang import fake_sglang_env
    from fixtures.make_drafter import make_drafter
    from tests.agent.test_launch_local import patchkit

    python = fake_sglang_env(tmp_path / "env")
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}))
    drafter = make_drafter(tmp_path / "drafter", "valid")
    state = tmp_path / "state"

    def recipe(name: str, spec: bool = True, **launch: object) -> Path:
        port = free_port()
        command = [str(python), "-m", "sglang.launch_server", "--model-path", str(target), "--port", str(port),
                   "--enable-metrics"]
        if spec:
            command += ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(drafter),
                        "--speculative-num-draft-tokens", "4"]
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"name": name, "steps": [{"name": "serve", "launch": {
            "command": command, "health": {"url": f"http://127.0.0.1:{port}/health_generate", "timeout_s": 20,
                                           "interval_s": 0.2},
            "spec_decode": {"max_tokens": 32, "min_draft_tokens": 60, "seed": 7}, **launch}}]}))
        return path

    try:
        code, report = patchkit(state, "apply", str(recipe("gauge")))
        serve = report["hosts"]["local"]["steps"][0]
        assert code == 0, serve
        figures = serve["details"]["spec_decode"]["engine_figures"]
        assert set(figures) == {"metrics_spec_accept_length", "server_avg_spec_accept_length"}, figures
        assert "its /metrics gauge sglang:spec_accept_length" in serve["message"], serve["message"]

        code, report = patchkit(state, "apply", str(recipe("as-vllm", engine="vllm")))
        serve = report["hosts"]["local"]["steps"][0]
        assert code == 1 and "no draft tokens were proposed: is speculative decoding on? " \
            "(vllm:spec_decode_num_draft_tokens_total did not move)" in serve["message"], serve["message"]

        code, report = patchkit(state, "apply", str(recipe("plain", spec=False)))
        serve = report["hosts"]["local"]["steps"][0]
        assert code == 1 and "(no `spec_verify_ct` in /generate's meta_info: was SGLang started with " \
            "--speculative-algorithm?)" in serve["message"], serve["message"]
    finally:
        for record in (state / "launch").glob("*.json"):
            try:
                os.killpg(json.loads(record.read_text())["pid"], signal.SIGKILL)
            except (ProcessLookupError, ValueError, KeyError):
                pass


def test_a_check_that_reads_by_pattern_is_not_tested_on_an_installed_release(tmp_path: Path) -> None:
    """`--versions installed` reads named files through the agent: a step reading `sglang/srt/models/*.py`
    cannot be laid out from them, and the matrix says so instead of judging a release it cannot see."""
    from fixtures.fake_sglang import fake_sglang_env
    from tests.helpers import run_patchkit

    python = fake_sglang_env(tmp_path / "env")
    result = run_patchkit("test", str(RECIPE), "--versions", "installed", "-e", f"python={python}", "--json",
                          timeout=120)
    assert result.returncode == 1, result
    cells = result.json()["steps"]["sglang-preflight"]["releases"]
    [cell] = cells.values()
    assert cell["status"] == "error", cell
    assert "a step reads files by pattern (sglang/srt/models/*.py); --versions installed reads named files " \
           "only: test it on the index's releases" in cell["message"], cell


def test_the_fake_answers_sglang_s_routes_in_sglang_s_shapes(tmp_path: Path) -> None:
    """The fake itself (what the tests above rely on): 503 while starting, then SGLang's routes."""
    import time
    import urllib.error
    import urllib.request

    from fixtures.fake_sglang import fake_sglang_env
    from fixtures.make_drafter import kimi_k25_config, write_config

    python = fake_sglang_env(tmp_path / "env")
    target = write_config(tmp_path / "kimi", kimi_k25_config())
    port = free_port()
    proc = subprocess.Popen([str(python), "-m", "sglang.launch_server", "--model-path", str(target), "--port",
                             str(port)], env={**os.environ, "FAKE_SGLANG_STARTUP_S": "1.5"},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    root = f"http://127.0.0.1:{port}"

    def call(path: str, body: dict | None = None) -> tuple[int, str]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(root + path, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    status = None
    try:
        for _ in range(50):
            try:
                status, _ = call("/health_generate")
                break
            except urllib.error.URLError:
                time.sleep(0.1)
        assert status == 503  # starting
        time.sleep(1.6)
        assert call("/health")[0] == call("/health_generate")[0] == 200
        info = json.loads(call("/get_model_info")[1])
        assert info["architectures"] == ["KimiK25ForConditionalGeneration"] and info["model_type"] == "kimi_k25"
        server = json.loads(call("/get_server_info")[1])
        assert server["version"] == "0.5.10+fake" and server["speculative_algorithm"] is None
        assert call("/metrics")[0] == 404  # only with --enable-metrics, as SGLang
        status, text = call("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 5, "seed": 1}})
        assert status == 400 and "seed" in text  # unknown sampling params are refused
        answer = json.loads(call("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 5}})[1])
        assert answer["meta_info"]["completion_tokens"] == 5 and "spec_verify_ct" not in answer["meta_info"]
        chat = json.loads(call("/v1/chat/completions", {"model": str(target), "max_tokens": 3,
                                                        "messages": [{"role": "user", "content": "hi"}]})[1])
        assert chat["object"] == "chat.completion" and chat["usage"]["completion_tokens"] == 3
        assert chat["choices"][0]["message"]["role"] == "assistant"
        models = json.loads(call("/v1/models")[1])
        assert models["data"][0]["id"] == str(target) and models["data"][0]["owned_by"] == "sglang"
    finally:
        proc.kill()
        proc.wait()
