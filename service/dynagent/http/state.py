"""Typed application state: one ``web.AppKey`` per shared object."""

from __future__ import annotations

from aiohttp import web

from ..config import ServiceConfig
from ..factories.base import AgentBuilderFactory
from ..masking import SecretValues
from ..registry import AgentRegistry
from ..sources._nacos_a2a import NacosA2aRegistrar
from ..tools.mcp import McpServers
from .auth import ApiKeys, Caller
from .drain import Drain
from .keys_watch import KeysFileWatch
from .metrics import Metrics
from .response_store import ResponseStore
from .traces import TraceStore

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
MCP = web.AppKey("mcp", McpServers)
"""The MCP servers agents use and their pooled sessions."""

CALLER = web.RequestKey("caller", Caller)
"""The authenticated ``Caller`` of a request."""


def caller(request: web.Request) -> Caller:
    return request[CALLER]
