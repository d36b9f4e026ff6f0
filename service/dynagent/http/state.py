"""Typed application state: one ``web.AppKey`` per shared object."""

from __future__ import annotations

from aiohttp import web

from dynagent.a2a.nacos_registry import NacosA2aRegistrar
from dynagent.config import ServiceConfig
from dynagent.core.auth import ApiKeys, Caller
from dynagent.core.drain import Drain
from dynagent.core.keys_watch import KeysFileWatch
from dynagent.core.metrics import Metrics
from dynagent.core.response_store import ResponseStore
from dynagent.core.shadows import ShadowRunner
from dynagent.core.traces import TraceStore
from dynagent.core.tracing import RunTracer
from dynagent.factories.base import AgentBuilderFactory
from dynagent.masking import SecretValues
from dynagent.mcp.tools import McpServers
from dynagent.registry.facade import AgentRegistry
from dynagent.rollout.decisions import RolloutDecisions

VARIANT_HEADER = "X-Agent-Variant"
REVISION_HEADER = "X-Agent-Revision"
TRACE_HEADER = "X-Trace-Id"

REGISTRY = web.AppKey("registry", AgentRegistry)
TRACES = web.AppKey("traces", TraceStore)
METRICS = web.AppKey("metrics", Metrics)
API_KEYS = web.AppKey("api_keys", ApiKeys)
CONFIG = web.AppKey("config", ServiceConfig)
SECRETS = web.AppKey("secrets", SecretValues)
"""Values masked in logs and run events: API keys, and credentials taken from the environment."""
KEYS_WATCH = web.AppKey("keys_watch", KeysFileWatch)
"""Present when ``auth.keys_file`` is set."""
DRAIN = web.AppKey("drain", Drain)
"""Running requests, and their deadline once the service is stopping."""
RESPONSES = web.AppKey("responses", ResponseStore)
"""Responses API answers kept for ``GET /v1/responses/{id}`` and ``previous_response_id``."""
FACTORIES = web.AppKey("factories", dict[str, AgentBuilderFactory])
A2A_REGISTRAR = web.AppKey("a2a_registrar", NacosA2aRegistrar)
"""Present when ``a2a.register`` is on."""
"""The running factories by name (``default``, ``nacos``, ``nacos-prompt``)."""
TRACER = web.AppKey("tracer", RunTracer)
"""OpenTelemetry for runs; set only when the ``otel`` extra is installed and configured."""
SHADOWS = web.AppKey("shadows", ShadowRunner)
"""Shadow runs of the canaries (``rollout.shadow``), in the background."""
DECISIONS = web.AppKey("decisions", RolloutDecisions)
"""Writes rollout decisions (the guard's pulls, resumes) back into canary documents."""
MCP = web.AppKey("mcp", McpServers)
"""The MCP servers agents use and their pooled sessions."""

CALLER = web.RequestKey("caller", Caller)
"""The authenticated ``Caller`` of a request."""


def caller(request: web.Request) -> Caller:
    return request[CALLER]
