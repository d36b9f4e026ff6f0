"""Canary rollouts: the ``rollout`` block of a canary document and sticky routing; the
guard's figures and thresholds are in ``registry/guard.py``."""

from __future__ import annotations

import functools
import hashlib
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from dynagent.exceptions import ConfigError, FieldIssue
from dynagent.registry.analysis_policy import (
    AnalysisPolicy,
    ApprovalPolicy,
    Approved,
    BudgetPolicy,
    HistoryEntry,
)
from dynagent.registry.gate import GatePolicy, GateRecord
from dynagent.registry.guard import GuardPolicy
from dynagent.registry.judged import JudgePolicy
from dynagent.registry.targeting import MAX_LENGTH, Match, MatchError, compile_match
from dynagent.spec.agent import AgentSpec, Format, issues_from, load_spec, parse_document

StickyKey = Literal["auto", "session", "header", "api_key", "none"]


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
    judge: JudgePolicy | None = None
    """Score a sample of both variants' live runs with a judge agent (online scores)."""
    analysis: AnalysisPolicy | None = None
    """Sound statistics against the stable version (``registry/analysis_policy.py``)."""
    approval: ApprovalPolicy | None = None
    approved: Approved | None = None
    budget: BudgetPolicy | None = None
    """Pause the canary once its revision has spent this much (``rollout/budgets.py``)."""
    history: tuple[HistoryEntry, ...] = Field(default=(), max_length=200)
    """The rollout's decisions, oldest first, as the service writes them back
    (``rollout/history.py``): ``{at, by, action, from?, to?, reason?}``."""
    match: str | None = Field(default=None, min_length=1, max_length=MAX_LENGTH)
    """A CEL expression over the request (``caller``, ``headers``, ``variables``,
    ``metadata``, ``user``): only requests it is true for may reach the canary; the weight
    applies among them (``registry/targeting.py``)."""

    @field_validator("match")
    @classmethod
    def _compiles(cls, source: str | None) -> str | None:
        if source is not None:
            try:
                matching(source)
            except MatchError as exc:
                raise ValueError(f"not a valid CEL expression: {exc}") from None
        return source

    def eligible(self, attributes: Mapping[str, Any] | None) -> bool:
        """Whether a request with these attributes may reach the canary."""
        return self.match is None or matching(self.match).eligible(attributes or {})

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

    def awaits_approval(self, revision: str) -> bool:
        """Whether the next step needs an approval that revision ``revision`` lacks."""
        upcoming, approval = self.next_weight(), self.approval
        if upcoming is None or approval is None or upcoming < approval.before_weight:
            return False
        return self.approved is None or self.approved.revision != revision

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


@functools.lru_cache(maxsize=256)
def matching(source: str) -> Match:
    """``source`` compiled, once per expression however many canaries and rebuilds use it."""
    return compile_match(source)


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
