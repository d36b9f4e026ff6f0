"""Liveness, readiness, Prometheus metrics and the OpenAPI document."""

from __future__ import annotations

from aiohttp import web

from dynagent.http.openapi import openapi_json
from dynagent.http.state import CALLER, service

routes = web.RouteTableDef()


@routes.get("/healthz")
async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


@routes.get("/readyz")
async def readyz(request: web.Request) -> web.Response:
    registry = service(request).registry
    body = {
        "status": "ready" if registry.ready else "loading",
        "agents": len(registry),
        "degraded": registry.degraded,
    }
    return web.json_response(body, status=200 if registry.ready else 503)


@routes.get("/metrics")
async def metrics(request: web.Request) -> web.Response:
    """Every series for an admin or metrics key (or ``metrics.public``); a key limited to
    some agents sees theirs only, without the totals."""
    who = request.get(CALLER)
    agents = None if who is None else who.metrics_scope()
    the = service(request)
    the.metrics.agents.set(len(the.registry))
    the.metrics.set_canaries(
        (e.name, e.canary.policy.weight if e.canary.serving else 0.0, e.canary.policy.step)
        for e in the.registry
        if e.canary is not None
    )
    body = the.metrics.exposition(agents)
    return web.Response(body=body, content_type="text/plain")


@routes.get("/openapi.json")
async def openapi(request: web.Request) -> web.Response:
    return web.Response(body=openapi_json(), content_type="application/json")
