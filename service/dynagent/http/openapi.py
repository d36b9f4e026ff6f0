"""The OpenAPI 3.1 document of the HTTP API, written from the app's router: every route
served carries its ``Route`` (``_routes.py``), declared beside its handler in the same
pydantic models that read its body and write its answer, so they cannot drift apart.
Schemathesis runs the whole document against the service (tests/security/test_openapi_fuzz.py).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping

from aiohttp import web
from pydantic import BaseModel

from dynagent import _regex
from dynagent.http import routing
from dynagent.http._routes import ERRORS, PATH_PATTERNS, SSE, Route, Schema, route_of

UNDOCUMENTED: Mapping[tuple[str, str], str] = {
    ("GET", "/ui"): "a redirect to /ui/, the operations page",
    ("GET", "/ui/{file}"): "the page's script, style and images; GET /ui/ documents the page",
}
"""Routes served without an operation in the document, and why. Besides these, the HEAD
route aiohttp adds beside each GET route (the GET's answer without a body) is the GET's."""
JSON = "application/json"
_REF = "#/components/schemas/{model}"
_PATH_PARAMETER = _regex.compile(r"\{([^}:]+)")
_EVENT: Schema = {
    "type": "object",
    "description": "One server-sent event: the event type, and its JSON as data",
    "properties": {"event": {"type": "string"}, "data": {"type": "string"}},
    "required": ["data"],
}


class UndocumentedRoute(RuntimeError):
    """A route the app serves has no ``Route``: the document would not show it."""


def openapi_json(app: web.Application) -> bytes:
    """The document as served."""
    return json.dumps(openapi_document(app)).encode()


def openapi_document(app: web.Application | None = None) -> Schema:
    """The document of ``app``'s routes (default: every route of the service)."""
    if app is None:
        app = web.Application()
        routing.install(app)
    routes = operations(app)
    paths: dict[str, Schema] = {}
    for route in routes:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route)
    return {
        "openapi": "3.1.0",
        "info": {"title": "Dynagent", "version": "1"},
        "paths": paths,
        "components": {
            "schemas": _components(routes),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }


def operations(app: web.Application) -> list[Route]:
    """The ``Route`` of every route ``app`` serves, in the order they were added; raises
    ``UndocumentedRoute`` for a route that has none and is not ``UNDOCUMENTED``."""
    served = [(route.method, _path_of(route), route.handler) for route in app.router.routes()]
    gets = {(path, handler) for method, path, handler in served if method == "GET"}
    found = []
    for method, path, handler in served:
        if (method, path) in UNDOCUMENTED or (method == "HEAD" and (path, handler) in gets):
            continue
        route = route_of(handler)
        if route is None:
            raise UndocumentedRoute(
                f"{method} {path} has no Route: add it with Routes.add, or list it in "
                "openapi.UNDOCUMENTED with the reason"
            )
        if (route.method, route.path) != (method, path):
            raise UndocumentedRoute(
                f"{method} {path} is served by the handler of {route.method} {route.path}"
            )
        found.append(route)
    return found


def _path_of(route: web.AbstractRoute) -> str:
    if route.resource is None:
        raise UndocumentedRoute(f"{route.method} {route.handler!r} has no path")
    return route.resource.canonical


def _operation(route: Route) -> Schema:
    operation: Schema = {"summary": route.summary}
    if route.tags:
        operation["tags"] = list(route.tags)
    parameters = [*_path_parameters(route), *(p.document() for p in route.parameters)]
    if parameters:
        operation["parameters"] = parameters
    if route.request is not None:
        operation["requestBody"] = {
            "required": route.request_required,
            "content": {JSON: {"schema": _request_schema(route.request)}},
        }
    if route.public:
        operation["security"] = []
    operation["responses"] = {
        "200": _ok(route),
        **{str(code): _answer(*answer) for code, answer in route.responses.items()},
        **{str(code): _answer(ERRORS[code], route.error_body) for code in route.errors},
    }
    return operation


def _path_parameters(route: Route) -> list[Schema]:
    found = []
    for match in _PATH_PARAMETER.finditer(route.path):
        name = match.group(1) or ""
        schema: Schema = {"type": "string", "minLength": 1}
        pattern = route.path_patterns.get(name) or PATH_PATTERNS.get(name)
        if pattern:
            schema["pattern"] = pattern
        found.append({"name": name, "in": "path", "required": True, "schema": schema})
    return found


def _request_schema(request: type[BaseModel] | tuple[type[BaseModel], ...]) -> Schema:
    if isinstance(request, tuple):
        return {"anyOf": [_ref(model) for model in request]}
    return _ref(request)


def _ok(route: Route) -> Schema:
    content = {kind: {"schema": schema} for kind, schema in (route.content or {}).items()}
    if route.response is not None:
        content[JSON] = {"schema": _ref(route.response)}
    for kind in route.streams:
        if kind != SSE:
            raise ValueError(f"{route.method} {route.path}: streams are {SSE} only")
        content[kind] = {"schema": _event(route.stream_item)}
    answer: Schema = {"description": route.description, "content": content}
    if route.headers:
        answer["headers"] = dict(route.headers)
    return answer


def _event(item: type[BaseModel] | None) -> Schema:
    if item is None:
        return _EVENT
    return {**_EVENT, "description": f"One server-sent event; its data is a {item.__name__}"}


def _answer(description: str, model: type[BaseModel] | None) -> Schema:
    assert model is not None, "Routes sets every route's error body"
    return {"description": description, "content": {JSON: {"schema": _ref(model)}}}


def _ref(model: type[BaseModel]) -> Schema:
    return {"$ref": _REF.format(model=model.__name__)}


def _components(routes: Iterable[Route]) -> Schema:
    """The JSON Schema of every model the routes name, and of the models they nest."""
    components: Schema = {}
    for model in dict.fromkeys(model for route in routes for model in route.models()):
        schema = json.loads(_schema_text(model))
        for name, nested in (*schema.pop("$defs", {}).items(), (model.__name__, schema)):
            if components.setdefault(name, nested) != nested:
                raise ValueError(f"two different schemas are named {name!r}")
    return components


@functools.cache
def _schema_text(model: type[BaseModel]) -> str:
    """A model's schema, written once per process (pydantic takes ~1 ms per model), as
    text: each document gets its own copy to keep."""
    return json.dumps(model.model_json_schema(ref_template=_REF))
