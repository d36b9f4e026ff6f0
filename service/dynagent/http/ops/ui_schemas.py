"""The answers of the operations page's endpoints (``traces.py``)."""

from __future__ import annotations

from typing import Any, Literal

from dynagent.http.api.schemas import Answer, RevisionBody


class WhoAmI(Answer):
    name: str
    admin: bool
    agents: list[str] | None
    auth: bool


class TraceSummary(Answer):
    trace_id: str
    agent: str
    revision: str
    variant: Literal["stable", "canary"]
    owner: str
    """Who made the run (as ``Trace.owner``)."""
    session_id: str | None
    status: Literal["ok", "error", "unfinished"]
    started_at: float | None
    duration_ms: float | None
    steps: int
    tool_calls: int
    usage: dict[str, int] | None
    cost_usd: float | None = None
    """What the run's model calls cost in US dollars (``models.prices``); null when a model
    it used has no price."""
    error: dict[str, str] | None
    input: str


class TraceList(Answer):
    traces: list[TraceSummary]


class VariantSeries(Answer):
    requests: list[int]
    errors: list[int]
    mean_ms: list[float | None]


class AgentSeries(Answer):
    name: str
    step: int
    end: int
    variants: dict[str, VariantSeries]


class RevisionDefinition(RevisionBody):
    name: str
    definition: dict[str, Any]
    text: str
