"""``python -m bench._floor BASE_URL``: the floor of the service benchmarks.

A minimal aiohttp app whose ``POST /invoke`` makes the same single model call an
agent of the service makes (system prompt + the input, on the raw ``openai``
client), and answers ``{"output": text}``; ``POST /stream`` makes it streamed and relays
each text delta as a server-sent event: what serving a model call over HTTP costs with
nothing else. Prints ``{"url": …}`` once listening; stops on SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys

import openai
from aiohttp import web

from bench.scenarios import REPLY_MODEL, SYSTEM


async def serve(base_url: str) -> None:
    client = openai.AsyncOpenAI(base_url=base_url, api_key="bench-key", max_retries=0)

    async def invoke(request: web.Request) -> web.Response:
        body = await request.json()
        completion = await client.chat.completions.create(
            model=REPLY_MODEL,
            messages=[
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": body["input"]},
            ],
            timeout=30,
        )
        return web.json_response({"output": completion.choices[0].message.content})

    async def stream(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        chunks = await client.chat.completions.create(
            model=REPLY_MODEL,
            messages=[
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": body["input"]},
            ],
            stream=True,
            timeout=30,
        )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        async for chunk in chunks:
            if chunk.choices and chunk.choices[0].delta.content:
                data = json.dumps({"text": chunk.choices[0].delta.content})
                await response.write(f"data: {data}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/invoke", invoke)
    app.router.add_post("/stream", stream)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
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
    await client.close()
    print(json.dumps({"stopped": True}), flush=True)


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1]))
