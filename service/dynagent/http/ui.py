"""``/ui/``: the operations page, served from files shipped in the package (``ui/``
beside this module: no CDN, no build step), and the wiring of the endpoints it reads.

The page's files hold no data and need no key; the page asks for one, keeps it in
``sessionStorage`` and sends it as a bearer header on every API call. The Content
Security Policy lets the page talk to this service only.
"""

from __future__ import annotations

import asyncio
import mimetypes
from collections.abc import Mapping
from pathlib import Path

from aiohttp import web

from . import live, ops
from .redact import Redactor
from .series import SERIES, RecentSeries
from .state import CONFIG, REGISTRY, SECRETS

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

routes = web.RouteTableDef()


@routes.get("/ui", name="ui-root")
async def root(request: web.Request) -> web.StreamResponse:
    raise web.HTTPMovedPermanently("/ui/")


@routes.get("/ui/", name="ui-index")
async def index(request: web.Request) -> web.StreamResponse:
    return await _file("index.html")


@routes.get("/ui/{file}", name="ui-file")
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


def install(app: web.Application, environ: Mapping[str, str]) -> None:
    """The page's routes and state: the 15-minute series, the definition mask, the
    watchers' stop signal."""
    series = app[SERIES] = RecentSeries()
    # What `dynagent serve` also hands the log mask: the page masks as the logs do.
    app[SECRETS].add([app[CONFIG].nacos.password, environ.get("OPENAI_API_KEY", "")])
    app[ops.REDACTOR] = Redactor(app[SECRETS])
    app[live.STOPPING] = asyncio.Event()

    def forget(name: str, what: str) -> None:
        if what == "removed":
            series.forget(name)

    app[REGISTRY].listeners.append(forget)

    async def stop_watchers(app: web.Application) -> None:
        app[live.STOPPING].set()

    app.on_shutdown.append(stop_watchers)
    app.add_routes(routes)
    app.add_routes(ops.routes)
    app.add_routes(live.routes)
