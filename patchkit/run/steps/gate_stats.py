"""The statistics of a speculative-decoding gate: enough evidence before a verdict.

Pure: counters in, figures and verdicts out; no I/O.

A measured acceptance rate is a proportion, so it comes with a 95% Wilson interval (good
near 0 and 1, where the normal approximation is not). Drafted tokens are not independent
trials, though: a draft's tokens are verified in order and the first rejection ends it, so
the accepted count per draft (X, 0..k) varies more than k coin flips would. vLLM's
per-position counters give P(position i accepted) = p_i, and with accepted tokens a prefix,
Var(X) = sum((2i+1) p_i) - (sum p_i)^2 (0-based i). The interval uses the effective number of
trials, draft tokens / design effect with design effect = Var(X) / (k r (1 - r)): at least 1,
at most k (all-or-nothing drafts). Without per-position counters the worst case (k) is used:
the interval is that of one trial per draft.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Z95 = 1.959963984540054
FailWhen = Literal["upper", "lower"]


def wilson(successes: float, trials: float, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion; (0, 1) without trials."""
    if trials <= 0:
        return 0.0, 1.0
    p = min(1.0, max(0.0, successes / trials))
    z2 = z * z
    centre = (p + z2 / (2 * trials)) / (1 + z2 / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials)) / (1 + z2 / trials)
    low = 0.0 if p == 0 else max(0.0, centre - half)  # exactly 0 and 1 at the ends (no rounding error)
    high = 1.0 if p == 1 else min(1.0, centre + half)
    return low, high


@dataclass(frozen=True)
class Acceptance:
    draft_tokens: float
    accepted_tokens: float
    drafts: float
    per_position: list[float] | None  # P(position i accepted), i = 1..k, from the per-position counter

    @property
    def rate(self) -> float | None:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens > 0 else None

    @property
    def tokens_per_draft(self) -> float | None:
        return self.draft_tokens / self.drafts if self.drafts > 0 else None

    @property
    def mean_acceptance_length(self) -> float | None:
        return 1 + self.accepted_tokens / self.drafts if self.drafts > 0 else None

    def design_effect(self) -> float:
        """How many independent trials one drafted token is worth, inverted (1..k)."""
        k, rate = self.tokens_per_draft, self.rate
        if k is None or rate is None or k <= 1:
            return 1.0
        if rate <= 0 or rate >= 1:
            return 1.0  # no variance to inflate
        if not self.per_position:
            return k  # worst case: all-or-nothing drafts
        mean = sum(self.per_position)
        second = sum((2 * i + 1) * p for i, p in enumerate(self.per_position))
        variance = max(0.0, second - mean * mean)
        return min(k, max(1.0, variance / (k * rate * (1 - rate))))

    def effective_trials(self) -> float:
        return self.draft_tokens / self.design_effect()

    def interval(self, z: float = Z95) -> tuple[float, float]:
        rate = self.rate
        if rate is None:
            return 0.0, 1.0
        n = self.effective_trials()
        return wilson(rate * n, n, z)

    def length_interval(self, z: float = Z95) -> tuple[float, float] | None:
        """Mean acceptance length = 1 + k * rate, so its interval follows the rate's."""
        k = self.tokens_per_draft
        if k is None:
            return None
        low, high = self.interval(z)
        return 1 + k * low, 1 + k * high


def below(interval: tuple[float, float], bar: float, fail_when: FailWhen) -> bool:
    """Does the evidence put the figure below the bar? `upper`: only if even the interval's upper
    bound is below it (fails only when confidently bad); `lower`: unless its lower bound reaches
    it (passes only when confidently good)."""
    low, high = interval
    return (high if fail_when == "upper" else low) < bar


def show_interval(interval: tuple[float, float], percent: bool = True) -> str:
    low, high = interval
    return f"95% CI {low:.1%}-{high:.1%}" if percent else f"95% CI {low:.2f}-{high:.2f}"


def regressed(interval: tuple[float, float], baseline: float, max_regression: float, fail_when: FailWhen) -> bool:
    """More than max_regression (a fraction) below the baseline's figure, by the same rule."""
    return below(interval, baseline * (1 - max_regression), fail_when)
