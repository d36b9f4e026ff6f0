"""The aiohttp application: routes, middlewares, and the resources it owns.

Every long-lived resource (model clients, HTTP tool sessions, the session
store, the factories and their watchers) is created and torn down by one
``cleanup_ctx`` generator, in reverse order.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from aiohttp import web
from loguru import logger

from .._mcp_setup import mcp_servers
from ..builder import AgentBuilder
from ..config import ServiceConfig
from ..environment import service_policy
from ..exceptions import ConfigError
from ..factories.base import AgentBuilderFactory
from ..factories.default import DefaultAgentBuilderFactory
from ..factories.nacos import NacosAgentBuilderFactory
from ..factories.nacos_prompt import NacosPromptAgentBuilderFactory
from ..factories.spring_ai_alibaba import SpringAiAlibabaAgentBuilderFactory
from ..interceptors.registry import InterceptorRegistry
from ..masking import SecretValues
from ..registry import AgentRegistry
from ..resources import Resources
from ..rollout_decisions import RolloutDecisions
from ..sessions.base import SessionStore
from ..sessions.memory import MemorySessionStore
from ..sessions.sqlite import SqliteSessionStore
from ..sources._nacos_a2a import NacosA2aDirectory
from ..spec import AgentSpec
from ..tools.registry import ToolRegistry
from . import a2a, admin, agents, feedback, mcp, openai_compat, openai_models, responses, ui
from .auth import ApiKeys
from .cors import add_cors_headers, cors_middleware
from .drain import Drain
from .errors import error_middleware
from .gauges import RegistryGauges
from .keys_watch import KeysFileWatch
from .masking import mask_middleware
from .metrics import Metrics
from .openapi import openapi_json
from .response_store import ResponseStore
from .shadows import ShadowRunner
from .state import (
    API_KEYS,
    CALLER,
    CONFIG,
    DECISIONS,
    DRAIN,
    FACTORIES,
    KEYS_WATCH,
    MCP,
    METRICS,
    REGISTRY,
    RESPONSES,
    SECRETS,
    SHADOWS,
    TRACER,
    TRACES,
)
from .traces import TraceStore
from .tracing import RunTracer

OPEN_PATHS = frozenset({"/healthz", "/readyz", "/openapi.json"})

FactoryMaker = Callable[[AgentBuilder, ServiceConfig], AgentBuilderFactory]
"""Makes an extra factory (the Nacos ones) from the shared builder and the config."""


@web.middleware
async def auth_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    public = request.path == "/metrics" and request.app[CONFIG].metrics.public
    open_route = request.match_info.route.name in ui.OPEN_ROUTES
    if request.path not in OPEN_PATHS and not public and not open_route:
        request[CALLER] = request.app[API_KEYS].authenticate(request.headers.get("Authorization"))
    response: web.StreamResponse = await handler(request)
    return response


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    registry = request.app[REGISTRY]
    body = {
        "status": "ready" if registry.ready else "loading",
        "agents": len(registry),
        "degraded": registry.degraded,
    }
    return web.json_response(body, status=200 if registry.ready else 503)


async def metrics(request: web.Request) -> web.Response:
    """Every series for an admin or metrics key (or ``metrics.public``); a key limited to
    some agents sees theirs only, without the totals."""
    who = request.get(CALLER)
    agents = None if who is None else who.metrics_scope()
    registry = request.app[REGISTRY]
    request.app[METRICS].agents.set(len(registry))
    request.app[METRICS].set_canaries(
        (e.name, e.canary.policy.weight if e.canary.serving else 0.0, e.canary.policy.step)
        for e in registry
        if e.canary is not None
    )
    body = request.app[METRICS].exposition(agents)
    return web.Response(body=body, content_type="text/plain")


async def openapi(request: web.Request) -> web.Response:
    return web.Response(body=openapi_json(), content_type="application/json")


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
    """The service as an aiohttp app; agents load when the app starts.

    ``secrets``: the set the log sink masks (``dynagent serve`` passes its own), filled
    with API keys and credentials from the environment as they become known. ``tracer``
    (default: OpenTelemetry when the ``otel`` extra is installed and ``OTEL_*`` asks)."""
    environ = os.environ if environ is None else environ
    app = web.Application(
        middlewares=[cors_middleware, mask_middleware, error_middleware, auth_middleware],
        client_max_size=config.listen.max_body_bytes,
    )
    app.on_response_prepare.append(add_cors_headers)
    _install_state(app, config, environ, SecretValues() if secrets is None else secrets)
    tracer = tracer or _otel(environ)
    if tracer is not None:
        app[TRACER] = tracer
        app[SHADOWS].tracer = tracer
        app.on_cleanup.append(lambda _: tracer.aclose())
    app.cleanup_ctx.append(_lifecycle(tools, interceptors, specs, factories, environ))
    app.cleanup_ctx.append(_rollouts)
    if config.auth.keys_file is not None:
        app.cleanup_ctx.append(_keys_watch(environ))
    app.on_shutdown.append(_draining)
    app.on_shutdown.append(a2a.withdraw_registration)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/openapi.json", openapi)
    openapi_json()  # built at start, not while the first request to it holds the loop
    app.add_routes(agents.routes)
    app.add_routes(admin.routes)
    app.add_routes(feedback.routes)
    app.add_routes(openai_compat.routes)
    app.add_routes(openai_models.routes)
    app.add_routes(responses.routes)
    app.add_routes(a2a.routes)
    app.add_routes(mcp.routes)
    ui.install(app, environ)
    return app


def _install_state(
    app: web.Application, config: ServiceConfig, environ: Mapping[str, str], secrets: SecretValues
) -> None:
    """The app's state under its typed keys; the registry's changes feed the metrics."""
    registry = AgentRegistry()
    app[CONFIG] = config
    app[FACTORIES] = {}
    app[REGISTRY] = registry
    app[TRACES] = TraceStore(config.traces.max_traces, max_bytes=config.traces.max_bytes)
    app[METRICS] = Metrics()
    app[METRICS].registry.register(RegistryGauges(registry))
    app[API_KEYS] = ApiKeys.from_config(environ, config.auth)
    app[SECRETS] = secrets
    secrets.add(app[API_KEYS].secrets)
    app[DRAIN] = Drain()
    app[SHADOWS] = ShadowRunner(registry, app[METRICS], app[TRACES])
    app[DECISIONS] = RolloutDecisions(registry, app[FACTORIES])
    app[DECISIONS].attach()
    app[RESPONSES] = ResponseStore()
    app[MCP] = mcp_servers(config)

    def count_change(name: str, what: str) -> None:
        if what == "removed":
            app[METRICS].forget(name)
        else:
            app[METRICS].reloads.labels(name, what).inc()

    registry.listeners.append(count_change)


Lifecycle = Callable[[web.Application], AsyncIterator[None]]


def _keys_watch(environ: Mapping[str, str]) -> Lifecycle:
    async def watch(app: web.Application) -> AsyncIterator[None]:
        watcher = await asyncio.to_thread(  # it looks at the file: off the loop
            KeysFileWatch, app[API_KEYS], app[CONFIG].auth, environ, app[SECRETS]
        )
        app[KEYS_WATCH] = watcher
        async with watcher.running():
            yield

    return watch


async def _rollouts(app: web.Application) -> AsyncIterator[None]:
    """Progressive steps and the guard's write-backs run once the agents are loaded; shadow
    runs and pending writes end before the factories stop (cleanup runs in reverse)."""
    app[DECISIONS].start()
    yield
    await app[SHADOWS].aclose()
    await app[DECISIONS].aclose()


def _lifecycle(
    tools: ToolRegistry | None,
    interceptors: InterceptorRegistry | None,
    specs: Sequence[AgentSpec],
    factories: Sequence[FactoryMaker],
    environ: Mapping[str, str],
) -> Lifecycle:
    """The one ``cleanup_ctx`` that owns every long-lived resource, torn down in reverse."""

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        config, registry = app[CONFIG], app[REGISTRY]
        resources = Resources()
        # Off the loop: opening SQLite, a new folder and the plugin scan are file I/O.
        store = await asyncio.to_thread(_session_store, config)
        auth = config.auth
        work_dir = await asyncio.to_thread(tempfile.mkdtemp, prefix="dynagent-a2a-directory-")
        directory = NacosA2aDirectory(config.nacos, Path(work_dir))
        builder = AgentBuilder(
            tools=await asyncio.to_thread(lambda: tools or ToolRegistry.default()),
            interceptors=await asyncio.to_thread(
                lambda: interceptors or InterceptorRegistry.default()
            ),
            resources=resources,
            sessions=store,
            environ=environ,
            environment=service_policy(
                config.environment.allow,
                (auth.keys_env, auth.admin_keys_env, auth.metrics_keys_env),
            ),
            secrets=app[SECRETS],
            mcp=app[MCP],
            agents=registry,
            a2a=directory.url_of,
        )
        chosen = [
            *configured_factories(builder, config, specs),
            *(make(builder, config) for make in factories),
        ]
        started: list[AgentBuilderFactory] = []
        registrar = None
        try:
            await _start_all(chosen, registry, started)
            for factory in started:
                app[FACTORIES][factory.name] = factory
            registrar = await a2a.start_registrar(app)
            registry.mark_ready()
            logger.info("serving {} agents", len(registry))
            yield
        finally:
            if registrar is not None:
                await registrar.stop()
            for factory in reversed(started):
                await factory.stop()
            await store.aclose()
            await app[MCP].aclose()
            await directory.aclose()
            await resources.aclose()
            logger.info("stopped")

    return lifecycle


async def _start_all(
    factories: Sequence[AgentBuilderFactory],
    registry: AgentRegistry,
    started: list[AgentBuilderFactory],
) -> None:
    """Start the factories side by side: with Nacos down each waits for its connect
    timeout, and one after another they would keep the port closed that many times
    longer. ``started`` gets those that started, in their given order; the first
    failure is raised once all have settled."""
    results = await asyncio.gather(
        *(factory.start(registry) for factory in factories), return_exceptions=True
    )
    started += [f for f, r in zip(factories, results, strict=True) if r is None]
    for result in results:
        if isinstance(result, BaseException):
            raise result


async def _draining(app: web.Application) -> None:
    # aiohttp has stopped listening; running requests are left to finish.
    seconds = app[CONFIG].listen.drain_seconds
    logger.info(
        "stopping: no new connections; {} running request(s) have up to {:g} s to finish",
        app[DRAIN].running,
        seconds,
    )
    app[DRAIN].begin(seconds)


def _otel(environ: Mapping[str, str]) -> RunTracer | None:
    try:
        from .otel import OtelTracer  # the optional ``otel`` extra
    except ImportError:
        return None
    return OtelTracer.from_environ(environ)


def configured_factories(
    builder: AgentBuilder, config: ServiceConfig, specs: Sequence[AgentSpec] = ()
) -> list[AgentBuilderFactory]:
    """The factories the config asks for: the local default one always, Nacos ones on demand."""
    chosen: list[AgentBuilderFactory] = [
        DefaultAgentBuilderFactory(
            builder, directory=config.factories.default.directory, specs=specs
        )
    ]
    if config.factories.nacos:
        chosen.append(NacosAgentBuilderFactory(builder, config.nacos))
    if config.factories.spring_ai_alibaba:
        chosen.append(SpringAiAlibabaAgentBuilderFactory(builder, config.nacos))
    prompt_only = config.factories.nacos_prompt
    if prompt_only is not None and prompt_only.directory is not None:
        chosen.append(NacosPromptAgentBuilderFactory(builder, config.nacos, prompt_only.directory))
    return chosen


def _session_store(config: ServiceConfig) -> SessionStore:
    settings = config.sessions
    budget = settings.max_history_bytes
    if settings.store == "memory":
        return MemorySessionStore(budget)
    if settings.store == "redis":
        try:
            from ..sessions.redis import RedisSessionStore  # the optional ``redis`` extra
        except ImportError:
            raise ConfigError(
                "sessions.store: redis needs the redis package: pip install 'dynagent[redis]'"
            ) from None
        return RedisSessionStore(
            settings.url,
            key_prefix=settings.key_prefix,
            lock_ttl=settings.lock_ttl,
            history_bytes=budget,
        )
    return SqliteSessionStore(settings.path, budget)
