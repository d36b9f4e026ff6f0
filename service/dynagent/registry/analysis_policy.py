"""``rollout.analysis``: judging a canary against its stable version with sound
statistics, from the fleet's figures in Prometheus or, without one, this replica's."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dynagent.registry.spend import BudgetPeriod


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PrometheusSource(_Strict):
    """Where the fleet's figures are: a Prometheus server scraping every replica."""

    url: str = Field(min_length=1, max_length=2000, pattern=r"^https?://")
    timeout: float = Field(default=5.0, gt=0, le=60)
    requests: str | None = Field(default=None, max_length=4000)
    """PromQL for the routed requests by ``variant`` and ``outcome`` (``ok``/``error``);
    ``$agent`` and ``$revisions`` (a regex of the two revisions) are filled in."""
    latency: str | None = Field(default=None, max_length=4000)
    """PromQL for the routed latency histogram's buckets by ``variant`` and ``le``."""
    scores: str | None = Field(default=None, max_length=4000)
    """PromQL for the online scores' sum and count by ``variant`` and ``kind``."""
    cost: str | None = Field(default=None, max_length=4000)
    """PromQL for the US dollars the canary revision spent since ``$at`` (``rollout.budget``);
    ``$agent``, ``$revision`` and ``$at`` (Unix seconds) are filled in."""
    tokens: str | None = Field(default=None, max_length=4000)
    """PromQL for the tokens the canary revision used since ``$at`` (``rollout.budget``)."""


class LatencyCheck(_Strict):
    quantile: float = Field(default=0.95, gt=0, lt=1)
    max_ratio: float = Field(default=1.5, gt=1)
    """Fail when the canary's quantile is beyond this multiple of the stable's."""
    floor_ms: float = Field(default=50, ge=0)
    """A stable quantile below this counts as this much (jitter is no signal)."""


class ApprovalPolicy(_Strict):
    """``rollout.approval``: a person approves before the canary takes this much traffic."""

    before_weight: float = Field(gt=0, le=100)
    """A progressive rollout holds before a step to this weight or more until approved."""


class Approved(_Strict):
    """``rollout.approved``: who approved the canary revision, and when (written back by
    ``dynagent rollout approve NAME``)."""

    by: str = Field(min_length=1, max_length=200)
    at: str = Field(min_length=1, max_length=64)
    revision: str = Field(min_length=1, max_length=64)


class ScoreCheck(_Strict):
    """The online scores (``rollout.judge``) of both variants, by their means with an
    always-valid interval."""

    min_score: float | None = Field(default=None, ge=0, le=1)
    """Fail when the canary's mean is below this beyond doubt."""
    max_drop: float | None = Field(default=None, ge=0, le=1)
    """Fail when the canary's mean is below the stable's by more than this beyond doubt."""
    min_scores: int = Field(default=10, ge=2)
    """Scored runs of each variant before any verdict."""


class AnalysisPolicy(_Strict):
    """The checks made every ``interval`` seconds while the canary serves; each is *pass*,
    *fail* (the canary is paused with the figures) or *inconclusive* (a progressive step
    holds; after ``max_inconclusive`` checks in a row the canary is paused for a person)."""

    prometheus: PrometheusSource | None = None
    """Without it, the figures are this replica's own, and the status says so."""
    interval: float = Field(default=10.0, ge=0.1, le=3600)
    confidence: float = Field(default=0.95, ge=0.5, lt=1)
    """One minus the false-alarm rate of the error-rate test, however often it is checked."""
    min_requests: int = Field(default=20, ge=1)
    max_error_increase: float = Field(default=0.02, ge=0, le=1)
    """The error-rate check passes once the canary's rate is at most this much above the
    stable's, beyond doubt."""
    latency: LatencyCheck | None = LatencyCheck()
    scores: ScoreCheck | None = None
    """Judge the canary's online scores too (needs ``rollout.judge``)."""
    sample_ratio: bool = True
    """Pause when the split the canary gets departs from its weight (routing is broken)."""
    max_inconclusive: int = Field(default=60, ge=1, le=100_000)


class BudgetPolicy(_Strict):
    """``rollout.budget``: what the canary revision may spend — US dollars of its model
    calls (``models.prices``) or tokens — over the whole rollout or per UTC day; past it
    the canary is paused (``by: budget``)."""

    usd: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    tokens: int | None = Field(default=None, gt=0)
    per: BudgetPeriod = "rollout"
    """``rollout``: since the canary started; ``day``: since 00:00 UTC."""
    interval: float = Field(default=10.0, ge=0.1, le=3600)
    """Seconds between two looks at the spend."""

    @model_validator(mode="after")
    def _one_limit(self) -> BudgetPolicy:
        if (self.usd is None) == (self.tokens is None):
            raise ValueError("give exactly one of usd and tokens")
        return self


class HistoryEntry(BaseModel):
    """One decision of ``rollout.history`` (``rollout/history.py`` writes them)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    at: str = Field(min_length=1, max_length=64)
    by: str = Field(min_length=1, max_length=200)
    action: str = Field(min_length=1, max_length=64)
