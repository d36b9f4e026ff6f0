"""Evaluation runs over HTTP (admin keys): start one, follow its progress, read it back.

``POST /v1/agents/{name}/evals`` starts a run of the agent's suite (or one sent) against
a served variant, a kept revision or a draft document, and answers 202 with the run at
once, or, with ``Accept: text/event-stream``, a ``case`` event per finished case and a
final ``done`` with the whole run. The run goes on when the caller leaves.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from aiohttp import web
from pydantic import ConfigDict, Field, model_validator

from dynagent.core.evals import EvalRequest, start_eval
from dynagent.exceptions import Forbidden, NotFound
from dynagent.http._routes import AGENT_ERRORS, BODY_ERRORS, SSE, Route, Routes
from dynagent.http.api.bodies import read_body
from dynagent.http.api.schemas import Answer, CallerBody
from dynagent.http.sse import SSE_HEADERS, json, open_stream
from dynagent.http.sse import event as sse_event
from dynagent.http.state import caller, service

MAX_CASES = 5000
CANDIDATES = ("variant", "revision", "spec")


def _one_candidate_at_most(schema: dict[str, Any]) -> None:
    """The document says what the validator checks: no two of the candidates given (a
    null one is not given)."""
    given = {"not": {"type": "null"}}
    pairs = [(a, b) for i, a in enumerate(CANDIDATES) for b in CANDIDATES[i + 1 :]]
    schema["not"] = {
        "anyOf": [{"required": [a, b], "properties": {a: given, b: given}} for a, b in pairs]
    }


class EvalRunRequest(CallerBody):
    """What to evaluate: at most one of ``variant``, ``revision`` and ``spec`` (none: the
    stable version)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_one_candidate_at_most)

    variant: Literal["stable", "canary"] | None = None
    revision: str | None = Field(default=None, min_length=1, max_length=128)
    """A revision still kept: served now, or in ``GET /v1/agents/{name}/revisions``."""
    spec: dict[str, Any] | None = None
    """A draft agent document (as ``{name}.yaml`` holds it): built, run, never served."""
    suite: dict[str, Any] | None = None
    """A suite document to run instead of the agent's own ``{name}.evals.yaml``."""
    concurrency: int | None = Field(default=None, ge=1, le=64)
    """Case runs at once (default 8)."""
    compare: bool = False
    """Run the stable version on the same cases too; the run shows the per-case change."""
    cases: list[Annotated[str, Field(min_length=1, max_length=128)]] | None = Field(
        default=None, min_length=1, max_length=MAX_CASES
    )
    """Only the cases with these ids."""
    trigger: Literal["api", "cli"] = "api"
    """Who asks: ``cli`` from ``dynagent eval`` (counted apart in the metrics)."""

    @model_validator(mode="after")
    def _one_candidate(self) -> EvalRunRequest:
        chosen = [f for f in CANDIDATES if getattr(self, f) is not None]
        if len(chosen) > 1:
            raise ValueError(f"give one of variant, revision and spec, not {' and '.join(chosen)}")
        return self


class EvalCaseResult(Answer):
    id: str
    passed: bool
    score: float
    reason: str
    latency_ms: float
    tokens: int
    cost: float | None
    answer: str
    error: str | None
    checks: list[dict[str, Any]]


class EvalRun(Answer):
    """An evaluation run: its candidate, state, verdict, cases and (compare) the change
    of each case against the stable version."""

    id: str
    agent: str
    revision: str
    variant: str
    """stable, canary, revision (an older one) or draft."""
    suite_revision: str
    state: Literal["running", "passed", "failed", "error"]
    total: int
    done: int
    passed: bool | None
    reason: str | None
    trigger: Literal["api", "cli", "gate"]
    by: str
    judge: str | None
    stable_run: str | None
    compare: dict[str, Any] | None
    cases: list[EvalCaseResult] | None = None
    """Absent from the list of runs."""


class EvalRunList(Answer):
    runs: list[EvalRun]
    """Newest first, without their cases."""


routes = Routes("evaluations")


def _admin(request: web.Request, name: str) -> str:
    who = caller(request)
    who.check_agent(name)
    if not who.admin:
        raise Forbidden("evaluation runs need an admin API key")
    return who.name


@routes.add(
    Route(
        "POST",
        "/v1/agents/{name}/evals",
        "Run an agent's evaluation suite (admin key)",
        request=EvalRunRequest,
        description="With Accept: text/event-stream: a case event per finished case, then "
        "done with the whole run",
        streams=(SSE,),
        responses={202: ("The run, started (read it back by its id)", EvalRun)},
        errors=(*AGENT_ERRORS, 409, *BODY_ERRORS, 503),
    )
)
async def start(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    by = _admin(request, name)
    body = await read_body(request, EvalRunRequest)
    wanted = EvalRequest(
        variant=body.variant,
        revision=body.revision,
        spec=body.spec,
        suite=body.suite,
        concurrency=body.concurrency,
        compare=body.compare,
        cases=body.cases,
    )
    handle = await start_eval(service(request), name, wanted, by=by, trigger=body.trigger)
    if SSE not in request.headers.get("Accept", ""):
        return json(EvalRun.model_validate(handle.record()), status=202)
    response = await open_stream(request, dict(SSE_HEADERS))
    async for kind, data in handle.follow():
        await response.write(sse_event(kind, data))
    await response.write_eof()
    return response


@routes.add(
    Route(
        "GET",
        "/v1/agents/{name}/evals",
        "An agent's recent evaluation runs on this replica, newest first (admin key)",
        response=EvalRunList,
        errors=AGENT_ERRORS,
    )
)
async def listing(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    _admin(request, name)
    service(request).registry.entry(name)  # an unknown agent is a 404
    runs = [handle.record(cases=False) for handle in service(request).evals.list(name)]
    return json(EvalRunList.model_validate({"runs": runs}))


@routes.add(
    Route(
        "GET",
        "/v1/agents/{name}/evals/{run_id}",
        "One evaluation run with its cases (admin key)",
        response=EvalRun,
        errors=AGENT_ERRORS,
    )
)
async def one(request: web.Request) -> web.Response:
    name, run_id = request.match_info["name"], request.match_info["run_id"]
    _admin(request, name)
    handle = service(request).evals.get(name, run_id)
    if handle is None:
        raise NotFound(
            f"no evaluation run {run_id!r} of agent {name!r} on this replica; only the "
            "recent runs are kept"
        )
    return json(EvalRun.model_validate(handle.record()))
