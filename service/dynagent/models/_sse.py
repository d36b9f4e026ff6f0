"""A model's server-sent events, read a network block at a time.

The ``openai`` client decodes a stream line by line in Python and hands out one chunk per
event; a hostile (or just verbose) model that streams a 1 MB answer as 150,000 one-word
events then cost the service several seconds of CPU, most of it per-event work downstream
(redaction, masking, the run's events, one socket write each). Here the bytes are split
into events with ``bytes`` methods and decoded with orjson, and the events of one block
(whatever the socket had buffered, up to 64 KiB) come out together, so the run handles
one text delta per block.
A model streaming at its natural pace fills a block with one event, so nothing waits.

The parser follows the SSE rules that matter for model endpoints: lines end with
``\\n``, ``\\r\\n`` or ``\\r`` (also when split between two blocks); ``data:`` lines of one
event are joined with ``\\n``; ``event:`` names it; comments and other fields are ignored.
An event may not grow past ``MAX_EVENT`` bytes: memory stays bounded whatever arrives.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx2
import openai
import orjson

from ..events import JsonValue
from ..exceptions import ModelError

MAX_EVENT = 16 * 1024 * 1024
"""Bytes one event may hold (a whole answer or tool call can be one ``data:`` line)."""


@dataclass(slots=True)
class SSEParser:
    """Bytes in, complete events out as (event name, data) pairs."""

    _partial: list[bytes] = field(default_factory=list)
    _partial_size: int = 0
    _after_cr: bool = False

    def feed_data(self, block: bytes) -> Events:
        """The events completed by ``block``; their data, names only when some are named."""
        if self._after_cr and block.startswith(b"\n"):
            block = block[1:]  # the second half of a "\r\n" split between two blocks
        if not block:
            return NO_EVENTS
        self._after_cr = block.endswith(b"\r")
        if b"\r" in block:
            block = block.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        ends_line = bool(self._partial) and self._partial[-1].endswith(b"\n")
        if b"\n\n" not in block and not (ends_line and block.startswith(b"\n")):
            self._hold(block)
            return NO_EVENTS
        if self._partial:
            block = b"".join(self._partial) + block
            self._partial.clear()
            self._partial_size = 0
        end = block.rfind(b"\n\n")
        body, rest = block[:end], block[end + 2 :]
        if rest:
            self._hold(rest)
        return _events(body)

    def _hold(self, piece: bytes) -> None:
        self._partial_size += len(piece)
        if self._partial_size > MAX_EVENT:
            raise ModelError(f"malformed stream: an event longer than {MAX_EVENT} bytes")
        self._partial.append(piece)


@dataclass(frozen=True, slots=True)
class Events:
    data: list[bytes]
    names: list[bytes] | None = None
    """Each event's name; None when none has one."""
    errors: bool = False
    """Whether any may be an error (named ``error``, or ``"error"`` in its data)."""


NO_EVENTS = Events([])


def _events(body: bytes) -> Events:
    """The events of ``body``: whole events separated by blank lines."""
    # What model endpoints send: every event one "data: " line. Then each newline is one of
    # a "\n\ndata: " (two passes over the bytes tell), and one split gives every payload.
    if body.startswith(b"data: ") and body.count(b"\n") == 2 * body.count(b"\n\ndata: "):
        return Events(body[6:].split(b"\n\ndata: "), errors=b'"error"' in body)
    events: list[tuple[bytes, bytes]] = []
    for text in body.split(b"\n\n"):
        if text:
            _event(text, events)
    names = [name for name, _ in events]
    errors = b"error" in names or b'"error"' in body
    return Events([data for _, data in events], names, errors)


def _event(text: bytes, events: list[tuple[bytes, bytes]]) -> None:
    """One event's lines (``data:``, ``event:``, comments and other fields) in general."""
    data: list[bytes] = []
    name = b""
    for line in text.split(b"\n"):
        field_name, _, value = line.partition(b":")
        if value.startswith(b" "):
            value = value[1:]
        if field_name == b"data":
            data.append(value)
        elif field_name == b"event":
            name = value
    if data:
        events.append((name, b"\n".join(data)))


async def chunk_blocks(stream: openai.AsyncStream[Any]) -> AsyncIterator[list[JsonValue]]:
    """The parsed JSON chunks of a chat completions stream, a network block at a time,
    until ``[DONE]``. An ``error`` in the stream is raised as the ``openai.APIError`` the
    client would raise; transport failures as its timeout and connection errors."""
    response = stream.response
    parser = SSEParser()
    try:
        async for block in response.aiter_bytes():
            events = parser.feed_data(block)
            done = next((i for i, d in enumerate(events.data) if d.startswith(b"[DONE]")), None)
            chunks = _chunks(events, done, response.request)
            if chunks:
                yield chunks
            if done is not None:
                return
    except httpx2.TimeoutException as exc:
        raise openai.APITimeoutError(request=response.request) from exc
    except httpx2.RequestError as exc:
        raise openai.APIConnectionError(request=response.request) from exc


def _chunks(events: Events, done: int | None, request: httpx2.Request) -> list[JsonValue]:
    """The events' JSON values, up to ``done`` (orjson: strict, and a quarter of
    ``json.loads``'s time); each is looked at for an error only when one may be."""
    values: list[JsonValue] = list(map(orjson.loads, events.data[:done]))
    if events.errors:
        names = events.names or [b""] * len(values)
        for name, value in zip(names, values, strict=False):
            error = value.get("error") if isinstance(value, dict) else None
            if error or name == b"error":
                raise _stream_error(error, request)
    return values


def _stream_error(error: Any, request: httpx2.Request) -> openai.APIError:
    """What the ``openai`` client raises for an ``error`` sent inside a stream."""
    message = error.get("message") if isinstance(error, dict) else None
    return openai.APIError(
        message if isinstance(message, str) and message else "the model stream failed",
        request=request,
        body=error,
    )
