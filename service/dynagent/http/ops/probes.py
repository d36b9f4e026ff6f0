"""Liveness, readiness, Prometheus metrics and the OpenAPI document."""

from __future__ import annotations

import asyncio
from typing import Literal

from aiohttp import web

from dynagent.core.metrics import process_families
from dynagent.http._routes import DOCUMENT, Route, Routes
from dynagent.http.api.schemas import Health, Readiness
from dynagent.http.sse import json
from dynagent.http.state import CALLER, service

routes = Routes("service")


@routes.add(Route("GET", "/healthz", "Liveness", response=Health, public=True))
async def healthz(request: web.Request) -> web.Response:
    return json(Health(status="ok"))


@routes.add(
    Route(
        "GET",
        "/readyz",
        "Readiness",
        response=Readiness,
        responses={503: ("Not ready: the agents are still loading, or it is stopping", Readiness)},
        public=True,
    )
)
async def readyz(request: web.Request) -> web.Response:
    """200 once loaded: ``ready``, or ``degraded`` while a config source or the session
    store is out (the replica still serves what does not need it; taking every replica
    out of a balancer for a shared outage would fail those requests too). 503 once it is
    stopping, while it still serves, so that a balancer stops sending to it."""
    the = service(request)
    registry, degraded = the.registry, the.registry.degraded
    status: Literal["ready", "degraded", "loading", "stopping"]
    if the.stopping.is_set():
        status = "stopping"
    elif not registry.ready:
        status = "loading"
    else:
        status = "degraded" if degraded else "ready"
    body = Readiness(status=status, agents=len(registry), degraded=degraded)
    return json(body, status=200 if status in ("ready", "degraded") else 503)


@routes.add(
    Route(
        "GET",
        "/metrics",
        "Prometheus metrics (admin or metrics key)",
        content={"text/plain": {"type": "string"}},
        errors=(401, 403),
    )
)
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
    process = await asyncio.to_thread(process_families) if agents is None else ()
    body = the.metrics.exposition(agents, process)
    return web.Response(body=body, content_type="text/plain")


@routes.add(
    Route(
        "GET",
        "/openapi.json",
        "This document",
        content={"application/json": {"type": "object"}},
        public=True,
    )
)
async def openapi(request: web.Request) -> web.Response:
    return web.Response(body=request.app[DOCUMENT], content_type="application/json")
