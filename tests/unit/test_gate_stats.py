"""gate_stats.py and the launch gate's pure parts: intervals, verdicts, counters, identities."""

from __future__ import annotations

import math

import pytest

from patchkit.run.steps.gate_stats import (
    Acceptance,
    below,
    regressed,
    show_interval,
    wilson,
)
from patchkit.run.steps.launch import served_models
from patchkit.run.steps.spec_sources import acceptance, per_position


def test_wilson_interval_known_values() -> None:
    low, high = wilson(5, 10)
    assert (round(low, 4), round(high, 4)) == (0.2366, 0.7634)
    low, high = wilson(0, 10)
    assert low == 0 and round(high, 4) == 0.2775  # no successes: still an upper bound above 0
    low, high = wilson(10, 10)
    assert round(low, 4) == 0.7225 and high == 1
    assert wilson(0, 0) == (0.0, 1.0)
    # more trials, narrower
    assert wilson(290, 1000)[1] - wilson(290, 1000)[0] < wilson(29, 100)[1] - wilson(29, 100)[0]


def test_design_effect_follows_the_per_position_counters() -> None:
    # all-or-nothing drafts of 3: one draft is one trial, not three
    whole = Acceptance(draft_tokens=300, accepted_tokens=150, drafts=100, per_position=[0.5, 0.5, 0.5])
    assert whole.design_effect() == pytest.approx(3)
    assert whole.effective_trials() == pytest.approx(100)
    # geometric prefix acceptance: X in 0..3 with P(X>=i) = 0.5^i
    geo = Acceptance(draft_tokens=300, accepted_tokens=87.5, drafts=100, per_position=[0.5, 0.25, 0.125])
    rate = 0.875 / 3
    variance = (1 * 0.5 + 3 * 0.25 + 5 * 0.125) - 0.875 ** 2
    assert geo.design_effect() == pytest.approx(variance / (3 * rate * (1 - rate)))
    assert 1 < geo.design_effect() < 3
    # no per-position counters: the worst case
    blind = Acceptance(draft_tokens=300, accepted_tokens=87.5, drafts=100, per_position=None)
    assert blind.design_effect() == pytest.approx(3)
    a, b = geo.interval(), blind.interval()
    assert b[0] < a[0] < rate < a[1] < b[1]
    # nothing accepted: no variance, every token counts
    none = Acceptance(draft_tokens=300, accepted_tokens=0, drafts=100, per_position=[0, 0, 0])
    assert none.effective_trials() == 300 and none.interval()[1] < 0.02


def test_mean_acceptance_length_and_its_interval() -> None:
    full = Acceptance(draft_tokens=300, accepted_tokens=300, drafts=100, per_position=[1, 1, 1])
    assert full.mean_acceptance_length == 4 and full.rate == 1
    low, high = full.length_interval()  # type: ignore[misc]
    assert high == 4 and 3.9 < low < 4


def test_verdicts_upper_and_lower() -> None:
    interval = (0.26, 0.32)
    assert not below(interval, 0.30, "upper")  # could be above 0.30: not confidently bad
    assert below(interval, 0.30, "lower")  # not confidently good
    assert below(interval, 0.35, "upper") and not below(interval, 0.25, "lower")
    assert show_interval(interval) == "95% CI 26.0%-32.0%"
    # regression: more than 10% below 0.62 means below 0.558
    assert regressed((0.30, 0.40), 0.62, 0.10, "upper")
    assert not regressed((0.55, 0.60), 0.62, 0.10, "upper")
    assert regressed((0.55, 0.60), 0.62, 0.10, "lower")


METRICS_BEFORE = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 30.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 12.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 6.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 4.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 2.0
"""
METRICS_AFTER = """\
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 110.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 330.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 162.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 76.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 54.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 32.0
"""


def test_counters_per_position_from_prometheus_text() -> None:
    assert per_position(METRICS_AFTER) == {0: 76.0, 1: 54.0, 2: 32.0}
    moved = acceptance(METRICS_BEFORE, METRICS_AFTER)
    assert (moved.draft_tokens, moved.accepted_tokens, moved.drafts) == (300, 150, 100)
    assert moved.per_position == [0.7, 0.5, 0.3]
    assert moved.rate == 0.5 and moved.mean_acceptance_length == 2.5
    assert math.isclose(sum(moved.per_position), 1.5)  # accepted per draft, position by position


def test_the_models_a_command_serves() -> None:
    vllm = ["python", "-m", "vllm.entrypoints.cli.main", "serve", "/m/target", "--port", "8000",
            "--speculative-config", '{"method": "eagle3", "model": "/m/drafter", "num_speculative_tokens": 3}']
    assert served_models(vllm) == ("/m/target", "/m/drafter")
    assert served_models(["vllm", "serve", "--model=/m/t"]) == ("/m/t", None)
    sglang = ["python", "-m", "sglang.launch_server", "--model-path", "/m/t", "--speculative-draft-model-path", "/m/d"]
    assert served_models(sglang) == ("/m/t", "/m/d")
