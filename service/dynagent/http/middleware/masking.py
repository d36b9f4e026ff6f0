"""The last stop before a response leaves: known secrets masked in its body.

Run events are masked where they are made (``Agent``), which covers streams and
traces; this catches what is built from other values — a run's final output in a JSON
answer, a status, an error message, the metrics text.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from dynagent.http.state import service


@web.middleware
async def mask_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    response: web.StreamResponse = await handler(request)
    secrets = service(request).secrets
    if len(secrets) and isinstance(response, web.Response) and isinstance(response.body, bytes):
        try:
            text = response.body.decode()
        except UnicodeDecodeError:
            return response
        masked = secrets.mask(text)
        if masked != text:
            response.body = masked.encode()
    return response
