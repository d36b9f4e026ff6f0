"""A gated canary: ``rollout.gate`` asks that the canary's evaluation suite pass before the
canary takes live traffic, and ``rollout.gate_record`` is the result written back beside it.

A record holds for exactly one (canary revision, suite revision, judge revision): the
canary revision already mixes in the tool lists of the MCP servers under it, so a new
definition, a new suite, a new judge or a changed tool list each make the record stale.
Pure values and rules; the run and the write-back live in ``rollout.gate``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

GateStateName = Literal["pending", "running", "passed", "failed", "forced", "stale"]
OPEN_STATES = frozenset({"passed", "forced"})
"""States in which a gated canary takes its live traffic."""


class GatePolicy(BaseModel):
    """``rollout.gate``: the suite that must pass, and overrides of its pass rule."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    suite: str | None = Field(default=None, min_length=1, max_length=64)
    """The agent whose suite runs (``{suite}.evals.yaml``); default: the canary's own."""
    min_pass_rate: float | None = Field(default=None, ge=0, le=1)
    """Overrides the suite's ``pass.min_pass_rate`` for the gate."""
    min_mean_score: float | None = Field(default=None, ge=0, le=1)
    """Overrides the suite's ``pass.min_mean_score`` for the gate."""
    no_regressions: bool | None = None
    """Overrides the suite's ``pass.no_regressions`` (the stable runs the suite too)."""
    concurrency: int = Field(default=8, ge=1, le=64)
    """Case runs at once while the gate runs."""


class GateRecord(BaseModel):
    """``rollout.gate_record``: written by the service, one replica at a time (a claim while
    the suite runs, then its result, or a promotion forced past it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    state: Literal["running", "passed", "failed", "forced"]
    revision: str = Field(min_length=1, max_length=64)
    """The canary revision the record is of (MCP tool lists included)."""
    suite_revision: str | None = Field(default=None, max_length=64)
    judge: str | None = Field(default=None, max_length=200)
    """The judge agent's ``name@revision``, when the suite has one."""
    run_id: str | None = Field(default=None, max_length=64)
    reason: str | None = Field(default=None, max_length=4000)
    at: datetime
    by: str | None = Field(default=None, max_length=200)
    """The replica that claimed or ran it; for ``forced``, who forced it."""
    until: datetime | None = None
    """While ``running``: when the claim expires unless its replica renews it."""

    def key(self) -> GateKey:
        return GateKey(self.revision, self.suite_revision, self.judge)

    @classmethod
    def read(cls, rollout: Mapping[str, Any]) -> GateRecord | None:
        """The record in a document's ``rollout`` mapping; None when it has none, or one
        edited by hand into nonsense (claimed afresh)."""
        try:
            raw = rollout.get("gate_record")
            return None if raw is None else cls.model_validate(raw)
        except ValidationError:
            return None


def written(record: GateRecord) -> dict[str, Any]:
    """``record`` as it is written into the document."""
    return record.model_dump(mode="json", exclude_none=True)


def stamp(at: float) -> datetime:
    return datetime.fromtimestamp(at, UTC)


@dataclass(frozen=True, slots=True)
class GateKey:
    """What a record must match to hold for the canary serving now."""

    revision: str
    suite_revision: str | None
    judge: str | None


@dataclass(frozen=True, slots=True)
class GateState:
    """Where the gate of a canary stands, as its status shows it (``canary.gate``)."""

    state: GateStateName
    revision: str
    suite_revision: str | None = None
    judge: str | None = None
    run_id: str | None = None
    reason: str | None = None
    at: float = 0.0
    by: str | None = None

    @property
    def open(self) -> bool:
        return self.state in OPEN_STATES

    def as_dict(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "revision": self.revision,
            "suite_revision": self.suite_revision,
            "judge": self.judge,
            "run_id": self.run_id,
            "reason": self.reason,
            "at": self.at,
            "by": self.by,
        }


def timestamp(at: datetime) -> float:
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()


def held(revision: str, reason: str = "waiting for the evaluation suite to pass") -> GateState:
    """The state of a gated canary before anything is known: no live traffic."""
    return GateState("pending", revision, reason=reason)


def gate_state(
    record: GateRecord | None, key: GateKey, now: float, missing: str | None = None
) -> GateState:
    """The state ``record`` gives the canary of ``key`` at ``now``; ``missing``: why the
    suite cannot run (no suite, no judge) when it cannot."""
    if record is None:
        return GateState(
            "pending", key.revision, key.suite_revision, key.judge, reason=missing or _WAITING
        )
    at = timestamp(record.at)
    base = GateState("stale", key.revision, key.suite_revision, key.judge, at=at)
    same = record.key() == key or (record.state == "forced" and record.revision == key.revision)
    if not same:
        return replace(base, reason=missing or _changed(record.key(), key))
    if record.state == "running" and (record.until is None or timestamp(record.until) <= now):
        reason = f"the replica running the suite ({record.by}) stopped renewing its claim"
        return replace(base, run_id=record.run_id, reason=reason)
    return replace(
        base, state=record.state, run_id=record.run_id, reason=record.reason, by=record.by
    )


_WAITING = "waiting for a replica to run the evaluation suite"


def _changed(was: GateKey, now: GateKey) -> str:
    parts = [
        f"{what} {before} is now {after}"
        for what, before, after in (
            ("canary revision", was.revision, now.revision),
            ("suite revision", was.suite_revision, now.suite_revision),
            ("judge", was.judge, now.judge),
        )
        if before != after
    ]
    return "the record is of an earlier version: " + "; ".join(parts)
