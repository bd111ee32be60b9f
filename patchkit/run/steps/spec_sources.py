"""Where a speculative-decoding gate gets its counts: one source per serving engine.

The gate (launch.measure and the statistics of gate_stats) is the same for every engine: it
sends its prompts, asks the source for an `Acceptance` (drafts, drafted and accepted tokens,
per-position rates) over exactly those requests, and judges it. A source says how to ask:

- vLLM: OpenAI `/v1/completions`; acceptance is what vLLM's Prometheus counters
  (`vllm:spec_decode_num_*`) moved by between before and after the gate's requests.
- SGLang: native `/generate`, whose `meta_info` carries each request's own figures
  (`completion_tokens`, `spec_verify_ct`, the accepted count and a histogram of accepted
  drafts per verify step, whose names differ between releases). Summed over the gate's
  requests, that is exact; SGLang's lifetime or windowed averages (`/metrics` gauges,
  `/get_server_info`) are only read to cross-check it.

Which engine a launch runs is its `engine:`, or recognized from its command
(`engine_of`). A new engine is a new source class and one line in SOURCES.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, Literal

from patchkit.host.agent.protocol import HTTP, HttpReply, HttpRequest
from patchkit.run.steps.gate_stats import Acceptance

if TYPE_CHECKING:
    from patchkit.host.agent.client import AgentClient

Engine = Literal["vllm", "sglang"]

DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
DRAFTS = "vllm:spec_decode_num_drafts_total"
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"  # label `position`, 0-based

SGLANG_ACCEPT_LENGTH = "sglang:spec_accept_length"  # a gauge over SGLang's last logging window


def engine_of(command: list[str], explicit: Engine | None) -> Engine:
    """The launch's `engine:`; else SGLang when the command runs `sglang.launch_server` (as a
    module) or an `sglang` executable (`sglang serve`, `python -m sglang...`), vLLM otherwise."""
    if explicit is not None:
        return explicit
    for word in command:
        base = word.rsplit("/", 1)[-1]
        if base == "sglang" or base.startswith("sglang."):
            return "sglang"
    return "vllm"


def parse_prometheus(text: str) -> dict[str, float]:
    """Sum of every sample per metric name (labels folded), e.g. over engines."""
    totals: dict[str, float] = {}
    for name, _, value in _samples(text):
        totals[name] = totals.get(name, 0.0) + value
    return totals


def _samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of each sample of a Prometheus text exposition."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, rest = line.rpartition("}") if "}" in line else ("", "", line)
        if head:
            name, _, label_text = head.partition("{")
        else:
            name, _, rest = line.partition(" ")
            label_text = ""
        try:
            value = float(rest.split()[0])
        except (IndexError, ValueError):
            continue
        labels = dict(_LABEL.findall(label_text))
        out.append((name.strip(), labels, value))
    return out


_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def per_position(text: str) -> dict[int, float]:
    """position -> accepted tokens at that draft position (0-based), summed over engines."""
    out: dict[int, float] = {}
    for name, labels, value in _samples(text):
        if name in (PER_POSITION, PER_POSITION + "_total") and labels.get("position", "").isdigit():
            position = int(labels["position"])
            out[position] = out.get(position, 0.0) + value
    return out


def acceptance(before: str, after: str) -> Acceptance:
    """What vLLM's counters moved by between two /metrics texts."""
    b, a = parse_prometheus(before), parse_prometheus(after)

    def delta(name: str) -> float:
        return a.get(name, 0.0) - b.get(name, 0.0)

    drafts = delta(DRAFTS)
    pos_before, pos_after = per_position(before), per_position(after)
    rates = [(pos_after.get(i, 0.0) - pos_before.get(i, 0.0)) / drafts for i in sorted(pos_after)] \
        if pos_after and drafts > 0 else None
    return Acceptance(delta(DRAFT_TOKENS), delta(ACCEPTED), drafts, rates)


def base_url(url: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


async def _get(agent: AgentClient, url: str) -> HttpReply:
    return await agent.call(HTTP({"method": "GET", "url": url}), reply_wait=60)


async def served_model_ids(agent: AgentClient, url: str) -> list[str]:
    """The ids /v1/models lists (vLLM and SGLang both serve it); GateFailed-worthy ValueError otherwise."""
    reply = await _get(agent, base_url(url) + "/v1/models")
    if reply.get("status") != 200:
        raise ValueError(f"/v1/models answered {reply.get('status') or reply.get('error')}")
    return [m.get("id") for m in json.loads(reply["body"]).get("data", [])]


class CountSource:
    """How one engine's gate requests are made and counted; one instance per measurement."""

    engine: Engine
    no_drafts = ""  # why "no draft tokens were proposed" may be, in the engine's words

    def __init__(self, agent: AgentClient, url: str) -> None:
        self.agent, self.root = agent, base_url(url)

    async def start(self, model: str | None) -> None:
        """Before the first request: what the counts are measured from."""

    def request(self, prompt: str, max_tokens: int, temperature: float, seed: int | None) -> HttpRequest:
        raise NotImplementedError

    def completion_tokens(self, body: dict[str, Any]) -> int:
        raise NotImplementedError

    def add(self, bodies: list[dict[str, Any]]) -> None:
        """Take the answers to one batch of the gate's requests into account."""

    async def acceptance(self) -> Acceptance | None:
        """Over every request so far; None when the engine has no counts to give."""
        raise NotImplementedError

    async def cross_check(self, measured: Acceptance) -> dict[str, Any]:
        """The engine's own summary figures, to compare with the gate's exact ones."""
        return {}


class VllmCounts(CountSource):
    engine = "vllm"
    no_drafts = f"({DRAFT_TOKENS} did not move)"

    async def start(self, model: str | None) -> None:
        self.model = model or (await served_model_ids(self.agent, self.root))[0]
        self.before = await _get(self.agent, self.root + "/metrics")

    def request(self, prompt: str, max_tokens: int, temperature: float, seed: int | None) -> HttpRequest:
        body: dict[str, Any] = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens,
                                "temperature": temperature}
        if seed is not None:
            body["seed"] = seed
        return {"method": "POST", "url": self.root + "/v1/completions", "body": body}

    def completion_tokens(self, body: dict[str, Any]) -> int:
        return int(body.get("usage", {}).get("completion_tokens", 0))

    async def acceptance(self) -> Acceptance | None:
        after = await _get(self.agent, self.root + "/metrics")
        if self.before.get("status") != 200 or after.get("status") != 200:
            return None
        return acceptance(self.before["body"], after["body"])


