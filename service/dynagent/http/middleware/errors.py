"""The one place where errors become HTTP statuses and JSON bodies."""

from __future__ import annotations

import json
import math
from typing import Any

from aiohttp import web
from loguru import logger

from dynagent.exceptions import (
    CircuitOpen,
    DynagentError,
    ErrorKind,
    ResponseNotFound,
    RunError,
    SessionStoreUnavailable,
)
from dynagent.http.state import REVISION_HEADER, TRACE_HEADER, VARIANT_HEADER

STATUS: dict[ErrorKind, int] = {
    "bad_request": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "not_found": 404,
    "too_large": 413,
    "config_error": 400,
    "output_invalid": 422,
    "limit_exceeded": 429,
    "cost_limit": 429,
    "model_error": 502,
    "input_too_long": 400,
    "circuit_open": 502,
    "tool_error": 502,
    "timeout": 504,
    "unavailable": 503,
    "conflict": 409,
}

_HTTP_KINDS = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    408: "request_timeout",
    413: "too_large",
    415: "unsupported_media_type",
}


OPENAI_PATHS = ("/v1/chat/", "/v1/models", "/v1/responses")
"""Routes that answer in OpenAI's error shape; our own routes keep theirs."""

_OPENAI_CODES: dict[str, str | None] = {
    "bad_request": None,
    "config_error": None,
    "unauthorized": "invalid_api_key",
    "forbidden": "permission_denied",
    "not_found": "model_not_found",
    "too_large": "request_too_large",
    "input_too_long": "context_length_exceeded",
}
"""OpenAI ``code`` of each kind the caller caused (``invalid_request_error``); every
other kind is a ``server_error`` whose code is the kind itself."""


def is_openai_path(path: str) -> bool:
    return path.startswith(OPENAI_PATHS)


def error_body(kind: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"type": kind, "message": message, **extra}}


def openai_error_body(
    kind: str, message: str, status: int, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """OpenAI's error body: ``{"error": {"message", "type", "param", "code"}}``."""
    if status < 500 and status not in (422, 429):
        kind_type, default = "invalid_request_error", _OPENAI_CODES.get(kind, kind)
    else:
        kind_type, default = "server_error", kind
    return {
        "error": {"message": message, "type": kind_type, "param": param, "code": code or default}
    }


def error_response(
    kind: str, message: str, status: int, *, openai: bool = False, **extra: Any
) -> web.Response:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    if openai:
        body = openai_error_body(kind, message, status, extra.get("param"), extra.get("code"))
    else:
        body = error_body(kind, message, **extra)
    return web.json_response(body, status=status, headers=headers)


def from_error(error: DynagentError, *, openai: bool = False) -> web.Response:
    extra: dict[str, Any] = {}
    trace_id = getattr(error, "trace_id", "")
    if trace_id and not openai:
        extra["trace_id"] = trace_id
    if openai and error.param:
        extra["param"] = error.param
    if openai and isinstance(error, ResponseNotFound):
        extra["code"] = "response_not_found"
    status = STATUS.get(error.kind, 502)
    response = error_response(error.kind, error.message, status, openai=openai, **extra)
    if isinstance(error, RunError) and error.revision:
        response.headers[REVISION_HEADER] = error.revision
        response.headers[VARIANT_HEADER] = error.variant
    if trace_id:
        response.headers[TRACE_HEADER] = trace_id
    retry_after = _retry_after(error, status)
    if retry_after is not None:  # whole seconds, never 0: clients must not spin
        response.headers["Retry-After"] = str(max(math.ceil(retry_after), 1))
    if isinstance(error, RunError) and error.final:
        response.headers[SHOULD_RETRY] = "false"
    return response


SHOULD_RETRY = "X-Should-Retry"
"""Whether a client's automatic retry may help. The ``openai`` SDKs (Python and Node) and
the clients built on them (LangChain, LiteLLM, pydantic-ai, the Agents SDK) retry 408,
409, 429 and every 5xx on their own, twice by default, unless this header says ``false``."""


UNAVAILABLE_RETRY_AFTER = 1.0
"""``Retry-After`` of a 503 whose error names no better time: an outage of a store or of the
config center, a replica stopping (the next try reaches another)."""


def _retry_after(error: DynagentError, status: int) -> float | None:
    if isinstance(error, CircuitOpen | SessionStoreUnavailable):
        return error.retry_after
    return UNAVAILABLE_RETRY_AFTER if status == 503 else None


CLIENT_CLOSED = 499
"""What a response to a caller that went away is recorded as (nginx's code); never sent."""


SHOWN_PATH = 200
"""Characters of a request's path an error about its route quotes."""


def http_error(request: web.Request, exc: web.HTTPException, *, openai: bool) -> web.Response:
    """The JSON answer for aiohttp's own 4xx and 5xx (no route, wrong method, too large)."""
    kind = _HTTP_KINDS.get(exc.status, "http_error")
    message = exc.reason or kind
    if exc.status == 413 and exc.text:  # name the limit the body went over
        message = f"{exc.text} Send a smaller body (listen.max_body_bytes)."
    elif exc.status in (404, 405) and exc.text == f"{exc.status}: {exc.reason}":  # the router's
        message = f"{message}: {_route_help(request, exc)}"
    response = error_response(kind, message, exc.status, openai=openai)
    if "Allow" in exc.headers:  # a 405 must say which methods are allowed
        response.headers["Allow"] = exc.headers["Allow"]
    return response


def _route_help(request: web.Request, exc: web.HTTPException) -> str:
    """What a caller who asked for a route this service does not have should read."""
    path = request.path
    if len(path) > SHOWN_PATH:
        path = path[:SHOWN_PATH] + "…"
    if exc.status == 405:
        allowed = exc.headers.get("Allow", "")
        return f"{path} takes {allowed or 'no method'}, not {request.method}"
    return f"this service has no {request.method} {path}; GET /openapi.json lists its routes"


def unexpected_error(request: web.Request, exc: Exception, *, openai: bool) -> web.Response:
    """The answer for any other exception, called while it is handled: never a stack trace,
    never a 500 for bad input."""
    if isinstance(exc, json.JSONDecodeError | UnicodeDecodeError):
        return error_response(
            "bad_request", f"the body is not valid JSON: {exc}", 400, openai=openai
        )
    if isinstance(exc, ConnectionResetError):
        # The caller stopped reading (a stream it closed): nobody is left to answer, and
        # the run's own record already says "disconnected". One line, no traceback.
        logger.info("{} {}: the client closed the connection", request.method, request.path)
        return web.Response(status=CLIENT_CLOSED)
    logger.exception("unhandled error on {} {}", request.method, request.path)
    message = "internal error; the service log has details"
    return error_response("internal", message, 500, openai=openai)
