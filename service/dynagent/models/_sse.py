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

import asyncio
from collections.abc import AsyncGenerator, Iterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import httpx2
import openai
import orjson

from dynagent._compat import aiohttp as aiohttp_compat
from dynagent.events import JsonValue
from dynagent.exceptions import ModelError
from dynagent.models._http import ModelAnswer

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


async def chunk_blocks(
    response: ModelAnswer, request: httpx2.Request
) -> AsyncGenerator[Iterator[JsonValue], None]:
    """The chunks of a chat completions stream, a network block at a time (each taken
    before the next block is read), until ``[DONE]``. An ``error`` in the stream is raised
    as the ``openai.APIError`` the client would raise; transport failures as its timeout
    and connection errors (naming ``request``)."""
    parser = SSEParser()
    async with aclosing(paced_blocks(response)) as blocks:
        with _TransportErrors(request):
            async for block in blocks:
                events = parser.feed_data(block)
                done = next((i for i, data in enumerate(events.data) if data == b"[DONE]"), None)
                if events.data and done != 0:
                    yield _chunks(events, done, request)
                if done is not None:
                    return


async def whole_body(response: ModelAnswer, limit: int, request: httpx2.Request) -> bytes:
    """The body of a response that is not a stream (a whole answer), refused past
    ``limit`` bytes as it arrives rather than held whole first.

    A body whose length is known, within ``limit`` and not encoded (what aiohttp reads is
    then at most that length) is read in one ``read``: no pacing, no loop per block."""
    length = response.content_length
    if length is not None and length <= limit and _identity(response):
        with _TransportErrors(request):
            return await response.content.read()
    body = bytearray()
    async with aclosing(paced_blocks(response)) as blocks:
        with _TransportErrors(request):
            async for block in blocks:
                body += block
                if len(body) > limit:
                    raise ModelError(
                        f"the model's answer went past {limit} bytes (max_answer_chars)"
                    )
    return bytes(body)


def _identity(response: ModelAnswer) -> bool:
    """Whether the body arrives as its ``Content-Length`` says: not chunked, and not
    compressed (a compressed body's length says nothing of what it inflates to)."""
    headers = response.headers
    if "Transfer-Encoding" in headers:
        return False
    encoding = headers.get("Content-Encoding")
    return not encoding or encoding.strip().lower() == "identity"


class _TransportErrors:
    """``with`` a read of a model's answer: aiohttp's read timeout and connection failures
    raised as the ``openai`` client's timeout and connection errors (a class, not a
    generator: every model call enters it)."""

    __slots__ = ("_request",)

    def __init__(self, request: httpx2.Request) -> None:
        self._request = request

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, traceback: object) -> None:
        if isinstance(exc, TimeoutError):  # aiohttp's read timeout
            raise openai.APITimeoutError(request=self._request) from exc
        if isinstance(exc, aiohttp.ClientError):
            raise openai.APIConnectionError(request=self._request) from exc


READ_EVERY = 0.002
"""Seconds between two reads of a long model stream that arrives faster than that."""
FREE_READS = 8
"""Reads of every stream never held: a whole short answer, and its first words."""


async def paced_blocks(response: ModelAnswer) -> AsyncGenerator[bytes, None]:
    """The body of ``response`` as it arrives; past ``FREE_READS`` reads, at most one
    read of the socket per ``READ_EVERY`` seconds.

    A model writing one small event per send (150,000 one-word chunks of a 1 MB answer)
    would otherwise wake the event loop for every TCP segment, and each wake-up (a poll,
    a ``recv``, aiohttp's parser and timers) cost more than the event itself: 1.4 s of
    CPU for that answer. When the buffer is empty, the last two reads came less than
    ``READ_EVERY`` apart (the stream arrives faster than that) and the last one was less
    than ``READ_EVERY`` ago, the socket is not read until then, so the kernel gathers what
    arrives and one ``recv`` takes it all (0.5 s). A fast model is held 2 ms at most.

    A model streaming at a pace a reader follows (a chunk every few milliseconds or
    slower) is not held: a hold costs a timer and two changes of the socket's polling,
    and holding after every read of such a stream cost 40 % more CPU than none
    (``python -m bench.model_stream --typical``).
    """
    content = response.content
    loop = asyncio.get_running_loop()
    before = last = 0.0
    reads = 0
    while True:
        block = content.read_nowait()
        if not block:
            if content.at_eof():
                return
            wait = last + READ_EVERY - loop.time()
            flooding = reads >= FREE_READS and last - before < READ_EVERY
            if flooding and wait > 0:
                await aiohttp_compat.leave_unread(response, wait)
            block = await content.readany()
            if not block:
                return
        before, last, reads = last, loop.time(), reads + 1
        yield block


def _chunks(events: Events, done: int | None, request: httpx2.Request) -> Iterator[JsonValue]:
    """The events' chunks, up to ``done``, decoded as the reader takes them (orjson:
    strict, and a quarter of ``json.loads``'s time): a block of a flood holds thousands,
    and decoding them all at once kept them all alive, so the garbage collector ran
    several times per block. They are looked at for an error (all parsed first) only
    when one may be."""
    data = events.data if done is None else events.data[:done]
    if not events.errors:
        return map(orjson.loads, data)
    values: list[JsonValue] = list(map(orjson.loads, data))
    names = events.names or [b""] * len(values)
    for name, value in zip(names, values, strict=False):
        error = value.get("error") if isinstance(value, dict) else None
        if error or name == b"error":
            raise _stream_error(error, request)
    return iter(values)


def _stream_error(error: Any, request: httpx2.Request) -> openai.APIError:
    """What the ``openai`` client raises for an ``error`` sent inside a stream."""
    message = error.get("message") if isinstance(error, dict) else None
    return openai.APIError(
        message if isinstance(message, str) and message else "the model stream failed",
        request=request,
        body=error,
    )
