"""``POST /v1/traces/{trace_id}/feedback``: a caller's rating of one recent run, counted for
the agent, revision and variant that served it (and for the guard's ``min_feedback_score``).

A run takes one rating, from the API key that made it or from a key given ``feedback: true``
in the keys file (a labelling service); the trace must still be in this replica's trace
store."""

from __future__ import annotations

from typing import Any, Literal

from aiohttp import web
from pydantic import ConfigDict, Field, model_validator

from dynagent.http._routes import AGENT_ERRORS, BODY_ERRORS, Route, Routes
from dynagent.http.api.bodies import read_body
from dynagent.http.api.schemas import Answer, CallerBody
from dynagent.http.sse import json
from dynagent.http.state import caller, service


def _one_of(schema: dict[str, Any]) -> None:
    """The document says what the validator checks: exactly one of score and thumbs."""
    properties = schema["properties"]
    properties["score"] = {"type": "number", "minimum": 0, "maximum": 1}
    properties["thumbs"] = {"enum": ["up", "down"]}
    properties["comment"] = {"type": "string", "maxLength": 2000}
    schema["oneOf"] = [{"required": ["score"]}, {"required": ["thumbs"]}]


class FeedbackRequest(CallerBody):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_one_of)

    score: float | None = Field(default=None, ge=0, le=1)
    """0 (bad) to 1 (good)."""
    thumbs: Literal["up", "down"] | None = None
    """Instead of ``score``: up = 1, down = 0."""
    comment: str | None = Field(default=None, max_length=2000)

    @model_validator(mode="after")
    def _one_rating(self) -> FeedbackRequest:
        if (self.score is None) == (self.thumbs is None):
            raise ValueError("give either score (0 to 1) or thumbs (up or down)")
        return self

    @property
    def value(self) -> float:
        if self.score is not None:
            return self.score
        return 1.0 if self.thumbs == "up" else 0.0


class FeedbackResponse(Answer):
    trace_id: str
    agent: str
    revision: str
    variant: Literal["stable", "canary"]
    score: float
    comment: str | None
    counted: bool
    """False (the rating is kept on the trace only) when that revision no longer serves as
    that variant, or when the run's variant was pinned by its caller: the figures and the
    guard take ratings of runs the router chose."""


routes = Routes("traces")


@routes.add(
    Route(
        "POST",
        "/v1/traces/{trace_id}/feedback",
        "Rate a recent run (score 0-1 or thumbs up/down)",
        request=FeedbackRequest,
        response=FeedbackResponse,
        errors=(*AGENT_ERRORS, 409, *BODY_ERRORS),
    )
)
async def feedback(request: web.Request) -> web.Response:
    trace_id = request.match_info["trace_id"]
    body = await read_body(request, FeedbackRequest)
    rating = {"score": body.value, "comment": body.comment}
    the = service(request)
    run = await the.traces.rate_run(trace_id, caller(request), rating)
    agent, revision, variant = run.agent, run.revision, run.variant
    counted = run.routed and the.registry.rollouts.rate(agent, revision, variant, body.value)
    if counted:
        the.metrics.observe_feedback(agent, variant, body.value)
    answer = FeedbackResponse(
        trace_id=trace_id,
        agent=agent,
        revision=revision,
        variant=variant,
        score=body.value,
        comment=body.comment,
        counted=counted,
    )
    return json(answer)
