"""``/ui/``: the operations page, served from files shipped in the package (``ui/``
beside this module: no CDN, no build step); the endpoints it reads are ``traces.py``
and ``live.py``.

The page's files hold no data and need no key; the page asks for one, keeps it in
``sessionStorage`` and sends it as a bearer header on every API call. The Content
Security Policy lets the page talk to this service only.
"""

from __future__ import annotations

import asyncio
import mimetypes
from pathlib import Path

from aiohttp import web

from dynagent.http._routes import Route, Routes

ASSETS = Path(__file__).with_name("ui")
FILES = frozenset(path.name for path in ASSETS.iterdir() if path.is_file())
"""The only files ever served: what the package ships, by name (no paths, no ``..``)."""
OPEN_ROUTES = frozenset({"ui-root", "ui-index", "ui-file"})
"""Route names the auth middleware lets through without a key."""
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
_TYPES = {".js": "text/javascript", ".css": "text/css", ".html": "text/html", ".png": "image/png"}

routes = Routes("operations page")


@routes.undocumented("GET", "/ui", name="ui-root")
async def root(request: web.Request) -> web.StreamResponse:
    raise web.HTTPMovedPermanently("/ui/")


@routes.add(
    Route(
        "GET",
        "/ui/",
        "The operations page (no key: it asks for one)",
        name="ui-index",
        public=True,
        description="The page",
        content={"text/html": {"type": "string"}},
    )
)
async def index(request: web.Request) -> web.StreamResponse:
    return await _file("index.html")


@routes.undocumented("GET", "/ui/{file}", name="ui-file")
async def asset(request: web.Request) -> web.StreamResponse:
    name = request.match_info["file"]
    if name not in FILES:
        raise web.HTTPNotFound(reason=f"no file {name!r} in the operations page")
    return await _file(name)


async def _file(name: str) -> web.Response:
    path = ASSETS / name
    kind = _TYPES.get(path.suffix) or mimetypes.guess_type(name)[0] or "application/octet-stream"
    charset = "utf-8" if kind.startswith("text/") else None
    body = await asyncio.to_thread(path.read_bytes)  # file I/O, off the loop
    return web.Response(body=body, content_type=kind, charset=charset, headers=HEADERS)
