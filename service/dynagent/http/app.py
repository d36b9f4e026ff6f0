"""The aiohttp application: the service's routes and its one middleware, nothing more.

``create_app`` builds a ``Service`` (or takes one) and runs it for the app's
lifetime through one ``cleanup_ctx``; every route reads the service under one key.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence

from aiohttp import hdrs, web

from dynagent.config import ServiceConfig
from dynagent.core.service import FactoryMaker, Service
from dynagent.core.tracing import RunTracer
from dynagent.http import routing
from dynagent.http._routes import DOCUMENT, route_of
from dynagent.http.middleware.cors import cors_headers
from dynagent.http.middleware.front import front_middleware
from dynagent.http.openapi import openapi_json
from dynagent.http.ops import ui
from dynagent.http.state import SERVICE
from dynagent.interceptors.registry import InterceptorRegistry
from dynagent.masking import SecretValues
from dynagent.spec.agent import AgentSpec
from dynagent.tools.registry import ToolRegistry

OPEN_PATHS = frozenset({"/healthz", "/readyz", "/openapi.json"})


def create_app(
    config: ServiceConfig,
    *,
    tools: ToolRegistry | None = None,
    interceptors: InterceptorRegistry | None = None,
    specs: Sequence[AgentSpec] = (),
    factories: Sequence[FactoryMaker] = (),
    environ: Mapping[str, str] | None = None,
    secrets: SecretValues | None = None,
    tracer: RunTracer | None = None,
) -> web.Application:
    """The service as an aiohttp app; agents load when the app starts (see ``Service``)."""
    service = Service.create(
        config,
        tools=tools,
        interceptors=interceptors,
        specs=specs,
        factories=factories,
        environ=environ,
        secrets=secrets,
        tracer=tracer,
    )
    return app_for(service)


def app_for(service: Service) -> web.Application:
    """The routes of ``service``, which the app starts and stops with itself."""
    app = web.Application(client_max_size=service.config.listen.max_body_bytes)
    app[SERVICE] = service
    add_cors = cors_headers(service.config.cors.allow_origins)
    if add_cors is not None:
        app.on_response_prepare.append(add_cors)
    app.on_response_prepare.append(_close_when_stopping)
    app.cleanup_ctx.append(_running)
    app.on_shutdown.append(_stopping)
    routing.install(app)
    open_paths = OPEN_PATHS | ({"/metrics"} if service.config.metrics.public else set())
    open_routes = (route for route in app.router.routes() if route.name in ui.OPEN_ROUTES)
    run_routes = (r for r in app.router.routes() if (of := route_of(r.handler)) and of.runs)
    app.middlewares.append(
        front_middleware(
            service, open_paths=open_paths, open_routes=open_routes, run_routes=run_routes
        )
    )
    # Written now, from the routes served (raises for one that has no Route), and not
    # while the first request to it holds the loop.
    app[DOCUMENT] = openapi_json(app)
    return app


async def _close_when_stopping(request: web.Request, response: web.StreamResponse) -> None:
    """A stopping service answers with ``Connection: close``: a balancer does not send the
    next request on a connection the service is about to close."""
    if request.app[SERVICE].stopping.is_set():
        # aiohttp has computed its headers by now: the header says it, force_close does it.
        response.headers[hdrs.CONNECTION] = "close"
        response.force_close()


async def _running(app: web.Application) -> AsyncIterator[None]:
    async with app[SERVICE].running():
        yield


async def _stopping(app: web.Application) -> None:
    # aiohttp has stopped listening (after the lame-duck time, if any); running requests
    # are left to finish.
    await app[SERVICE].begin_stopping()
    app[SERVICE].begin_drain()
