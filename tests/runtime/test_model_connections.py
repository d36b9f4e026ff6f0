"""How model calls use their connections (``models/_http.py``): kept alive and reused,
a stream's connection too once its body has ended, a closed one never reused, no more
open at once than the limit, a redirect followed, and no header a line break could
forge."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from dynagent import ModelError
from dynagent.models import ClientPool, OpenAIModel
from dynagent.models._http import Connections
from dynagent.models.base import ModelRequest
from tests.support._wire import WireAnswer, chunks, completion
from tests.support.served import served

ASK = ModelRequest(({"role": "user", "content": "hi"},))
ANSWER = completion(WireAnswer("chatcmpl-1", "m", "ok", (), 3, 1, ("ok",)))
CHUNK = list(chunks(WireAnswer("c", "m", "ok", (), 3, 1, ("ok",)), include_usage=False))[1]
"""The chunk of a stream that carries its one word, "ok"."""


@dataclass
class Endpoint:
    url: str = ""
    peers: list[tuple[str, int]] = field(default_factory=list)
    """The client's address of each request: one port, one connection."""
    open_now: int = 0
    most_open: int = 0
    close_after_answer: bool = False
    stream_end: asyncio.Event | None = None
    """A stream's body ends (after ``[DONE]``) only once this is set."""
    gate: asyncio.Event | None = None
    """Whole answers wait for this before they are sent."""


@pytest.fixture
async def endpoint() -> AsyncIterator[Endpoint]:
    found = Endpoint()

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        found.peers.append(request.transport.get_extra_info("peername")[:2])  # type: ignore[union-attr]
        found.open_now += 1
        found.most_open = max(found.most_open, found.open_now)
        try:
            if found.gate is not None:
                await found.gate.wait()
            if not body.get("stream"):
                headers = {"Connection": "close"} if found.close_after_answer else None
                return web.json_response(ANSWER, headers=headers)
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            await response.write(f"data: {json.dumps(CHUNK)}\n\ndata: [DONE]\n\n".encode())
            if found.stream_end is not None:
                await found.stream_end.wait()
            await response.write_eof()
            return response
        finally:
            found.open_now -= 1

    async def moved(request: web.Request) -> web.Response:
        await request.read()
        raise web.HTTPTemporaryRedirect("/v1/chat/completions")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    app.router.add_post("/old/chat/completions", moved)
    async with served(app) as base:
        found.url = f"{base}/v1"
        yield found


async def _stream(model: OpenAIModel) -> str:
    texts = [item.text async for item in model.stream(ASK) if hasattr(item, "text")]
    return "".join(texts)


async def _until(condition: object) -> None:
    """Let the loop run until ``condition()`` holds (a bounded number of turns)."""
    for _ in range(10_000):
        if condition():  # type: ignore[operator]
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")


async def test_whole_answers_and_streams_reuse_one_connection(endpoint: Endpoint) -> None:
    pool = ClientPool()
    try:
        model = OpenAIModel(pool.get(endpoint.url, "k"), "m", retries=0)
        for _ in range(3):
            assert (await model.request(ASK)).content == "ok"
            assert await _stream(model) == "ok"
    finally:
        await pool.aclose()
    assert len(endpoint.peers) == 6
    assert len(set(endpoint.peers)) == 1


async def test_a_streams_connection_is_reused_once_its_body_ends_after_done(
    endpoint: Endpoint,
) -> None:
    # The [DONE] event is read before the chunked body's end arrives: the connection is
    # kept for the next call once it does, instead of being closed.
    endpoint.stream_end = asyncio.Event()
    pool = ClientPool()
    try:
        client = pool.get(endpoint.url, "k")
        model = OpenAIModel(client, "m", retries=0)
        assert await _stream(model) == "ok"
        connections: Connections = client._connections
        assert not connections._idle  # not yet: its body has not ended
        endpoint.stream_end.set()
        await _until(lambda: len(connections._idle) == 1)
        assert (await model.request(ASK)).content == "ok"
    finally:
        await pool.aclose()
    assert len(set(endpoint.peers)) == 1


async def test_a_connection_the_endpoint_closes_is_not_reused(endpoint: Endpoint) -> None:
    endpoint.close_after_answer = True
    pool = ClientPool()
    try:
        model = OpenAIModel(pool.get(endpoint.url, "k"), "m", retries=0)
        for _ in range(3):
            assert (await model.request(ASK)).content == "ok"
    finally:
        await pool.aclose()
    assert len(set(endpoint.peers)) == 3


