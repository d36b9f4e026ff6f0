"""Typed application state: the service behind the routes, and the request's caller."""

from __future__ import annotations

from aiohttp import web

from dynagent.core.auth import Caller
from dynagent.core.service import Service

VARIANT_HEADER = "X-Agent-Variant"
REVISION_HEADER = "X-Agent-Revision"
TRACE_HEADER = "X-Trace-Id"
CANARY_KEY_HEADER = "X-Canary-Key"

SERVICE = web.AppKey("service", Service)
"""The one object the routes serve: registry, traces, metrics, keys, drain …"""

CALLER = web.RequestKey("caller", Caller)
"""The authenticated ``Caller`` of a request."""


def service(request: web.Request) -> Service:
    return request.app[SERVICE]


def caller(request: web.Request) -> Caller:
    return request[CALLER]
