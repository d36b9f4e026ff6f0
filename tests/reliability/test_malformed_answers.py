"""Every malformed model answer is a model error: 502 ``model_error``, traced,
counted in ``/metrics``, seen by the circuit breaker and by the canary guard.

Before the fix a 200 whose choice had no ``message`` was a 500 ``internal`` that nothing
counted, and a stream that was not SSE at all was a successful empty answer.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support import DEFAULT_MODEL, Malformed, Reply, ScriptedModelServer
from tests.support.canary import canary_document
from tests.support.service import RunningService, agent_document, parse_sse

from .conftest import Serve


def _completion(choice: dict[str, Any]) -> str:
    return json.dumps(
        {"id": "c1", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice]}
    )


PREFIX = "malformed answer from the model endpoint: "
CASES: dict[str, tuple[Malformed, bool, str]] = {
    "no message": (
        Malformed(_completion({"index": 0, "finish_reason": "stop"})),
        False,
        PREFIX + "its first choice has no message",
    ),
    "message is text": (
        Malformed(_completion({"index": 0, "message": "hi", "finish_reason": "stop"})),
        False,
        PREFIX + "its first choice has no message",
    ),
    "content is a number": (
        Malformed(_completion({"index": 0, "message": {"role": "assistant", "content": 42}})),
        False,
        PREFIX + "the message content is int, not text",
    ),
    "tool call without a name": (
        Malformed(
            _completion(
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "tool_calls": [{"id": "x", "type": "function", "function": {}}],
                    },
                }
            )
        ),
        False,
        PREFIX + "a tool call without a function name",
    ),
    "garbage stream": (
        Malformed("garbage\nnot server-sent events\n"),
        True,
        PREFIX + "the stream held no answer (not a chat completions stream?)",
    ),
    "JSON instead of a stream": (
        Malformed(_completion({"index": 0}), content_type="application/json"),
        True,
        PREFIX + "the stream held no answer (not a chat completions stream?)",
    ),
}


async def _invoke(service: RunningService, stream: bool, **headers: str) -> tuple[int, Any]:
    response = await service.client.post(
        "/v1/agents/bot/invoke", json={"input": "hi", "stream": stream}, headers=headers
    )
    if not stream:
        return response.status, await response.json()
    events = parse_sse(await response.text())
    [error] = [data for name, data in events if name == "error"]
    return response.status, {"error": {**error, "type": error["error_type"]}}


def _model_errors(text: str) -> dict[str, float]:
    return {
        sample.labels["variant"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "dynagent_errors_total" and sample.labels["type"] == "model_error"
    }


async def test_every_malformed_answer_is_a_traced_counted_model_error(
    serve: Serve, model_server: ScriptedModelServer
) -> None:
    model_server.script(DEFAULT_MODEL, [answer for answer, _, _ in CASES.values()])
    model = {"retries": 0, "circuit_breaker": {"failures": 100}}
    document = agent_document("bot", model_server, model=model)
    seen: dict[str, tuple[int, str, str]] = {}
    async with serve(document) as service:
        for name, (_, stream, _) in CASES.items():
            status, body = await _invoke(service, stream)
            error = body["error"]
            trace = await (await service.client.get(f"/v1/traces/{error['trace_id']}")).json()
            [traced] = [e for e in trace["events"] if e["type"] == "error"]
            assert traced["message"] == error["message"]
            seen[name] = (status if not stream else 502, error["type"], error["message"])
        metrics = await (await service.client.get("/metrics")).text()

    assert seen == {name: (502, "model_error", message) for name, (_, _, message) in CASES.items()}
    assert _model_errors(metrics) == {"stable": len(CASES)}


@pytest.mark.parametrize("case", ["no message", "garbage stream"])
async def test_malformed_answers_open_the_breaker_and_the_guard_pulls_the_canary(
    serve: Serve, model_server: ScriptedModelServer, case: str
) -> None:
    answer, stream, message = CASES[case]
    stable = agent_document("bot", model_server, model={"retries": 0})
    canary_model = {
        "name": "gpt-canary",
        "retries": 0,
        "circuit_breaker": {"failures": 3, "cooldown": 60},
    }
    canary = canary_document(
        agent_document("bot", model_server, system="Canary.", model=canary_model),
        weight=100,
        guard={"min_requests": 3},
    )
    model_server.script("gpt-canary", [answer] * 3)
    model_server.script(DEFAULT_MODEL, [Reply("stable answer")])
    async with serve(stable) as service:
        service.write_agent(canary, filename="bot.canary.yaml")
        await service.registry.wait_for(lambda registry: registry.entry("bot").canary is not None)
        failed = [await _invoke(service, stream) for _ in range(3)]
        pinned = await _invoke(service, False, **{"X-Agent-Variant": "canary"})
        unpinned = await _invoke(service, False)
        state = service.registry.status("bot")["canary"]["state"]

    assert [(body["error"]["type"], body["error"]["message"]) for _, body in failed] == [
        ("model_error", message)
    ] * 3
    assert (pinned[0], pinned[1]["error"]["type"]) == (502, "circuit_open")
    assert (unpinned[0], unpinned[1]["output"], state) == (200, "stable answer", "pulled")
    assert len(model_server.requests_for("gpt-canary")) == 3  # none once the circuit opened
