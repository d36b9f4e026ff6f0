"""CORS for browser apps: ``cors.allow_origins`` (default none) names the origins that
may call the API; preflight requests are answered before authentication, since a
browser sends them without the ``Authorization`` header."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection

from aiohttp import web

from dynagent.http.middleware.errors import SHOULD_RETRY, error_response
from dynagent.http.state import REVISION_HEADER, TRACE_HEADER, VARIANT_HEADER

ALLOW_METHODS = "GET, POST, DELETE, OPTIONS"
ALLOW_HEADERS = "Authorization, Content-Type, X-Agent-Variant, X-Canary-Key"
EXPOSE_HEADERS = ", ".join(
    (REVISION_HEADER, VARIANT_HEADER, TRACE_HEADER, "X-Ignored-Fields", "Retry-After", SHOULD_RETRY)
)
MAX_AGE = "600"

Prepare = Callable[[web.Request, web.StreamResponse], Awaitable[None]]


def allowed_origin(origins: Collection[str], origin: str | None) -> str | None:
    """The ``Access-Control-Allow-Origin`` value for ``origin``, or None: not allowed."""
    if not origin:
        return None
    if "*" in origins:
        return "*"
    return origin if origin in origins else None


def is_preflight(request: web.Request) -> bool:
    return request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers


def preflight(request: web.Request, origins: Collection[str]) -> web.Response:
    """The answer to a preflight request: the methods and headers, or a 403."""
    allowed = allowed_origin(origins, request.headers.get("Origin"))
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


def cors_headers(origins: Collection[str]) -> Prepare | None:
    """The ``on_response_prepare`` hook that adds the CORS headers (it also reaches
    streamed answers, whose headers go out early); None when no origin may call: then no
    response gets them, and no request pays for asking."""
    if not origins:
        return None
    origins = frozenset(origins)

    async def add_cors_headers(request: web.Request, response: web.StreamResponse) -> None:
        if request.method == "OPTIONS" or "Access-Control-Allow-Origin" in response.headers:
            return
        allowed = allowed_origin(origins, request.headers.get("Origin"))
        if allowed is None:
            return
        response.headers["Access-Control-Allow-Origin"] = allowed
        response.headers["Access-Control-Expose-Headers"] = EXPOSE_HEADERS
        if allowed != "*":
            response.headers.add("Vary", "Origin")

    return add_cors_headers
