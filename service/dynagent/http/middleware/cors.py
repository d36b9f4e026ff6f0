"""CORS for browser apps: ``cors.allow_origins`` (default none) names the origins that
may call the API; preflight requests are answered before authentication, since a
browser sends them without the ``Authorization`` header."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from dynagent.http.middleware.errors import error_response
from dynagent.http.state import REVISION_HEADER, TRACE_HEADER, VARIANT_HEADER, service

ALLOW_METHODS = "GET, POST, DELETE, OPTIONS"
ALLOW_HEADERS = "Authorization, Content-Type, X-Agent-Variant, X-Canary-Key"
EXPOSE_HEADERS = ", ".join(
    (REVISION_HEADER, VARIANT_HEADER, TRACE_HEADER, "X-Ignored-Fields", "Retry-After")
)
MAX_AGE = "600"


def _allowed(request: web.Request, origin: str | None) -> str | None:
    """The ``Access-Control-Allow-Origin`` value for ``origin``, or None: not allowed."""
    if not origin:
        return None
    origins = service(request).config.cors.allow_origins
    if "*" in origins:
        return "*"
    return origin if origin in origins else None


@web.middleware
async def cors_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    is_preflight = (
        request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers
    )
    if not is_preflight:
        response: web.StreamResponse = await handler(request)
        return response
    allowed = _allowed(request, request.headers.get("Origin"))
    if allowed is None:
        return error_response("forbidden", "this origin may not call the API (cors)", 403)
    requested = request.headers.get("Access-Control-Request-Headers")
    return web.Response(
        status=204,
        headers={
            "Access-Control-Allow-Origin": allowed,
            "Access-Control-Allow-Methods": ALLOW_METHODS,
            "Access-Control-Allow-Headers": requested or ALLOW_HEADERS,
            "Access-Control-Max-Age": MAX_AGE,
            "Vary": "Origin, Access-Control-Request-Method, Access-Control-Request-Headers",
        },
    )


async def add_cors_headers(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: also reaches streamed answers, whose headers go out early."""
    if request.method == "OPTIONS" or "Access-Control-Allow-Origin" in response.headers:
        return
    allowed = _allowed(request, request.headers.get("Origin"))
    if allowed is None:
        return
    response.headers["Access-Control-Allow-Origin"] = allowed
    response.headers["Access-Control-Expose-Headers"] = EXPOSE_HEADERS
    if allowed != "*":
        response.headers.add("Vary", "Origin")
