"""One answer text on every surface: our API (whole and streamed), chat completions
(whole and streamed), the Responses API and A2A answer the same text for the same run.
The answer was the last model call's text on ``/invoke`` and A2A, and every text of the
turn on the OpenAI routes (``Let me calculate that.`` before the tool call included)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support import DEFAULT_MODEL, CallTools, Reply, ScriptedModelServer
from tests.support.service import (
    RunningService,
    agent_document,
    parse_sse,
    running_service,
    service_config,
    write_agent,
)

QUESTION = "What is 17 * 23?"
ANSWER = "Let me calculate that.\n\nThe answer is 391."
"""Every text the model wrote in the turn, the texts of successive model calls joined by a
blank line (docs/http-api.md, "The answer text")."""


async def _invoke(service: RunningService) -> str:
    response = await service.client.post("/v1/agents/bot/invoke", json={"input": QUESTION})
    output: str = (await response.json())["output"]
    return output


async def _invoke_stream(service: RunningService) -> str:
    body = {"input": QUESTION, "stream": True}
    response = await service.client.post("/v1/agents/bot/invoke", json=body)
    events = parse_sse(await response.text())
    deltas = "".join(data["text"] for name, data in events if name == "model_delta")
    (final,) = [data["output"] for name, data in events if name == "final_output"]
    assert deltas.replace("\n\n", "") == final.replace("\n\n", ""), events
    return str(final)


CHAT = {"model": "bot", "messages": [{"role": "user", "content": QUESTION}]}


async def _chat(service: RunningService) -> str:
    response = await service.client.post("/v1/chat/completions", json=CHAT)
    content: str = (await response.json())["choices"][0]["message"]["content"]
    return content


async def _chat_stream(service: RunningService) -> str:
    response = await service.client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    chunks = [data for _, data in parse_sse(await response.text()) if data != "[DONE]"]
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


async def _responses(service: RunningService) -> str:
    body = {"model": "bot", "input": QUESTION}
    answer = await (await service.client.post("/v1/responses", json=body)).json()
    texts = [
        part["text"]
        for item in answer["output"]
        if item["type"] == "message"
        for part in item["content"]
    ]
    return "".join(texts)


async def _a2a(service: RunningService) -> str:
    message = {
        "role": "user",
        "messageId": uuid.uuid4().hex,
        "parts": [{"kind": "text", "text": QUESTION}],
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}
    answer = await (await service.client.post("/a2a/bot", json=body)).json()
    return "".join(part["text"] for part in answer["result"]["parts"])


SURFACES: dict[str, Callable[[RunningService], Awaitable[str]]] = {
    "invoke": _invoke,
    "invoke stream": _invoke_stream,
    "chat completions": _chat,
    "chat completions stream": _chat_stream,
    "responses": _responses,
    "a2a": _a2a,
}


@pytest.mark.parametrize("surface", SURFACES.values(), ids=SURFACES.keys())
async def test_every_surface_answers_every_text_of_the_turn(
    model_server: ScriptedModelServer,
    agents_dir: Path,
    state_dir: Path,
    surface: Callable[[RunningService], Awaitable[str]],
) -> None:
    write_agent(agents_dir, agent_document("bot", model_server, tools=["calculator"]))
    steps: list[Any] = [
        CallTools([("calculator", {"expression": "17 * 23"})], text="Let me calculate that."),
        Reply("The answer is 391."),
    ]
    model_server.script(DEFAULT_MODEL, steps)
    async with running_service(service_config(agents_dir, state_dir), environ={}) as service:
        await service.registry.wait_for(lambda registry: "bot" in registry)
        assert await surface(service) == ANSWER
    model_server.assert_complete()
