"""The guard: which runs count for or against a version, the recent figures of each
variant, and the fixed thresholds that pull a failing canary out of traffic."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dynagent.registry.judged import JudgedScores, judge_verdict

GUARDED_ERRORS = frozenset(
    {
        "model_error",
        "input_too_long",
        "circuit_open",
        "timeout",
        "tool_error",
        "output_invalid",
        "limit_exceeded",
        "cost_limit",
    }
)
"""Run errors that count against a version (the canary guard); caller mistakes and outages
(``unavailable``: a session store or config center out) do not."""

SHAPED_ERRORS = frozenset(
    {"model_error", "input_too_long", "output_invalid", "limit_exceeded", "cost_limit"}
)
"""Failures that what a caller adds to a run can cause on its own: its JSON Schema nothing
satisfies (``output_invalid``, or ``limit_exceeded`` once the retries used the steps), its
tools or settings that the model endpoint refuses (``model_error``)."""


def guard_evidence(error: str | None, *, routed: bool, shaped: bool) -> bool | None:
    """What one finished run tells the guard about the version that served it: True (a
    success), False (a failure of the version) or None (nothing, either way).

    Only traffic the router chose is evidence: a caller pinning a variant picks what it
    measures (``routed`` False). A failure the caller's additions can explain (``shaped``:
    its schema, tools, tool choice or settings) is not held against the version, and
    neither is a caller's mistake, an outage or a disconnect."""
    if not routed:
        return None
    if error is None:
        return True
    if error not in GUARDED_ERRORS or (shaped and error in SHAPED_ERRORS):
        return None
    return False


class GuardPolicy(BaseModel):
    """When to pull a canary out of traffic. The defaults need no configuration."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_error_rate: float = Field(default=0.2, ge=0, le=1)
    """Pull when more than this share of the canary's recent requests failed."""
    min_requests: int = Field(default=20, ge=1)
    """…over at least this many requests (for latency: of each variant)."""
    max_latency_ratio: float = Field(default=3.0, gt=1)
    """Pull when the canary's p95 latency exceeds this multiple of the stable one's."""
    latency_floor_ms: float = Field(default=50, ge=0)
    """A stable p95 below this counts as this much: ratios of millisecond latencies are
    scheduling noise, not a slower version."""
    window: int = Field(default=200, ge=10, le=10_000)
    """How many recent requests per variant the figures cover."""
    min_feedback_score: float | None = Field(default=None, ge=0, le=1)
    """Pull when the mean feedback score of the canary's recent rated runs is below this
    (``POST /v1/traces/{trace_id}/feedback``; thumbs up = 1, down = 0)."""
    min_feedback: int = Field(default=10, ge=1)
    """…over at least this many ratings."""
    min_judge_score: float | None = Field(default=None, ge=0, le=1)
    """Pull when the canary's mean online score (``rollout.judge``) is below this."""
    max_score_drop: float | None = Field(default=None, ge=0, le=1)
    """Pull when the canary's mean online score is below the stable's by more than this."""
    min_judged: int = Field(default=20, ge=1)
    """…over at least this many scored runs (of each variant, for ``max_score_drop``)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    ok: bool
    seconds: float


class VariantStats:
    """Recent outcomes of one variant of one agent (a bounded window), plus totals."""

    def __init__(self, window: int = 200) -> None:
        self.recent: deque[Outcome] = deque(maxlen=window)
        self.requests = 0
        self.errors = 0
        self.routed = 0
        """Requests whose variant the weight decided: what the sample-ratio check reads."""
        self.unmatched = 0
        """Stable requests ``rollout.match`` kept from the canary: counted here only, not
        compared (the canary never sees such callers; their outcomes would bias the
        stable's figures against the canary's, or for it)."""
        self.scores: deque[float] = deque(maxlen=window)
        """Recent feedback scores (0 to 1) of this variant's runs."""
        self.ratings = 0
        self.judged = JudgedScores(window)
        """Online scores of a sample of this variant's runs (``rollout.judge``)."""

    def rate(self, score: float) -> None:
        self.scores.append(score)
        self.ratings += 1

    def mean_score(self) -> float | None:
        return sum(self.scores) / len(self.scores) if self.scores else None

    def record(
        self, ok: bool, seconds: float, *, routed: bool = True, unmatched: bool = False
    ) -> None:
        if unmatched:
            self.unmatched += 1
            return
        self.recent.append(Outcome(ok, seconds))
        self.requests += 1
        self.errors += 0 if ok else 1
        self.routed += 1 if routed else 0

    def error_rate(self) -> float:
        if not self.recent:
            return 0.0
        return sum(1 for o in self.recent if not o.ok) / len(self.recent)

    def percentile(self, q: float) -> float | None:
        latencies = sorted(o.seconds for o in self.recent if o.ok)
        if not latencies:
            return None
        index = min(len(latencies) - 1, max(0, math.ceil(q * len(latencies)) - 1))
        return latencies[index]

    def summary(self) -> dict[str, Any]:
        p50, p95 = self.percentile(0.5), self.percentile(0.95)
        score = self.mean_score()
        return {
            "requests": self.requests,
            "errors": self.errors,
            "unmatched": self.unmatched,
            "recent_error_rate": round(self.error_rate(), 4),
            "p50_ms": None if p50 is None else round(p50 * 1000, 1),
            "p95_ms": None if p95 is None else round(p95 * 1000, 1),
            "ratings": self.ratings,
            "recent_mean_score": None if score is None else round(score, 4),
        }


def _feedback_verdict(policy: GuardPolicy, canary: VariantStats) -> str | None:
    score, floor = canary.mean_score(), policy.min_feedback_score
    if floor is None or score is None or len(canary.scores) < policy.min_feedback:
        return None
    if score >= floor:
        return None
    return (
        f"feedback score {score:.2f} over the last {len(canary.scores)} ratings is below {floor:g}"
    )


def guard_verdict(policy: GuardPolicy, stable: VariantStats, canary: VariantStats) -> str | None:
    """Why the canary must be pulled, or None while it looks healthy."""
    feedback = _feedback_verdict(policy, canary) or judge_verdict(
        min_score=policy.min_judge_score,
        max_drop=policy.max_score_drop,
        min_judged=policy.min_judged,
        stable=stable.judged,
        canary=canary.judged,
    )
    if feedback is not None:
        return feedback
    if len(canary.recent) < policy.min_requests:
        return None
    rate = canary.error_rate()
    if rate > policy.max_error_rate:
        return (
            f"error rate {rate:.0%} over the last {len(canary.recent)} requests "
            f"exceeds {policy.max_error_rate:.0%}"
        )
    canary_p95, stable_p95 = canary.percentile(0.95), stable.percentile(0.95)
    if canary_p95 is None or stable_p95 is None or len(stable.recent) < policy.min_requests:
        return None
    if canary_p95 > policy.max_latency_ratio * max(stable_p95, policy.latency_floor_ms / 1000):
        return (
            f"p95 latency {canary_p95 * 1000:.0f} ms exceeds "
            f"{policy.max_latency_ratio:g}x the stable {stable_p95 * 1000:.0f} ms"
        )
    return None
