"""Writing JSON bodies and server-sent events: one encoder for every route."""

from __future__ import annotations

import json as _json
from collections.abc import Callable, Mapping
from typing import Any, Literal

from aiohttp import web
from pydantic import BaseModel

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}

_encode = _json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str).encode


def dumps(value: Any) -> str:
    """Compact JSON text, non-ASCII kept as is."""
    return _encode(value)


def json(
    model: BaseModel,
    *,
    status: int = 200,
    headers: Mapping[str, str] | None = None,
    omit: Literal["unset", "none"] = "unset",
    dumps: Callable[[Any], str] = _json.dumps,
) -> web.Response:
    """``model`` as a JSON answer, by alias, without the fields it was not given (a body
    validated from the core's dict keeps exactly that dict's keys), or, ``omit="none"``,
    without its None fields (A2A's wire form)."""
    body = model.model_dump(
        mode="json", by_alias=True, exclude_unset=omit == "unset", exclude_none=omit == "none"
    )
    return web.json_response(body, status=status, headers=headers, dumps=dumps)


async def open_stream(request: web.Request, headers: dict[str, str]) -> web.StreamResponse:
    response = web.StreamResponse(headers=headers)
    await response.prepare(request)
    return response


def event(name: str, data: Any) -> bytes:
    """One named server-sent event."""
    return f"event: {name}\ndata: {_encode(data)}\n\n".encode()
