"""A request longer than the model's context window is the caller's to shorten: 400
``input_too_long`` (OpenAI's ``context_length_exceeded`` on its routes), not a 502 of the
service, and never retried; however the endpoint words it (OpenAI's code, vLLM's message)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import Fail, ScriptedModelServer
from tests.support.service import (
    RunningService,
    agent_document,
    revision_of,
    running_service,
    service_config,
)

OPENAI_WORDING = {
    "error": {
        "message": "This model's maximum context length is 8192 tokens. However, your "
        "messages resulted in 9000 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}
VLLM_WORDING = {
    "object": "error",
    "message": "This model's maximum context length is 4096 tokens. However, you requested "
    "5000 tokens (4900 in the messages, 100 in the completion).",
    "type": "BadRequestError",
    "param": None,
    "code": 400,
}
OTHER_REFUSAL = {"error": {"message": "Unsupported value: 'temperature'", "code": None}}


@pytest.fixture
async def service(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> AsyncIterator[RunningService]:
    document = agent_document("bot", model_server, model={"name": "m-small", "retries": 2})
    async with running_service(service_config(agents_dir, state_dir), environ={}) as running:
        running.write_agent(document)
        await running.wait_serving("bot", revision_of(document))
        yield running


@pytest.mark.parametrize("wording", [OPENAI_WORDING, VLLM_WORDING], ids=["openai", "vllm"])
async def test_our_api_answers_400_input_too_long_and_not_to_retry(
    service: RunningService, model_server: ScriptedModelServer, wording: dict[str, Any]
) -> None:
    model_server.script("m-small", [Fail(400, wording)])
    response = await service.client.post("/v1/agents/bot/invoke", json={"input": "a" * 100})
    assert response.status == 400
    assert response.headers["X-Should-Retry"] == "false"
    error = (await response.json())["error"]
    assert error["type"] == "input_too_long"
    assert error["message"].startswith("the input is longer than the model's context window")
    assert "maximum context length" in error["message"]
    assert len(model_server.requests_for("m-small")) == 1  # a refusal is not retried
    trace = await (await service.client.get(f"/v1/traces/{error['trace_id']}")).json()
    (event,) = [e for e in trace["events"] if e["type"] == "error"]
    assert (event["error_type"], event["retryable"]) == ("input_too_long", False)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/responses"])
async def test_the_openai_routes_answer_context_length_exceeded(
    service: RunningService, model_server: ScriptedModelServer, route: str, stream: bool
) -> None:
    model_server.script("m-small", [Fail(400, OPENAI_WORDING)])
    body: dict[str, Any] = {"model": "bot", "stream": stream}
    if route == "/v1/responses":
        body["input"] = "hi"
    else:
        body["messages"] = [{"role": "user", "content": "hi"}]
    response = await service.client.post(route, json=body)
    assert response.status == 400
    error = (await response.json())["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "context_length_exceeded")


async def test_another_refusal_stays_a_502_model_error(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    model_server.script("m-small", [Fail(400, OTHER_REFUSAL)])
    response = await service.client.post("/v1/agents/bot/invoke", json={"input": "hi"})
    assert response.status == 502
    assert (await response.json())["error"]["type"] == "model_error"