async def test_no_more_connections_open_than_the_limit(endpoint: Endpoint) -> None:
    endpoint.gate = asyncio.Event()
    pool = ClientPool()
    try:
        client = pool.get(endpoint.url, "k")
        client._connections._limit = 2
        model = OpenAIModel(client, "m", retries=0)
        calls = [asyncio.create_task(model.request(ASK)) for _ in range(5)]
        await _until(lambda: endpoint.open_now == 2)
        for _ in range(100):  # the other three wait for a connection
            await asyncio.sleep(0)
        assert endpoint.open_now == 2
        endpoint.gate.set()
        answers = await asyncio.gather(*calls)
    finally:
        await pool.aclose()
    assert [answer.content for answer in answers] == ["ok"] * 5
    assert endpoint.most_open == 2
    assert len(set(endpoint.peers)) == 2


async def test_a_redirected_call_is_followed_with_its_body(endpoint: Endpoint) -> None:
    pool = ClientPool()
    try:
        moved = endpoint.url.removesuffix("/v1") + "/old"
        model = OpenAIModel(pool.get(moved, "k"), "m", retries=0)
        assert (await model.request(ASK)).content == "ok"
        assert await _stream(model) == "ok"
    finally:
        await pool.aclose()
    assert len(endpoint.peers) == 2


@pytest.mark.parametrize("key", ["sk\r\nX-Forged: 1", "sk\nX-Forged: 1", "sk\x00"])
async def test_a_key_with_a_line_break_is_refused_and_nothing_is_sent(
    endpoint: Endpoint, key: str
) -> None:
    pool = ClientPool()
    try:
        model = OpenAIModel(pool.get(endpoint.url, key), "m", retries=0)
        with pytest.raises(ModelError) as refused:
            await model.request(ASK)
    finally:
        await pool.aclose()
    assert "not made" in str(refused.value)
    assert "Authorization" in str(refused.value)
    assert "sk" not in str(refused.value)  # the key itself is never shown
    assert endpoint.peers == []


@pytest.fixture
async def trickling() -> AsyncIterator[str]:
    """A stream of six chunks 0.15 s apart (``/steady``), or one chunk and then nothing
    (``/stalled``)."""

    async def completions(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        chunk = f"data: {json.dumps(CHUNK)}\n\n".encode()
        if request.match_info["kind"] == "stalled":
            await response.write(chunk)
            await asyncio.Event().wait()  # until the client leaves
        for _ in range(6):
            await response.write(chunk)
            await asyncio.sleep(0.15)  # the endpoint's pace, not the test's wait
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/{kind}/chat/completions", completions)
    async with served(app, shutdown_timeout=0.1) as base:
        yield base


async def test_a_stream_is_bounded_per_read_not_as_a_whole(trickling: str) -> None:
    # model.timeout bounds each wait for the next block of a stream: a steady stream
    # longer than it (six blocks 0.15 s apart, 0.9 s, against 0.5 s) is read whole; one
    # that goes quiet is cut off.
    pool = ClientPool()
    try:
        steady = OpenAIModel(pool.get(f"{trickling}/steady", "k"), "m", retries=0, timeout=0.5)
        assert await _stream(steady) == "ok" * 6
        stalled = OpenAIModel(pool.get(f"{trickling}/stalled", "k"), "m", retries=0, timeout=0.5)
        with pytest.raises(ModelError) as cut:
            await _stream(stalled)
    finally:
        await pool.aclose()
    assert cut.value.kind == "timeout"
    assert "model.timeout = 0.5 s" in str(cut.value)


@pytest.fixture
async def smuggling() -> AsyncIterator[tuple[str, asyncio.Event]]:
    """An endpoint that answers each request, then, once told to, sends a second answer
    nobody asked for on the same connection."""
    send_more = asyncio.Event()

    def answer(text: str) -> bytes:
        choice = {"index": 0, "message": {"role": "assistant", "content": text}}
        body = json.dumps({**ANSWER, "choices": [choice]}).encode()
        head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
        return head.encode() + b"\r\n\r\n" + body

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                await reader.readexactly(length)
                writer.write(answer("ok"))
                await writer.drain()
                await send_more.wait()
                writer.write(answer("forged"))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    host, port = server.sockets[0].getsockname()[:2]
    try:
        yield f"http://{host}:{port}/v1", send_more
    finally:
        server.close()


async def test_an_answer_sent_to_an_idle_connection_is_never_read_as_the_next_calls(
    smuggling: tuple[str, asyncio.Event],
) -> None:
    url, send_more = smuggling
    pool = ClientPool()
    try:
        client = pool.get(url, "k")
        model = OpenAIModel(client, "m", retries=0)
        assert (await model.request(ASK)).content == "ok"
        connections: Connections = client._connections
        [(idle, _)] = connections._idle
        send_more.set()
        await _until(lambda: idle.should_close)  # the forged answer has arrived
        send_more.clear()
        assert (await model.request(ASK)).content == "ok"
    finally:
        await pool.aclose()
