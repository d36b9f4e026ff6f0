"""How the model client reads a stream (``models/_sse.py``).

A model that writes one small event per send would wake the event loop once per TCP
segment: 150,000 wake-ups for a 1 MB answer of one-word chunks, more CPU than all the
work on the events themselves. Such a flood is read at most twice per ``READ_EVERY``,
over TLS too; a model streaming at a reader's pace gets each chunk read as it comes, and
its socket is not held between them; a gzip body is decoded by aiohttp as it is read.

The flooding model runs in a process of its own, as a real endpoint does: in this
process it would share the event loop (or the GIL) with the reader and pace it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import subprocess
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest
import trustme
from aiohttp import web

import dynagent._compat.aiohttp
from dynagent import ModelError, Tool
from dynagent.events import ErrorEvent, ModelDelta
from dynagent.models import ClientPool, OpenAIModel
from dynagent.models._sse import READ_EVERY, paced_blocks
from dynagent.models.base import ModelRequest, TextDelta
from tests.support import DEFAULT_MODEL, AgentFactory, CallTools, Reply, ScriptedModelServer
from tests.support.served import served


async def lookup(query: str) -> str:
    """Look something up."""
    return query


LOOKUP = Tool.from_function(lookup)

WORDS = 20_000
_MODEL_PROCESS = """
import asyncio, ssl, sys
from aiohttp import web
from tests.support import DEFAULT_MODEL, Reply, ScriptedModelServer