# meta_info names by SGLang release (sglang/srt/managers/tokenizer_manager.py,
# _calculate_spec_decoding_metrics): 0.5.10 spec_accept_token_num / spec_draft_token_num /
# spec_accept_histogram; 0.5.23 spec_num_correct_drafts / spec_num_proposed_drafts /
# spec_correct_drafts_histogram. Both count accepted draft tokens without the bonus token.
_ACCEPTED_KEYS = ("spec_num_correct_drafts", "spec_accept_token_num")
_PROPOSED_KEYS = ("spec_num_proposed_drafts", "spec_draft_token_num")
_HISTOGRAM_KEYS = ("spec_correct_drafts_histogram", "spec_accept_histogram")


def _first(meta: dict[str, Any], keys: tuple[str, ...]) -> Any:
    return next((meta[k] for k in keys if meta.get(k) is not None), None)


class SglangCounts(CountSource):
    engine = "sglang"
    no_drafts = "(no `spec_verify_ct` in /generate's meta_info: was SGLang started with --speculative-algorithm?)"

    async def start(self, model: str | None) -> None:
        self.drafts = self.draft_tokens = self.accepted = 0.0
        self.histogram: list[float] = []
        self.k: float | None = None  # draft tokens a verify step checks, from /get_server_info
        info = await _get(self.agent, self.root + "/get_server_info")
        if info.get("status") == 200:
            try:
                n = json.loads(info["body"]).get("speculative_num_draft_tokens")
            except ValueError:
                n = None
            self.k = float(n - 1) if isinstance(n, (int, float)) and n > 1 else None

    def request(self, prompt: str, max_tokens: int, temperature: float, seed: int | None) -> HttpRequest:
        params: dict[str, Any] = {"max_new_tokens": max_tokens, "temperature": temperature}
        if seed is not None:
            params["sampling_seed"] = seed  # SGLang refuses unknown sampling_params keys such as `seed`
        return {"method": "POST", "url": self.root + "/generate", "body": {"text": prompt, "sampling_params": params}}

    def completion_tokens(self, body: dict[str, Any]) -> int:
        return int((body.get("meta_info") or {}).get("completion_tokens", 0))

    def add(self, bodies: list[dict[str, Any]]) -> None:
        for body in bodies:
            meta = body.get("meta_info") or {}
            verify = meta.get("spec_verify_ct")
            if not isinstance(verify, (int, float)) or verify <= 0:
                continue
            accepted = _first(meta, _ACCEPTED_KEYS)
            if accepted is None:  # each verify step yields its accepted drafts and one token of its own
                accepted = max(0, meta.get("completion_tokens", 0) - verify)
            proposed = _first(meta, _PROPOSED_KEYS)
            if proposed is None and self.k is not None:
                proposed = verify * self.k
            self.drafts += verify
            self.accepted += accepted
            self.draft_tokens += proposed if proposed is not None else 0.0
            for j, steps in enumerate(_first(meta, _HISTOGRAM_KEYS) or []):
                if j >= len(self.histogram):
                    self.histogram.extend([0.0] * (j + 1 - len(self.histogram)))
                self.histogram[j] += steps

    async def acceptance(self) -> Acceptance | None:
        if self.drafts > 0 and self.draft_tokens <= 0:
            return None  # accepted counts, but nothing tells how many tokens were drafted
        k = round(self.draft_tokens / self.drafts) if self.drafts else 0
        rates = None
        if self.histogram and sum(self.histogram) == self.drafts and k >= 1:
            # histogram[j]: verify steps that accepted exactly j drafts; position i is accepted when j > i
            rates = [sum(self.histogram[i + 1:]) / self.drafts for i in range(k)]
        return Acceptance(self.draft_tokens, self.accepted, self.drafts, rates)

    async def cross_check(self, measured: Acceptance) -> dict[str, Any]:
        out: dict[str, Any] = {}
        metrics = await _get(self.agent, self.root + "/metrics")  # 404 unless --enable-metrics
        if metrics.get("status") == 200:
            gauges = [v for name, _, v in _samples(metrics.get("body", "")) if name == SGLANG_ACCEPT_LENGTH]
            if gauges:
                out["metrics_spec_accept_length"] = round(sum(gauges) / len(gauges), 3)
        info = await _get(self.agent, self.root + "/get_server_info")
        if info.get("status") == 200:
            try:
                states = json.loads(info["body"]).get("internal_states") or [{}]
            except ValueError:
                states = [{}]
            lifetime = states[0].get("avg_spec_accept_length") if isinstance(states[0], dict) else None
            if isinstance(lifetime, (int, float)):
                out["server_avg_spec_accept_length"] = round(lifetime, 3)
        return out


SOURCES: dict[Engine, type[CountSource]] = {"vllm": VllmCounts, "sglang": SglangCounts}


def count_source(engine: Engine, agent: AgentClient, url: str) -> CountSource:
    return SOURCES[engine](agent, url)
