"""The small JSON endpoints behind the operations page (``/ui/``): who the key is,
recent runs, an agent's last 15 minutes, and one revision's definition. Same auth
and scoping as the rest of the API: a limited key sees only its agents."""

from __future__ import annotations

import yaml
from aiohttp import web

from dynagent.core.trace_list import listing
from dynagent.exceptions import BadRequest, NotFound
from dynagent.http._routes import AGENT_ERRORS, Param, Route, Routes
from dynagent.http.ops.ui_schemas import (
    AgentSeries,
    RevisionDefinition,
    TraceList,
    TraceSummary,
    WhoAmI,
)
from dynagent.http.query import whole_number
from dynagent.http.sse import json
from dynagent.http.state import caller, service

routes = Routes("operations page")
TRACE_FILTERS = ("agent", "variant", "status", "session_id")
VARIANTS = ("stable", "canary")
STATUSES = ("ok", "error", "unfinished")
MAX_LIMIT = 500
_VARIANT = {"type": "string", "enum": list(VARIANTS)}


@routes.add(
    Route("GET", "/v1/whoami", "What the caller's key may do", response=WhoAmI, errors=(401,))
)
async def whoami(request: web.Request) -> web.Response:
    """What the caller's key may do; the page hides what it may not."""
    who = caller(request)
    return json(
        WhoAmI(
            name=who.name,
            admin=who.admin,
            agents=None if who.agents is None else sorted(who.agents),
            auth=service(request).api_keys.enabled,
        )
    )


@routes.add(
    Route(
        "GET",
        "/v1/traces",
        "The caller's recent runs (an admin's: everyone's), newest first",
        parameters=(
            Param("agent", "query", "Only runs of this agent"),
            Param("variant", "query", "Only runs of this variant", _VARIANT),
            Param(
                "status",
                "query",
                "Only runs that ended so",
                {"type": "string", "enum": list(STATUSES)},
            ),
            Param("session_id", "query", "Only runs of this session"),
            Param(
                "limit",
                "query",
                "At most this many (default 100)",
                {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT},
            ),
        ),
        response=TraceList,
        errors=(400, 401),
    )
)
async def list_traces(request: web.Request) -> web.Response:
    """The caller's recent runs (every run, for an admin), newest first, filtered by
    agent, variant, status and session."""
    who = caller(request)
    wanted = {key: request.query[key] for key in TRACE_FILTERS if key in request.query}
    for key, allowed in (("variant", VARIANTS), ("status", STATUSES)):
        if key in wanted and wanted[key] not in allowed:
            raise BadRequest(f"{key} must be one of {', '.join(allowed)}")
    limit = whole_number(request.query.get("limit"), "limit", default=100, most=MAX_LIMIT)
    redactor = service(request).redactor
    # Every replica's runs when the fleet shares a Redis (core/trace_list.py).
    listed = await listing(service(request).traces, who, wanted, limit)
    found = [TraceSummary.model_validate(redactor.value(summary)) for summary in listed]
    return json(TraceList(traces=found))


@routes.add(
    Route(
        "GET",
        "/v1/agents/{name}/series",
        "Requests, errors, mean latency per 30 s, last 15 min",
        response=AgentSeries,
        errors=AGENT_ERRORS,
    )
)
async def agent_series(request: web.Request) -> web.Response:
    """The agent's requests, errors and mean latency per 30 s over the last 15 minutes."""
    name = request.match_info["name"]
    caller(request).check_agent(name)
    service(request).registry.entry(name)  # 404 for an unknown agent
    return json(AgentSeries.model_validate({"name": name, **service(request).series.of(name)}))


@routes.add(
    Route(
        "GET",
        "/v1/agents/{name}/revisions/{revision}",
        "One revision's definition, credentials masked",
        parameters=(Param("variant", "query", "Of this variant", _VARIANT),),
        response=RevisionDefinition,
        errors=(400, *AGENT_ERRORS),
    )
)
async def revision_definition(request: web.Request) -> web.Response:
    """One revision's definition (credentials masked), for the page's diff."""
    name, revision = request.match_info["name"], request.match_info["revision"]
    caller(request).check_agent(name)
    variant = request.query.get("variant")
    if variant not in (None, "stable", "canary"):
        raise BadRequest("variant must be 'stable' or 'canary'")
    history = service(request).registry.history(name)
    record = next(
        (r for r in reversed(history) if r.revision == revision and variant in (None, r.variant)),
        None,
    )
    if record is None:
        raise NotFound(f"revision {revision!r} is not in the history of agent {name!r}")
    spec = record.agent.spec.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    definition = service(request).redactor.definition(spec)
    text = yaml.safe_dump(definition, sort_keys=False, allow_unicode=True)
    answer = {**record.as_dict(), "name": name, "definition": definition, "text": text}
    return json(RevisionDefinition.model_validate(answer))
