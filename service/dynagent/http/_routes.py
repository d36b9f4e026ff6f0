"""Routes that say what they take and answer, where their handler is defined.

Every route table is a ``Routes``; each handler is added with its ``Route``: summary,
request and answer models, parameters, error statuses. ``openapi.py`` walks the app's
real router and writes ``/openapi.json`` from these, so nothing is served undocumented
and nothing documented goes unserved.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Any, Literal, TypeVar, overload

from aiohttp import web
from pydantic import BaseModel

from dynagent.http.api.schemas import ErrorResponse
from dynagent.http.state import CANARY_KEY_HEADER, REVISION_HEADER, TRACE_HEADER, VARIANT_HEADER
from dynagent.spec.agent import NAME_PATTERN

Schema = dict[str, Any]
Handler = TypeVar("Handler", bound=Callable[[web.Request], Awaitable[web.StreamResponse]])

SSE = "text/event-stream"
DOCUMENT = web.AppKey("openapi", bytes)
"""``/openapi.json`` as served: written once, when the app is made (pydantic takes
~40 ms to write the schemas, which must not hold the loop during a request)."""

ERRORS: Mapping[int, str] = {
    400: "Bad request body, header or parameter",
    401: "Missing or unknown API key",
    403: "The API key may not use this agent (or is no admin key)",
    404: "Unknown agent, trace or revision",
    408: "The body did not arrive in time",
    409: "The agent's state does not allow this (no canary, no earlier revision …)",
    413: "Body too large",
    415: "The body is not application/json",
    422: "The answer failed the agent's output schema",
    429: "A call limit was reached",
    502: "The model endpoint failed",
    503: "The agent has no valid version",
    504: "The run or a model call timed out",
}
"""What each error status means, on every route that answers it."""
BODY_ERRORS = (400, 408, 413, 415)
"""A JSON body that is not one, too slow, too large, or of another media type."""
AGENT_ERRORS = (401, 403, 404)
"""No key, a key that may not use the agent, no such agent (or trace, or revision)."""
RUN_ERRORS = (*AGENT_ERRORS, *BODY_ERRORS, 422, 429, 502, 503, 504)
PATH_PATTERNS: Mapping[str, str] = {"name": NAME_PATTERN}
"""Path parameters of the same name take the same pattern on every route."""


@dataclass(frozen=True)
class Param:
    """A header or query parameter (path parameters are read from the route's path)."""

    name: str
    where: Literal["header", "query"]
    description: str
    schema: Schema = field(default_factory=lambda: {"type": "string"})

    def document(self) -> Schema:
        where = {"name": self.name, "in": self.where}
        return {**where, "description": self.description, "schema": self.schema}


@dataclass(frozen=True)
class Route:
    """One operation: how it is reached and what it takes and answers."""

    method: str
    path: str
    summary: str
    _: KW_ONLY
    name: str | None = None
    """The aiohttp route name."""
    tags: tuple[str, ...] = ()
    """Default: the table's tags."""
    public: bool = False
    """Needs no API key."""
    runs: bool = False
    """Runs an agent: served without first applying the bookkeeping of the runs that ended
    before (``RunEnds``); every other route applies it, as it may read it."""
    parameters: tuple[Param, ...] = ()
    """Headers and query parameters, after the path's own."""
    path_patterns: Mapping[str, str] = field(default_factory=dict)
    """Patterns of path parameters, over ``PATH_PATTERNS``."""
    request: type[BaseModel] | tuple[type[BaseModel], ...] | None = None
    """The JSON body; several models: any one of them."""
    request_required: bool = True
    response: type[BaseModel] | None = None
    """The JSON answer (200)."""
    description: str = "OK"
    """Of the 200 answer."""
    streams: tuple[str, ...] = ()
    """Content types the 200 answer may also come in (``SSE``: events, as they happen)."""
    stream_item: type[BaseModel] | None = None
    """What the data of each streamed event is, when it has a model."""
    content: Mapping[str, Schema] | None = None
    """A 200 answer that no model describes (text, a page …): content type → schema."""
    headers: Mapping[str, Schema] = field(default_factory=dict)
    """Headers of the 200 answer."""
    responses: Mapping[int, tuple[str, type[BaseModel]]] = field(default_factory=dict)
    """Other statuses that answer in a shape of their own: status → (meaning, model)."""
    errors: tuple[int, ...] = ()
    """Statuses answered with ``error_body``; ``ERRORS`` says what each means."""
    error_body: type[BaseModel] | None = None
    """Default: the table's (``ErrorResponse``, or OpenAI's on the OpenAI routes)."""

    def models(self) -> Iterator[type[BaseModel]]:
        """Every model the operation names, for the document's components."""
        requests = self.request if isinstance(self.request, tuple) else (self.request,)
        yield from (m for m in requests if m is not None)
        yield from (m for m in (self.response, self.stream_item) if m is not None)
        yield from (model for _, model in self.responses.values())
        if self.errors and self.error_body is not None:
            yield self.error_body


_ROUTE = "__dynagent_route__"
"""The attribute of a handler that holds its ``Route``."""


def route_of(handler: Any) -> Route | None:
    """The ``Route`` a handler was added with, if any."""
    found = getattr(handler, _ROUTE, None)
    return found if isinstance(found, Route) else None


class Routes(Sequence[web.AbstractRouteDef]):
    """A route table (``app.add_routes`` takes it) whose handlers carry their ``Route``."""

    def __init__(self, *tags: str, error_body: type[BaseModel] = ErrorResponse) -> None:
        self._table = web.RouteTableDef()
        self._tags = tags
        self._error_body = error_body

    def add(self, route: Route) -> Callable[[Handler], Handler]:
        """Serve the decorated handler as ``route``."""
        route = replace(
            route, tags=route.tags or self._tags, error_body=route.error_body or self._error_body
        )

        def register(handler: Handler) -> Handler:
            if route_of(handler) is not None:
                raise ValueError(f"{handler.__qualname__} serves a route already")
            setattr(handler, _ROUTE, route)
            return self.undocumented(route.method, route.path, name=route.name)(handler)

        return register

    def undocumented(
        self, method: str, path: str, *, name: str | None = None
    ) -> Callable[[Handler], Handler]:
        """Serve a handler without a ``Route``: ``openapi.UNDOCUMENTED`` must say why."""
        named = {} if name is None else {"name": name}

        def register(handler: Handler) -> Handler:
            self._table.route(method, path, **named)(handler)
            return handler

        return register

    @overload
    def __getitem__(self, index: int) -> web.AbstractRouteDef: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[web.AbstractRouteDef]: ...

    def __getitem__(self, index: int | slice) -> Any:
        return self._table[index]

    def __len__(self) -> int:
        return len(self._table)


ROUTING = (
    Param(
        VARIANT_HEADER,
        "header",
        "Pin the stable or the canary version",
        {"type": "string", "enum": ["stable", "canary"]},
    ),
    Param(CANARY_KEY_HEADER, "header", "Keeps a caller on one variant"),
)
"""The headers that choose the variant of a run."""
SERVED_BY: Mapping[str, Schema] = {
    header: {"description": description, "required": True, "schema": {"type": "string"}}
    for header, description in (
        (REVISION_HEADER, "The revision that served"),
        (VARIANT_HEADER, "stable or canary"),
        (TRACE_HEADER, "GET /v1/traces/{trace_id} shows the run"),
    )
}
"""The headers of a run's answer: who served it, and its trace."""
