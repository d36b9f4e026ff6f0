"""Canary rollouts: the ``rollout`` block of a canary document, sticky routing,
per-variant figures and the guard that pulls a failing canary out of traffic."""

from __future__ import annotations

import hashlib
import math
import random
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from dynagent.exceptions import ConfigError, FieldIssue
from dynagent.registry.gate import GatePolicy, GateRecord
from dynagent.spec.agent import AgentSpec, Format, issues_from, load_spec, parse_document

GUARDED_ERRORS = frozenset(
    {"model_error", "circuit_open", "timeout", "tool_error", "output_invalid", "limit_exceeded"}
)
"""Run errors that count against a version (the canary guard); caller mistakes and outages
(``unavailable``: a session store or config center out) do not."""

SHAPED_ERRORS = frozenset({"model_error", "output_invalid", "limit_exceeded"})
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


StickyKey = Literal["auto", "session", "header", "api_key", "none"]


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


class Paused(BaseModel):
    """``rollout.paused``: the canary is out of traffic on every replica until this is
    removed (an edit, or ``dynagent rollout resume NAME``). The guard writes it, and so
    does ``dynagent rollout pause NAME``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reason: str = Field(min_length=1, max_length=4000)
    at: datetime
    """When it was paused (ISO 8601)."""
    by: str = Field(default="guard", min_length=1, max_length=200)
    """``guard``, or whoever paused it by hand."""
    revision: str | None = Field(default=None, max_length=64)
    """The canary revision paused; another revision (a fixed spec, a new prompt) serves
    again. Without it the pause holds for whatever the document defines."""


class StepAfter(BaseModel):
    """When a progressive rollout takes its next step: after this long on the current step
    and/or this many healthy canary requests in it (both, when both are given)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seconds: float | None = Field(default=None, gt=0)
    requests: int | None = Field(default=None, ge=1)
    """Successful canary requests seen by one replica during the step (each replica counts
    its own; the first to see them takes the step for the fleet)."""

    @model_validator(mode="after")
    def _something(self) -> StepAfter:
        if self.seconds is None and self.requests is None:
            raise ValueError("give seconds, requests or both")
        return self


