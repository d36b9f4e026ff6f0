"""The one middleware every request passes: CORS preflight, then the answer's secrets
masked, errors made JSON, the caller authenticated — in that order, in one function.

What depends only on the configuration and the routes (which routes are public, which
origins may call) is decided once, when the app is built, not per request.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from dynagent.core.service import Service
from dynagent.exceptions import DynagentError
from dynagent.http.middleware.cors import is_preflight, preflight
from dynagent.http.middleware.errors import (
    from_error,
    http_error,
    is_openai_path,
    unexpected_error,
)
from dynagent.http.middleware.masking import mask_body
from dynagent.http.state import CALLER


def front_middleware(
    service: Service,
    *,
    open_paths: Collection[str],
    open_routes: Iterable[web.AbstractRoute],
    run_routes: Iterable[web.AbstractRoute] = (),
) -> Middleware:
    """The middleware of ``service``'s app: ``open_paths`` and ``open_routes`` need no key
    (a path also covers its 404 and 405 answers, which have no route of their own); every
    route but ``run_routes`` first applies the ends of the runs before (``RunEnds``)."""
    origins = frozenset(service.config.cors.allow_origins)
    paths = frozenset(open_paths)
    routes = frozenset(open_routes)
    runs = frozenset(run_routes)
    run_ends = service.run_ends

    @web.middleware
    async def front(request: web.Request, handler: Handler) -> web.StreamResponse:
        if is_preflight(request):
            return preflight(request, origins)
        path = request.path
        openai = is_openai_path(path)
        route = request.match_info.route
        if route not in runs:
            run_ends.settle()
        try:
            if path not in paths and route not in routes:
                keys = service.api_keys
                request[CALLER] = keys.authenticate(request.headers.get("Authorization"))
            response = await handler(request)
        except DynagentError as exc:
            response = from_error(exc, openai=openai)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            response = http_error(request, exc, openai=openai)
        except Exception as exc:
            response = unexpected_error(request, exc, openai=openai)
        return mask_body(response, service.secrets)

    return front
