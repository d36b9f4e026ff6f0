"""Writing JSON bodies and server-sent events: one encoder for every route."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}

_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str).encode


def dumps(value: Any) -> str:
    """Compact JSON text, non-ASCII kept as is."""
    return _encode(value)


async def open_stream(request: web.Request, headers: dict[str, str]) -> web.StreamResponse:
    response = web.StreamResponse(headers=headers)
    await response.prepare(request)
    return response


def event(name: str, data: Any) -> bytes:
    """One named server-sent event."""
    return f"event: {name}\ndata: {_encode(data)}\n\n".encode()