class RolloutPolicy(BaseModel):
    """The ``rollout`` block of ``{name}.canary.yaml``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    weight: float = Field(ge=0, le=100)
    """Percent of traffic sent to the canary; with ``steps``, the current step (default:
    the first), rewritten by the service as the rollout advances."""
    steps: tuple[float, ...] = ()
    """A progressive rollout: increasing weights, e.g. ``[5, 25, 50, 100]``."""
    step_after: StepAfter | None = None
    step_at: datetime | None = None
    """When the current step began; written with each step, so a restart keeps the clock."""
    auto_promote: bool = False
    """Promote the canary once the last step is done."""
    sticky_key: StickyKey = "auto"
    """What keeps a caller on one variant: ``auto`` = the session id, else the
    ``X-Canary-Key`` header, else the caller's API key; ``none`` = random per request."""
    guard: GuardPolicy = GuardPolicy()
    paused: Paused | None = None
    """Set (by the guard, or by hand) while the canary is out of traffic fleet-wide."""
    shadow: float = Field(default=0, ge=0, le=100)
    """Percent of the stable's requests also run, in the background, on the canary: the
    caller gets the stable's answer; tools not ``shadow_safe`` are not executed there."""
    pin_sessions: bool = False
    """A session stays on the variant it started on for the life of this canary revision
    (weight changes and steps move new sessions only); a paused canary still serves none."""
    gate: GatePolicy | None = None
    """Hold the canary out of live traffic until its evaluation suite passes for exactly
    this revision (``registry.gate``); shadow traffic still runs."""
    gate_record: GateRecord | None = None
    """The gate's claim or result, written back by the service."""

    @model_validator(mode="before")
    @classmethod
    def _first_step(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "weight" not in data and data.get("steps"):
            steps = data["steps"]
            if isinstance(steps, list | tuple):
                return {**data, "weight": steps[0]}
        return data

    @model_validator(mode="after")
    def _steps(self) -> RolloutPolicy:
        steps = self.steps
        if not steps:
            if self.step_after is not None or self.auto_promote:
                raise ValueError("step_after and auto_promote need steps")
            return self
        if any(not 0 < w <= 100 for w in steps) or list(steps) != sorted(set(steps)):
            raise ValueError("steps must be increasing weights in (0, 100]")
        if self.step_after is None:
            raise ValueError("steps need step_after: {seconds and/or requests}")
        if self.weight not in steps:
            raise ValueError(f"weight {self.weight:g} is not one of the steps")
        return self

    @property
    def step(self) -> int | None:
        """The index of the current step, or None without steps."""
        return self.steps.index(self.weight) if self.steps else None

    def next_weight(self) -> float | None:
        """The weight of the next step; None on the last one (or without steps)."""
        step = self.step
        return None if step is None or step + 1 >= len(self.steps) else self.steps[step + 1]

    def step_done(self, since: float, healthy: int, now: float) -> bool:
        """Whether the current step has lasted long enough and seen enough healthy requests."""
        after = self.step_after
        if after is None:
            return False
        if after.seconds is not None and now - since < after.seconds:
            return False
        return after.requests is None or healthy >= after.requests


def bucket(agent: str, key: str) -> float:
    """A stable position in [0, 100) for ``key``: every replica computes the same one."""
    digest = hashlib.sha256(f"{agent}\x00{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % 1_000_000 / 10_000


def routing_key(
    sticky_key: StickyKey, *, session: str | None, header: str | None, api_key: str | None
) -> str | None:
    """The value that keeps a caller on one variant under ``sticky_key``; None: random."""
    if sticky_key == "auto":
        return session or header or api_key or None
    chosen = {"session": session, "header": header, "api_key": api_key, "none": None}
    return chosen[sticky_key] or None


def picks_canary(agent: str, key: str | None, weight: float) -> bool:
    if weight <= 0:
        return False
    position = bucket(agent, key) if key else random.uniform(0, 100)
    return position < weight


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
        self.scores: deque[float] = deque(maxlen=window)
        """Recent feedback scores (0 to 1) of this variant's runs."""
        self.ratings = 0

    def rate(self, score: float) -> None:
        self.scores.append(score)
        self.ratings += 1

    def mean_score(self) -> float | None:
        return sum(self.scores) / len(self.scores) if self.scores else None

    def record(self, ok: bool, seconds: float) -> None:
        self.recent.append(Outcome(ok, seconds))
        self.requests += 1
        self.errors += 0 if ok else 1

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
    feedback = _feedback_verdict(policy, canary)
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


@dataclass(frozen=True, slots=True)
class Pulled:
    """A canary taken out of traffic: by this replica's guard, or by ``rollout.paused``."""

    reason: str
    at: float
    by: str = "guard"
    recorded: bool = False
    """True once the pause is in the canary's document (the config center): every replica
    then honours it, and a restart does not undo it."""

    @classmethod
    def now(cls, reason: str, by: str = "guard") -> Pulled:
        return cls(reason, time.time(), by)

    @classmethod
    def of(cls, paused: Paused | None, revision: str) -> Pulled | None:
        """The pull ``rollout.paused`` records for the canary ``revision``, if any."""
        if paused is None or (paused.revision is not None and paused.revision != revision):
            return None
        at = paused.at if paused.at.tzinfo else paused.at.replace(tzinfo=UTC)
        return cls(paused.reason, at.timestamp(), paused.by, recorded=True)

    def as_paused(self, revision: str) -> dict[str, str]:
        """The ``rollout.paused`` block that records this pull of canary ``revision``."""
        at = datetime.fromtimestamp(self.at, UTC).isoformat(timespec="milliseconds")
        return {"reason": self.reason, "at": at, "by": self.by, "revision": revision}


def load_canary(
    document: str | Mapping[str, Any],
    *,
    fmt: Format = "yaml",
    source: str = "",
    name: str | None = None,
) -> tuple[AgentSpec, RolloutPolicy]:
    """A canary document: a full AgentSpec plus its ``rollout`` block; ``name``, when
    given, is the agent its file is named after (``{name}.canary.yaml``)."""
    data = parse_document(document, fmt) if isinstance(document, str) else document
    if not isinstance(data, Mapping):
        raise ConfigError("a canary definition must be a mapping of fields", source=source)
    fields = dict(data)
    rollout = fields.pop("rollout", None)
    spec = load_spec(fields, source=source)
    if name is not None and spec.name != name:
        raise ConfigError(
            "a canary must define the agent its file is named after",
            source=source,
            agent=name,
            issues=[FieldIssue("name", f"expected {name!r}, found {spec.name!r}")],
        )
    if rollout is None:
        raise ConfigError(
            "a canary needs a rollout block",
            source=source,
            agent=spec.name,
            issues=[FieldIssue("rollout", "add e.g. 'rollout: {weight: 10}'")],
        )
    try:
        return spec, RolloutPolicy.model_validate(rollout)
    except ValidationError as exc:
        issues = [FieldIssue(f"rollout.{i.path}", i.message) for i in issues_from(exc)]
        raise ConfigError(
            "invalid rollout", source=source, agent=spec.name, issues=issues
        ) from None
