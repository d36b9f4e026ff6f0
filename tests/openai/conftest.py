"""The service and the scripted model server on a real port, in a thread of their own, so
that the real OpenAI-speaking clients — synchronous ones too — call it as they would in
production. One file per client; every test scripts the model and the fixture checks
that the script was consumed exactly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dynagent.http.app import create_app
from tests.support import ScriptedModelServer, Step
from tests.support.service import agent_document, service_config, write_agent
from tests.support.threaded import loop_in_thread, served_in_thread

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
    """The service's base URL, and the model server behind it with the loop it runs on."""

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
    with loop_in_thread() as loop:
        model = asyncio.run_coroutine_threadsafe(ScriptedModelServer().start(), loop).result(60)
        try:
            _agents(root / "agents", model)
            config = service_config(root / "agents", root / "state")
            environ = {"DYNAGENT_API_KEYS": API_KEY}
            with served_in_thread(
                lambda: create_app(config, environ=environ), shutdown_timeout=1
            ) as app:
                yield Served(app.url, model, loop)
        finally:
            asyncio.run_coroutine_threadsafe(model.stop(), loop).result(timeout=30)


@pytest.fixture
def service(served: Served) -> Iterator[Served]:
    """The served service, with a fresh model script that must be consumed by the test."""
    served.model.requests.clear()
    served.model.errors.clear()
    yield served
    served.model.assert_no_errors()
    served.model.assert_complete()
