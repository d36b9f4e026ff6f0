"""``python -m bench._floor BASE_URL [raw|sdk|connections] [uvloop] [work=N]``: the floors of
the service benchmarks.

A minimal aiohttp app whose ``POST /invoke`` makes the same single model call an
agent of the service makes (system prompt + the input) and answers
``{"output": text}``; ``POST /stream`` makes it streamed and relays each text delta
as a server-sent event: what serving a model call over HTTP costs with nothing else.

- ``raw`` (the physical floor): the call goes out on one ``aiohttp.ClientSession`` and
  is read with plain ``json``; nothing else.
- ``sdk``: the call goes out on the ``openai`` SDK's client, so the SDK's own cost is
  in the figure: the proxy a developer would write with the SDK.
- ``connections``: the call goes out on the service's own model connections
  (``dynagent.models._http.Connections``: aiohttp's client protocol and parser without
  its session), read with plain ``json``: the floor a service making its calls that way
  is measured against, beside the physical floor's aiohttp session.

With ``uvloop`` the floor runs on uvloop's event loop, as ``dynagent serve`` does with
``listen.event_loop: uvloop``: what the loop alone takes off the floor.

With ``work=N`` each request first spends about N µs of CPU in plain Python (a counted
loop, calibrated at start; no system call): how the floor's cost grows with work added
per request, which turns the bars' ratios into a budget of microseconds
(``bench.throughput --work-floors``).

Prints ``{"url": …}`` once listening; stops on SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import openai
from aiohttp import web
from openai.types.chat import ChatCompletionMessageParam

from bench.scenarios import REPLY_MODEL, SYSTEM

Complete = Callable[[str], Awaitable[str]]
"""One whole model call: the input, then the answer's text."""
Deltas = Callable[[str], AsyncIterator[str]]
"""One streamed model call: the input, then each text delta."""


def _messages(text: str) -> list[ChatCompletionMessageParam]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]


async def _texts(lines: AsyncIterable[bytes]) -> AsyncIterator[str]:
    """The text deltas of a chat completions stream, read line by line with plain ``json``."""
    async for line in lines:
        if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
            continue
        choices = json.loads(line[6:])["choices"]
        if choices and choices[0]["delta"].get("content"):
            yield choices[0]["delta"]["content"]


def raw_calls(session: aiohttp.ClientSession, base_url: str) -> tuple[Complete, Deltas]:
    url = base_url.rstrip("/") + "/chat/completions"
    headers = {"Authorization": "Bearer bench-key", "Content-Type": "application/json"}

    async def complete(text: str) -> str:
        body = json.dumps({"model": REPLY_MODEL, "messages": _messages(text)})
        async with session.post(url, data=body, headers=headers) as response:
            answer = json.loads(await response.read())
        content: str = answer["choices"][0]["message"]["content"]
        return content

    async def deltas(text: str) -> AsyncIterator[str]:
        body = json.dumps({"model": REPLY_MODEL, "messages": _messages(text), "stream": True})
        async with session.post(url, data=body, headers=headers) as response:
            async for text in _texts(response.content):
                yield text

    return complete, deltas


def connection_calls(base_url: str) -> tuple[Complete, Deltas]:
    from dynagent.models._http import Connections

    headers = {"Authorization": "Bearer bench-key", "Content-Type": "application/json"}
    pool = Connections(
        base_url.rstrip("/") + "/chat/completions",
        headers,
        ssl_context=None,
        keepalive=5.0,
        limit=1000,
    )

    async def complete(text: str) -> str:
        body = json.dumps({"model": REPLY_MODEL, "messages": _messages(text)}).encode()
        response = await pool.post(body, None, None)
        try:
            answer = json.loads(await response.content.read())
        finally:
            response.release()
        content: str = answer["choices"][0]["message"]["content"]
        return content

    async def deltas(text: str) -> AsyncIterator[str]:
        body = {"model": REPLY_MODEL, "messages": _messages(text), "stream": True}
        response = await pool.post(json.dumps(body).encode(), None, 30.0)
        try:
            async for text in _texts(response.content):
                yield text
        finally:
            response.release()

    return complete, deltas


def sdk_calls(client: openai.AsyncOpenAI) -> tuple[Complete, Deltas]:
    async def complete(text: str) -> str:
        completion = await client.chat.completions.create(
            model=REPLY_MODEL,
            messages=_messages(text),
            timeout=30,
        )
        return completion.choices[0].message.content or ""

    async def deltas(text: str) -> AsyncIterator[str]:
        chunks = await client.chat.completions.create(
            model=REPLY_MODEL,
            messages=_messages(text),
            stream=True,
            timeout=30,
        )
        async for chunk in chunks:
            if chunk.choices and chunk.choices[0].delta.content:
                yield chunk.choices[0].delta.content

    return complete, deltas


def _spin(count: int) -> int:
    total = 0
    for step in range(count):
        total += step
    return total


def burner(micros: float) -> Callable[[], object]:
    """A call that spends about ``micros`` µs of this thread's CPU in plain Python."""
    if micros <= 0:
        return lambda: None
    trial = 200_000
    _spin(trial)  # warm
    costs = []
    for _ in range(3):
        started = time.thread_time()
        _spin(trial)
        costs.append((time.thread_time() - started) / trial)
    count = max(1, round(micros / 1e6 / min(costs)))
    return lambda: _spin(count)


def app(complete: Complete, deltas: Deltas, work: Callable[[], object]) -> web.Application:
    async def invoke(request: web.Request) -> web.Response:
        work()
        body = await request.json()
        return web.json_response({"output": await complete(body["input"])})

    async def stream(request: web.Request) -> web.StreamResponse:
        work()
        body = await request.json()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        async for text in deltas(body["input"]):
            await response.write(f"data: {json.dumps({'text': text})}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    application = web.Application()
    application.router.add_post("/invoke", invoke)
    application.router.add_post("/stream", stream)
    return application


async def serve(base_url: str, kind: str, micros: float = 0.0) -> None:
    timeout = aiohttp.ClientTimeout(total=30)
    session = aiohttp.ClientSession(timeout=timeout)
    client = openai.AsyncOpenAI(base_url=base_url, api_key="bench-key", max_retries=0)
    if kind == "connections":
        calls = connection_calls(base_url)
    else:
        calls = raw_calls(session, base_url) if kind == "raw" else sdk_calls(client)
    await serve_app(app(*calls, burner(micros)), session.close, client.close)


async def serve_app(application: web.Application, *closing: Callable[[], Awaitable[Any]]) -> None:
    """``application`` on a free loopback port until SIGTERM or SIGINT; ``closing`` after.
    Prints ``{"url": …}`` once listening and ``{"stopped": true}`` at the end."""
    runner = web.AppRunner(application, access_log=None, shutdown_timeout=1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    print(json.dumps({"url": f"http://{host}:{port}"}), flush=True)
    await stop.wait()
    await runner.cleanup()
    for close in closing:
        await close()
    print(json.dumps({"stopped": True}), flush=True)


if __name__ == "__main__":
    kind = sys.argv[2] if len(sys.argv) > 2 else "sdk"
    options = sys.argv[3:]
    micros = sum(float(o.removeprefix("work=")) for o in options if o.startswith("work="))
    if "uvloop" in options:
        import uvloop

        uvloop.run(serve(sys.argv[1], kind, micros))
    else:
        asyncio.run(serve(sys.argv[1], kind, micros))