async def main() -> None:
    words, gap, key_and_cert = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
    server = ScriptedModelServer()
    server.script(DEFAULT_MODEL, [Reply("w " * words, gap=gap)], cycle=True)
    if not key_and_cert:
        await server.start()
        print(server.base_url, flush=True)
    else:  # the same model over TLS, as real endpoints are
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(key_and_cert[0])
        app = web.Application()
        app.router.add_post("/v1/chat/completions", server._chat)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context).start()
        print(f"https://127.0.0.1:{runner.addresses[0][1]}/v1", flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


def _model_process(words: int, gap: float, *tls: str) -> Iterator[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", _MODEL_PROCESS, str(words), str(gap), *tls],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        yield process.stdout.readline().strip()
    finally:
        process.kill()
        process.wait(timeout=30)


@pytest.fixture
def flooding_model() -> Iterator[str]:
    yield from _model_process(WORDS, 0.0)


@pytest.fixture
def paced_model() -> Iterator[str]:
    yield from _model_process(6, 0.08)


@pytest.fixture
def steady_model() -> Iterator[str]:
    """A fast model: a chunk every 5 ms, which a reader follows."""
    yield from _model_process(60, 0.005)


@pytest.fixture
def holds(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The seconds of every hold of a socket while reading (the real hold, counted)."""
    held: list[float] = []
    hold = dynagent._compat.aiohttp.leave_unread

    async def counted(response: aiohttp.ClientResponse, seconds: float) -> None:
        held.append(seconds)
        await hold(response, seconds)

    monkeypatch.setattr(dynagent._compat.aiohttp, "leave_unread", counted)
    return held


@pytest.fixture
def flooding_model_over_tls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    authority = trustme.CA()
    served = tmp_path / "server.pem"
    authority.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(served)
    authority.cert_pem.write_to_path(tmp_path / "ca.pem")
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))  # the client trusts it
    yield from _model_process(WORDS, 0.0, str(served))


async def _read(base_url: str) -> tuple[int, bytes, float]:
    """(blocks, body, seconds) of one chat completions stream read by ``paced_blocks``
    through the service's own model client."""
    pool = ClientPool()
    try:
        body = await pool.get(base_url, "key").post(
            {"model": DEFAULT_MODEL, "messages": [{"role": "user", "content": "hi"}]}
            | {"stream": True},
            30,
        )
        loop = asyncio.get_running_loop()
        started, blocks, data = loop.time(), 0, bytearray()
        async for block in paced_blocks(body):
            blocks += 1
            data += block
        elapsed = loop.time() - started
        body.release()
        return blocks, bytes(data), elapsed
    finally:
        await pool.aclose()


async def test_a_flood_is_read_a_few_times_per_read_every(
    flooding_model: str, holds: list[float]
) -> None:
    blocks, data, elapsed = await _read(flooding_model)
    assert holds
    events = data.count(b"\n\n")
    assert events == WORDS + 3  # the role chunk, one a word, the finish chunk, [DONE]
    assert data.endswith(b"data: [DONE]\n\n")
    # Once per TCP segment it was ~one block per event; now two reads per READ_EVERY at
    # most (one that waited, one of what its parsing let in), whatever the machine's load.
    print(f"{events} events in {blocks} blocks over {elapsed:.3f} s")
    assert blocks <= 2 * elapsed / READ_EVERY + 10, (blocks, elapsed, events)


async def test_a_flood_over_tls_is_read_whole_and_paced(flooding_model_over_tls: str) -> None:
    # Pausing reads of a TLS transport holds the decrypted stream, not the socket alone.
    blocks, data, elapsed = await _read(flooding_model_over_tls)
    assert data.count(b"\n\n") == WORDS + 3
    assert data.endswith(b"data: [DONE]\n\n")
    assert blocks <= 2 * elapsed / READ_EVERY + 10, (blocks, elapsed)


async def test_a_model_at_a_readers_pace_is_read_as_it_writes(paced_model: str) -> None:
    blocks, data, _ = await _read(paced_model)
    events = data.count(b"\n\n")
    # The role chunk and the first word go out together, so do the finish chunk and
    # [DONE]; between them one write every 80 ms, each read on its own, never held.
    assert events == 6 + 3
    assert blocks >= events - 2, (blocks, events)


async def test_a_fast_model_a_reader_follows_is_not_held(
    steady_model: str, holds: list[float]
) -> None:
    # Holding a socket costs a timer and two changes of its polling: a stream whose
    # chunks come further apart than READ_EVERY gains nothing from it. Only when two reads
    # came closer than that (the reader fell behind for a moment) may the next be held.
    blocks, data, _ = await _read(steady_model)
    assert data.count(b"\n\n") == 60 + 3
    assert len(holds) <= blocks // 4, (len(holds), blocks)


def _chunk(content: str) -> bytes:
    choice = {"index": 0, "delta": {"content": content}, "finish_reason": None}
    payload = {"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [choice]}
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


@pytest.fixture
async def gzip_model() -> AsyncIterator[str]:
    async def chat(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        response.enable_compression(web.ContentCoding.gzip)
        await response.prepare(request)
        for piece in ("Hel", "lo, ", "gzip"):
            await response.write(_chunk(piece))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    async with served(app) as base:
        yield f"{base}/v1"


async def test_a_gzip_stream_is_decoded_by_the_transport(gzip_model: str) -> None:
    pool = ClientPool()
    try:
        model = OpenAIModel(pool.get(gzip_model, "key"), "m", retries=0)
        request = ModelRequest(messages=({"role": "user", "content": "hi"},))
        texts = [item.text async for item in model.stream(request) if isinstance(item, TextDelta)]
    finally:
        await pool.aclose()
    assert "".join(texts) == "Hello, gzip"


@pytest.mark.parametrize(
    ("limit", "step", "message"),
    [
        ({"max_answer_chunks": 50}, Reply("w " * 200), "went past 50 chunks"),
        ({"max_answer_chars": 100}, Reply("word " * 40), "went past 100 characters"),
        (
            {"max_answer_chars": 100},
            CallTools([("lookup", {"query": "q" * 300})]),
            "went past 100 characters",
        ),
    ],
    ids=["chunks", "text", "tool arguments"],
)
async def test_a_streamed_answer_past_its_limits_is_a_model_error(
    make_agent: AgentFactory,
    model_server: ScriptedModelServer,
    limit: dict[str, int],
    step: Reply | CallTools,
    message: str,
) -> None:
    # Every chunk costs CPU and every character memory, whatever a model sends: a model
    # that floods one answer is cut off, and the cut is a model error like any other.
    model_server.script("gpt-main", [step])
    agent = make_agent(model={"retries": 0, **limit}, tools=[LOOKUP])
    events = [event async for event in agent.stream("hi")]
    [error] = [event for event in events if isinstance(event, ErrorEvent)]
    assert error.error_type == "model_error"
    assert message in error.message


async def test_an_answer_within_the_limits_streams_whole(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [Reply("w " * 50)])
    agent = make_agent(model={"max_answer_chunks": 60, "max_answer_chars": 100})
    events = [event async for event in agent.stream("hi")]
    text = "".join(event.text for event in events if isinstance(event, ModelDelta))
    assert text == "w " * 50


async def test_a_whole_answer_past_its_limit_is_refused_as_it_arrives(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    # Not streamed, the body is read the same way: 6 bytes a character (JSON's longest
    # escape) of max_answer_chars, and 1 MiB for the rest of the completion.
    model_server.script("gpt-main", [Reply("x" * 1_100_000)])
    agent = make_agent(model={"retries": 0, "max_answer_chars": 100})
    with pytest.raises(ModelError, match=f"went past {6 * 100 + (1 << 20)} bytes"):
        await agent.run("hi")


async def test_a_whole_answer_within_its_limit_is_read(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [Reply("x" * 900_000)])
    agent = make_agent(model={"retries": 0, "max_answer_chars": 1_000_000})
    result = await agent.run("hi")
    assert result.output == "x" * 900_000


@contextlib.contextmanager
def closed_by_the_loop() -> Iterator[list[str]]:
    """The async generators created in the block that were dropped unfinished: the event
    loop then closes each in a task of its own, woken from another thread's hook (a
    ``call_soon_threadsafe``, so a write to its wake-up pipe and a turn of the loop)."""
    firstiter, finalizer = sys.get_asyncgen_hooks()
    assert finalizer is not None
    dropped: list[str] = []

    def counted(generator: AsyncGenerator[object, None]) -> None:
        dropped.append(getattr(generator, "__qualname__", repr(generator)))
        finalizer(generator)

    sys.set_asyncgen_hooks(firstiter, counted)
    try:
        yield dropped
    finally:
        gc.collect()
        sys.set_asyncgen_hooks(firstiter, finalizer)


async def test_reading_a_model_leaves_no_generator_for_the_loop_to_close(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    # Every streamed answer ends at [DONE] with its reader still open: closed where it
    # ends, not left to the loop (two extra wake-ups and tasks a request, before).
    model_server.script("gpt-main", [Reply("w " * 50)], cycle=True)
    model_server.script("gpt-long", [Reply("x" * 1_100_000)])
    agent = make_agent(model={"retries": 0, "max_answer_chunks": 60, "max_answer_chars": 120})
    cut = make_agent(model={"retries": 0, "max_answer_chunks": 5}, name="cut")
    whole = make_agent(model={"name": "gpt-long", "retries": 0, "max_answer_chars": 100})
    with closed_by_the_loop() as dropped:
        streamed = [event async for event in agent.stream("hi")]
        refused = [event async for event in cut.stream("hi")]
        with pytest.raises(ModelError, match="went past"):
            await whole.run("hi")
    assert "".join(e.text for e in streamed if isinstance(e, ModelDelta)) == "w " * 50
    assert any(isinstance(e, ErrorEvent) for e in refused)
    assert dropped == []
