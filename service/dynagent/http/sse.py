"""Writing JSON bodies and server-sent events: one encoder for every route."""

from __future__ import annotations

import json as _json
from collections.abc import Awaitable, Generator, Mapping
from typing import Any, Literal

import orjson
from aiohttp import web
from pydantic import BaseModel
from pydantic_core import PydanticSerializationError

from dynagent._compat import aiohttp as aiohttp_compat

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}

_encode = _json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str).encode
_encode_ascii = _json.JSONEncoder(separators=(",", ":"), default=str).encode
_encode_spaced = _json.JSONEncoder(allow_nan=False).encode
"""``json.dumps(value, allow_nan=False)``, its encoder built once: ``dumps`` builds one
per call when given an option."""


def encoded(value: Any) -> bytes:
    """Compact JSON as UTF-8, non-ASCII kept as is, for a stream's events: by orjson, in a
    tenth of the standard encoder's time (a streamed answer encodes every event it sends).
    What orjson refuses
    (an integer past 64 bits, a key that is not a string, nesting past 254) goes through
    ``json``; a lone surrogate, which has no UTF-8, is sent escaped, so the event still
    leaves as valid JSON."""
    try:
        return orjson.dumps(value, default=str)
    except TypeError:  # orjson.JSONEncodeError included
        pass
    try:
        return _encode(value).encode()
    except UnicodeEncodeError:
        return _encode_ascii(value).encode()


def json(
    model: BaseModel,
    *,
    status: int = 200,
    headers: Mapping[str, str] | None = None,
    omit: Literal["unset", "none"] = "unset",
    compact: bool = False,
) -> web.Response:
    """``model`` as a JSON answer, by alias, without the fields it was not given (a body
    validated from the core's dict keeps exactly that dict's keys), or, ``omit="none"``,
    without its None fields (A2A's wire form).

    ``compact``: no spaces, non-ASCII as UTF-8 (the OpenAI routes' answers), encoded by
    pydantic in one pass instead of dumped to dicts and then to text: a fifth of the
    time. Our own routes keep ``json.dumps``'s spaced form, which scripts grep."""
    unset, none = omit == "unset", omit == "none"
    if compact:
        try:
            body = model.model_dump_json(by_alias=True, exclude_unset=unset, exclude_none=none)
            return _json_response(body.encode(), status, headers)
        except PydanticSerializationError:  # a lone surrogate has no UTF-8: escaped below
            pass
    value = model.model_dump(mode="json", by_alias=True, exclude_unset=unset, exclude_none=none)
    return _json_response(_json.dumps(value).encode(), status, headers)


def json_value(
    value: Any, *, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    """A value of JSON's own types (a dict of text, numbers, lists…) as an answer, in
    ``json``'s form, without a model built only to be dumped again: for a route's hot
    answer, whose fields the caller writes in the schema's order. Raises ``ValueError``
    for what JSON has no form for (NaN, infinities) and ``TypeError`` for a value not of
    JSON's types: the schema's encoding writes those."""
    return _json_response(_encode_spaced(value).encode(), status, headers)


def compact_json_value(
    value: Any, *, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    """A value of JSON's own types as an answer in ``json(compact=True)``'s form (no
    spaces, non-ASCII as UTF-8), by orjson, without a model built only to be dumped again.
    Raises ``TypeError`` for what orjson refuses (an unpaired surrogate, an integer past
    64 bits): the schema's encoding writes those."""
    return _json_response(orjson.dumps(value), status, headers)


def _json_response(body: bytes, status: int, headers: Mapping[str, str] | None) -> web.Response:
    return web.Response(
        body=body, status=status, headers=headers, content_type="application/json", charset="utf-8"
    )


async def open_stream(
    request: web.Request, headers: dict[str, str], *, first_event_ready: bool = False
) -> web.StreamResponse:
    """A stream, its headers sent now, or, ``first_event_ready`` (the caller writes an
    event at once), with that event."""
    if first_event_ready:
        response = aiohttp_compat.stream_sending_headers_late(headers)
    else:
        response = web.StreamResponse(headers=headers)
    await response.prepare(request)
    return response


class EventStream:
    """Writes a stream's events as they come, except those marked ``held``: an event
    another follows at once (a final answer's ``model_response``, ``final_output``) waits
    for it, so that both leave in one send; the answer's last ones (``run_finished``, the
    finish and usage chunks, ``response.completed``) leave with the stream's end, once the
    run has been recorded, so that a caller who reads the end can already find the run
    (its trace, its stored response) on any replica, as it can once a whole answer
    arrives."""

    __slots__ = ("_held", "_response")

    def __init__(self, response: web.StreamResponse) -> None:
        self._response = response
        self._held: list[bytes] = []

    def write(self, data: bytes, *, held: bool = False) -> Awaitable[None]:
        """Write ``data`` (with what is held), or hold it: awaited either way. No
        coroutine of its own: a held event costs none, a write is aiohttp's."""
        if held:
            self._held.append(data)
            return _WRITTEN
        if self._held:
            data = b"".join([*self._held, data])
            self._held.clear()
        return self._response.write(data)

    async def end(self, data: bytes = b"") -> None:
        """Write what is held, then ``data``, with the stream's end."""
        await self._response.write_eof(b"".join([*self._held, data]))
        self._held.clear()


class _Written:
    """An awaitable that is done at once (a held event's write)."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, Any, None]:
        yield from ()


_WRITTEN = _Written()


def event(name: str, data: Any) -> bytes:
    """One named server-sent event."""
    return b"event: " + name.encode() + b"\ndata: " + encoded(data) + b"\n\n"
