"""Online scores: ``rollout.judge`` has a judge agent score a sample of the live runs of
both variants against one rubric, after they have answered; the guard compares the
canary's judged mean with a floor and with the stable's.

This module holds the policy, the figures and the verdict; the sampler that runs the
judge lives with the service (``core.judging``).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dynagent.spec.agent import NAME_PATTERN

MAX_RUBRIC = 20_000


class JudgePolicy(BaseModel):
    """``rollout.judge``: score a share of the live runs of the stable and the canary."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sample: float = Field(gt=0, le=1)
    """The share of each variant's answered runs that is scored (0.05: one in twenty)."""
    rubric: str = Field(min_length=1, max_length=MAX_RUBRIC)
    """What a good answer is; the judge scores each sampled answer against it (0 to 1)."""
    agent: str = Field(min_length=1, max_length=64, pattern=NAME_PATTERN)
    """The judge: an agent of this service answering ``{"score": 0..1, "reason": …}``."""
    concurrency: int = Field(default=2, ge=1, le=32)
    """Judge runs in flight at once for this agent."""
    timeout: float = Field(default=60.0, gt=0, le=600)
    """Seconds one judge run may take; a slower one counts as an error."""
    queue: int = Field(default=32, ge=1, le=1000)
    """Sampled runs waiting for or in judgement at most; a sampled run past this is
    skipped (and counted), so a slow judge never holds memory or a caller."""


class JudgedScores:
    """The online scores of one variant: a bounded window of recent scores, and counts."""

    def __init__(self, window: int = 200) -> None:
        self.scores: deque[float] = deque(maxlen=window)
        self.count = 0
        """Runs scored."""
        self.errors = 0
        """Sampled runs the judge did not score (malformed answer, failure, timeout)."""
        self.skipped = 0
        """Sampled runs not judged because the judge's queue was full."""

    def add(self, score: float | None) -> None:
        """Count a judgement: a score in 0..1, or None for a judge error."""
        if score is None:
            self.errors += 1
            return
        self.scores.append(score)
        self.count += 1

    def mean(self) -> float | None:
        return sum(self.scores) / len(self.scores) if self.scores else None

    def summary(self) -> dict[str, Any]:
        mean = self.mean()
        return {
            "count": self.count,
            "mean": None if mean is None else round(mean, 4),
            "errors": self.errors,
            "skipped": self.skipped,
        }


def judge_verdict(
    *,
    min_score: float | None,
    max_drop: float | None,
    min_judged: int,
    stable: JudgedScores,
    canary: JudgedScores,
) -> str | None:
    """Why the canary's online scores fail the guard, or None.

    Nothing is concluded from fewer than ``min_judged`` recent scores of a variant: one
    judge call is a noisy sample, and pulling a canary on its first two low scores would
    pull good versions as often as bad ones."""
    mean, seen = canary.mean(), len(canary.scores)
    if mean is None or seen < min_judged:
        return None
    if min_score is not None and mean < min_score:
        return f"judged score {mean:.2f} over the last {seen} scored runs is below {min_score:g}"
    base, base_seen = stable.mean(), len(stable.scores)
    if max_drop is None or base is None or base_seen < min_judged:
        return None
    if base - mean > max_drop + 1e-9:
        return (
            f"judged score {mean:.2f} over {seen} canary runs is {base - mean:.2f} below the "
            f"stable's {base:.2f} over {base_seen} runs (max_score_drop {max_drop:g})"
        )
    return None
