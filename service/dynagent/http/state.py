"""Typed application state: one ``web.AppKey`` per shared object."""

from __future__ import annotations

from aiohttp import web

from ..config import ServiceConfig
from ..factories.base import AgentBuilderFactory
from ..registry import AgentRegistry
from ..tools.mcp import McpServers
from .auth import ApiKeys, Caller
from .drain import Drain
from .metrics import Metrics
from .traces import TraceStore

VARIANT_HEADER = "X-Agent-Variant"
REVISION_HEADER = "X-Agent-Revision"
TRACE_HEADER = "X-Trace-Id"

REGISTRY = web.AppKey("registry", AgentRegistry)
TRACES = web.AppKey("traces", TraceStore)
METRICS = web.AppKey("metrics", Metrics)
API_KEYS = web.AppKey("api_keys", ApiKeys)
CONFIG = web.AppKey("config", ServiceConfig)
DRAIN = web.AppKey("drain", Drain)
"""Running requests, and their deadline once the service is stopping."""
FACTORIES = web.AppKey("factories", dict[str, AgentBuilderFactory])
"""The running factories by name (``default``, ``nacos``, ``nacos-prompt``)."""
MCP = web.AppKey("mcp", McpServers)
"""The MCP servers agents use and their pooled sessions."""

CALLER = web.RequestKey("caller", Caller)
"""The authenticated ``Caller`` of a request."""


def caller(request: web.Request) -> Caller:
    return request[CALLER]
