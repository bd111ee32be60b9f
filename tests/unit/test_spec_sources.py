"""spec_sources.py's pure parts: which engine a launch runs, and SGLang's counts summed from
the gate's own /generate answers (meta_info in SGLang 0.5.10's and 0.5.23's names)."""

from __future__ import annotations

import asyncio

import pytest

from patchkit.run.steps.spec_sources import SglangCounts, engine_of


def test_the_engine_is_said_or_recognized_from_the_command() -> None:
    assert engine_of(["python", "-m", "sglang.launch_server", "--model-path", "m"], None) == "sglang"
    assert engine_of(["/opt/env/bin/sglang", "serve", "--model-path", "m"], None) == "sglang"
    assert engine_of(["vllm", "serve", "/models/sglang-tuned"], None) == "vllm"  # a path word is no command
    assert engine_of(["python", "-m", "sglang.launch_server"], "vllm") == "vllm"  # engine: wins


def counted(bodies: list[dict], k: int | None = None):
    source = SglangCounts.__new__(SglangCounts)  # no agent: only add() and acceptance() are pure
    source.drafts = source.draft_tokens = source.accepted = 0.0
    source.histogram, source.k = [], k
    source.add(bodies)
    return asyncio.run(source.acceptance())


def test_sglang_0_5_10_names_are_summed_over_the_requests() -> None:
    first = {"meta_info": {"completion_tokens": 10, "spec_verify_ct": 4, "spec_accept_token_num": 6,
                           "spec_draft_token_num": 12, "spec_accept_histogram": [1, 1, 1, 1]}}
    second = {"meta_info": {"completion_tokens": 6, "spec_verify_ct": 4, "spec_accept_token_num": 2,
                            "spec_draft_token_num": 12, "spec_accept_histogram": [2, 2, 0, 0]}}
    found = counted([first, second])
    assert (found.drafts, found.draft_tokens, found.accepted_tokens) == (8, 24, 8)
    # histogram [3, 3, 1, 1] over 8 verify steps: position i accepted when more than i were
    assert found.per_position == [5 / 8, 2 / 8, 1 / 8]
    assert found.mean_acceptance_length == 2.0


def test_sglang_0_5_23_names_and_the_fallbacks() -> None:
    newer = {"meta_info": {"completion_tokens": 9, "spec_verify_ct": 3, "spec_num_correct_drafts": 6,
                           "spec_num_proposed_drafts": 9, "spec_correct_drafts_histogram": [0, 1, 1, 1]}}
    found = counted([newer])
    assert (found.drafts, found.draft_tokens, found.accepted_tokens) == (3, 9, 6)
    assert found.per_position == pytest.approx([1.0, 2 / 3, 1 / 3])
    # no accepted count: completion_tokens - spec_verify_ct; no drafted count: k from the server's args
    bare = {"meta_info": {"completion_tokens": 12, "spec_verify_ct": 5}}
    found = counted([bare], k=3)
    assert (found.drafts, found.draft_tokens, found.accepted_tokens, found.per_position) == (5, 15, 7, None)
    # without speculation there is nothing to count; without k nothing says what was drafted
    assert counted([{"meta_info": {"completion_tokens": 8}}]).rate is None
    assert counted([bare]) is None
