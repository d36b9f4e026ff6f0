"""``GET /v1/agents/{name}/capture``: the agent's recent answered runs on this replica as an
evaluation suite (a backtest from production), for ``dynagent eval capture``. Admin only:
a suite holds the inputs and tool results of everyone's runs (masked as traces are)."""

from __future__ import annotations

from aiohttp import web

from dynagent import _regex
from dynagent.core.capture import capture_suite
from dynagent.evals.capture import MAX_LAST
from dynagent.exceptions import BadRequest, Forbidden
from dynagent.http._routes import AGENT_ERRORS, Param, Route, Routes
from dynagent.http.api.schemas import CapturedSuite
from dynagent.http.query import whole_number
from dynagent.http.sse import json
from dynagent.http.state import caller, service
from dynagent.spec.agent import NAME_PATTERN

routes = Routes("evaluations")
_NAME = _regex.compile(NAME_PATTERN)
VARIANTS = ("stable", "canary")


@routes.add(
    Route(
        "GET",
        "/v1/agents/{name}/capture",
        "Recent answered runs as an evaluation suite: a backtest (admin key)",
        parameters=(
            Param(
                "last",
                "query",
                f"The last this many answered runs (default 50, at most {MAX_LAST})",
                {"type": "integer", "minimum": 1, "maximum": MAX_LAST},
            ),
            Param(
                "variant",
                "query",
                "Runs of this variant (default stable)",
                {"type": "string", "enum": list(VARIANTS)},
            ),
            Param(
                "judge",
                "query",
                "The judge agent the suite names (default judge-bot)",
                {"type": "string", "pattern": NAME_PATTERN},
            ),
        ),
        response=CapturedSuite,
        errors=(400, *AGENT_ERRORS),
    )
)
async def capture(request: web.Request) -> web.Response:
    """The last answered runs of the agent kept (by every replica, when the fleet shares a
    Redis), as a suite whose cases replay their recorded tool results and compare with the
    answer they gave."""
    name = request.match_info["name"]
    who = caller(request)
    who.check_agent(name)
    if not who.admin:
        raise Forbidden("capturing runs as a suite needs an admin API key")
    running = service(request)
    running.registry.entry(name)  # 404 for an unknown agent
    query = request.query
    last = whole_number(query.get("last"), "last", default=50, most=MAX_LAST)
    variant = query.get("variant", "stable")
    if variant not in VARIANTS:
        raise BadRequest("variant must be 'stable' or 'canary'")
    judge = query.get("judge", "judge-bot")
    if not _NAME.fullmatch(judge):
        raise BadRequest("judge must be an agent name (lowercase letters, digits, '-')")
    found = await capture_suite(
        running.traces,
        running.redactor,
        who,
        name,
        last=last,
        variant=variant,
        judge=judge,
    )
    return json(CapturedSuite.model_validate(found.as_dict(name, variant)))
