"""The service and the scripted model server on a real port, in a thread of their own, so
that the real OpenAI-speaking clients — synchronous ones too — call it as they would in
production. One file per client; every test scripts the model and the fixture checks
that the script was consumed exactly.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from dynagent.http.app import create_app
from tests.support import ScriptedModelServer, Step
from tests.support.service import agent_document, service_config, write_agent

API_KEY = "openai-clients-test-key-0001"
MODEL = "gpt-main"
WEATHER_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
TRIAGE_SCHEMA = {
    "type": "object",
    "properties": {"category": {"type": "string", "enum": ["billing", "other"]}},
    "required": ["category"],
    "additionalProperties": False,
}


@dataclass
class Served:
    """The service's base URL and the model server behind it, on a loop of their own."""

    url: str
    model: ScriptedModelServer
    loop: asyncio.AbstractEventLoop

    @property
    def v1(self) -> str:
        return f"{self.url}/v1"

    def script(self, steps: list[Step]) -> None:
        async def script() -> None:
            self.model.script(MODEL, steps)

        asyncio.run_coroutine_threadsafe(script(), self.loop).result(10)

    def requests(self) -> list[dict[str, Any]]:
        return list(self.model.requests)


def _agents(folder: Path, model: ScriptedModelServer) -> None:
    settings = {"caller_settings": ["temperature", "max_tokens"]}
    write_agent(folder, agent_document("bot", model, system="Be brief.", model=settings))
    write_agent(folder, agent_document("tooled", model, tools=["calculator"]))
    write_agent(folder, agent_document("triage", model, output={"schema": TRIAGE_SCHEMA}))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("openai-clients")
    (root / "agents").mkdir()
    (root / "state").mkdir()
    loop = asyncio.new_event_loop()
    started: Future[tuple[web.AppRunner, Served]] = Future()

    async def start() -> None:
        model = await ScriptedModelServer().start()
        _agents(root / "agents", model)
        config = service_config(root / "agents", root / "state")
        app = create_app(config, environ={"DYNAGENT_API_KEYS": API_KEY})
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        started.set_result((runner, Served(f"http://{host}:{port}", model, loop)))

    def main() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(start())
        except BaseException as exc:
            started.set_exception(exc)
            return
        loop.run_forever()

    thread = threading.Thread(target=main, name="openai-clients", daemon=True)
    thread.start()
    runner, served = started.result(timeout=60)
    try:
        yield served
    finally:

        async def stop() -> None:
            await runner.cleanup()
            await served.model.stop()

        asyncio.run_coroutine_threadsafe(stop(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)


@pytest.fixture
def service(served: Served) -> Iterator[Served]:
    """The served service, with a fresh model script that must be consumed by the test."""
    served.model.requests.clear()
    served.model.errors.clear()
    yield served
    served.model.assert_no_errors()
    served.model.assert_complete()
