"""``python -m bench._model_server``: the scripted OpenAI-compatible model server of a
bench run, in its own process.

Plays every script of ``bench.scenarios`` in a cycle. Prints ``{"base_url": …}``
once listening; on SIGTERM prints ``{"requests": n, "errors": [...]}`` and exits.
Request bodies are dropped as they arrive (the server would otherwise keep them
all), after ``protocol_problem`` has checked them like the tests' server does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal

from bench.scenarios import SCRIPTS
from tests.support.scripted_model import ScriptedModelServer


async def serve() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    server = ScriptedModelServer()
    for model, steps in SCRIPTS.items():
        server.script(model, steps, cycle=True)
    await server.start()
    print(json.dumps({"base_url": server.base_url}), flush=True)
    seen = 0
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.5)
        seen += len(server.requests)
        server.requests.clear()
    await server.stop()
    seen += len(server.requests)
    print(json.dumps({"requests": seen, "errors": server.errors[:20]}), flush=True)


if __name__ == "__main__":
    asyncio.run(serve())
