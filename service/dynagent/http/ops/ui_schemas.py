"""Response shapes of the operations page's endpoints, for the OpenAPI document only
(the handlers build plain dicts; schemathesis checks the answers against these)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from dynagent.http.api.schemas import RevisionBody


class WhoAmI(BaseModel):
    name: str
    admin: bool
    agents: list[str] | None
    auth: bool


class TraceSummary(BaseModel):
    trace_id: str
    agent: str
    revision: str
    variant: Literal["stable", "canary"]
    session_id: str | None
    status: Literal["ok", "error", "unfinished"]
    started_at: float | None
    duration_ms: float | None
    steps: int
    tool_calls: int
    usage: dict[str, int] | None
    error: dict[str, str] | None
    input: str


class TraceList(BaseModel):
    traces: list[TraceSummary]


class VariantSeries(BaseModel):
    requests: list[int]
    errors: list[int]
    mean_ms: list[float | None]


class AgentSeries(BaseModel):
    name: str
    step: int
    end: int
    variants: dict[str, VariantSeries]


class RevisionDefinition(RevisionBody):
    name: str
    definition: dict[str, Any]
    text: str
