"""How a stream leaves the service: each ``send`` costs a system call and, on the
reader's side, a wake-up, so what is ready together goes out together.

The writes are counted at the socket's transport, under a real aiohttp server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import aiohttp
import pytest
from aiohttp import web

from dynagent.http.sse import SSE_HEADERS, EventStream, open_stream


@asynccontextmanager
async def _served(
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_get("/", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/"
    finally:
        await runner.cleanup()


def _counting(request: web.Request, sends: list[bytes]) -> None:
    transport = request.transport
    assert transport is not None
    write = transport.write

    def counted(data: bytes | bytearray | memoryview) -> None:
        sends.append(bytes(data))
        write(data)

    transport.write = counted  # type: ignore[method-assign]


@pytest.mark.parametrize("first_event_ready", [True, False])
async def test_a_streams_headers_leave_with_its_first_event_when_it_is_ready(
    first_event_ready: bool,
) -> None:
    sends: list[bytes] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        _counting(request, sends)
        response = await open_stream(
            request, dict(SSE_HEADERS), first_event_ready=first_event_ready
        )
        await response.write(b"event: first\ndata: {}\n\n")
        await response.write_eof(b"event: last\ndata: {}\n\n")
        return response

    async with (
        _served(handler) as url,
        aiohttp.ClientSession() as session,
        session.get(url) as answer,
    ):
        body = await answer.read()
    assert body == b"event: first\ndata: {}\n\nevent: last\ndata: {}\n\n"
    assert sends[0].startswith(b"HTTP/1.1 200 OK")
    if first_event_ready:  # headers and the first event in one send; the last with the end
        assert len(sends) == 2
        assert b"event: first" in sends[0]
    else:  # headers at once, whether an event comes soon or not
        assert len(sends) == 3
        assert b"event: first" not in sends[0]
    assert sends[-1].endswith(b"0\r\n\r\n")
    assert b"event: last" in sends[-1]


async def _sent(events: list[tuple[bytes, bool]], end: bytes) -> tuple[list[bytes], bytes]:
    """The sends of a stream of ``events`` (data, held?) ended with ``end``, and the body
    a client read."""
    sends: list[bytes] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        _counting(request, sends)
        response = await open_stream(request, dict(SSE_HEADERS), first_event_ready=True)
        stream = EventStream(response)
        for data, held in events:
            await stream.write(data, held=held)
        await stream.end(end)
        return response

    async with (
        _served(handler) as url,
        aiohttp.ClientSession() as session,
        session.get(url) as answer,
    ):
        return sends, await answer.read()


async def test_a_streams_last_events_leave_with_its_end_in_one_send() -> None:
    events = [(b"a\n\n", False), (b"b\n\n", False), (b"c\n\n", True), (b"d\n\n", True)]
    sends, body = await _sent(events, b"[DONE]\n\n")
    assert body == b"a\n\nb\n\nc\n\nd\n\n[DONE]\n\n"
    assert len(sends) == 3  # headers with a; b; the last two, the end and the terminator
    assert b"a\n\n" in sends[0]
    assert b"c\n\nd\n\n[DONE]\n\n" in sends[2]
    assert sends[2].endswith(b"0\r\n\r\n")


async def test_a_held_event_leaves_with_the_next_one() -> None:
    # model_response then final_output (ready together) in one send; nothing reordered.
    events = [(b"a\n\n", False), (b"held\n\n", True), (b"next\n\n", False)]
    sends, body = await _sent(events, b"")
    assert body == b"a\n\nheld\n\nnext\n\n"
    assert len(sends) == 3  # headers with a; held with next; the end
    assert b"held\n\nnext\n\n" in sends[1]
