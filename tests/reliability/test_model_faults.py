"""Model faults reach the HTTP caller as a typed 502/504 JSON error, quickly, after
exactly ``retries + 1`` requests to the endpoint (honouring ``Retry-After``)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import pytest

from tests.support import BrokenStream, Fail, Malformed, Reply, ScriptedModelServer, Slow
from tests.support.service import RunningService, agent_document, parse_sse

from .conftest import Serve

SLACK = 25
"""Allowed on top of the configured timeouts and backoffs, per request to the endpoint: this
many runs that the model answers at once (``answer_floor``, measured in the same test)."""

NO_WAIT = {"retry-after-ms": "0"}
TRUNCATED = '{"id": "chatcmpl-1", "object": "chat.completion", "choices": [{"index": 0, "mess'


@dataclass(frozen=True)
class Fault:
    steps: list[Any]
    model: dict[str, Any]
    status: int
    type: str
    message: str
    requests: int
    """Requests the endpoint must receive: ``retries + 1``, or 1 when retrying is futile."""
    least: float = 0.0
    """Seconds the run must take at least (Retry-After honoured)."""
    most: float = 0.0
    """Seconds of timeouts and backoffs it may take, before ``SLACK``."""


FAULTS = {
    "timeout": Fault(
        [Slow(30, Reply("late"))] * 2,
        {"timeout": 0.3, "retries": 1},
        504,
        "timeout",
        "the model endpoint did not answer within model.timeout = 0.3 s",
        2,
        least=0.6,
        most=0.6 + 0.25 * 1.25,
    ),
    "429-storm": Fault(
        [Fail(429, headers={"retry-after": "0.2"})] * 3,
        {"retries": 2},
        502,
        "model_error",
        "the model endpoint answered 429: Error code: 429 - scripted failure 429",
        3,
        least=0.4,
        most=0.4,
    ),
    "5xx": Fault(
        [Fail(500, headers=NO_WAIT), Fail(502, headers=NO_WAIT), Fail(503, headers=NO_WAIT)],
        {"retries": 2},
        502,
        "model_error",
        "the model endpoint answered 503: Error code: 503 - scripted failure 503",
        3,
    ),
    "malformed-json": Fault(
        [Malformed("{not json")],
        {"retries": 2},
        502,
        "model_error",
        "malformed response from the model endpoint: unexpected character, expected a "
        "string key: line 1 column 2 (char 1)",
        1,
    ),
    "truncated-json": Fault(
        [Malformed(TRUNCATED)],
        {"retries": 2},
        502,
        "model_error",
        "malformed response from the model endpoint: unexpected end of data: "
        "line 1 column 81 (char 80)",
        1,
    ),
    "dropped-connection": Fault(
        [BrokenStream("half an answer")] * 2,
        {"retries": 1, "timeout": 5},
        502,
        "model_error",
        "the connection to the model endpoint at {address} broke before the answer was complete",
        2,
        most=0.25 * 1.25,
    ),
}


@pytest.mark.parametrize("fault", FAULTS.values(), ids=FAULTS.keys())
async def test_a_model_fault_is_a_typed_error_quickly_after_bounded_retries(
    serve: Serve, model_server: ScriptedModelServer, fault: Fault
) -> None:
    model_server.script("gpt-main", fault.steps)
    address = model_server.address
    document = agent_document("bot", model_server, model=fault.model)
    async with serve(document) as service:
        floor = await service.answer_floor(model_server)
        started = time.perf_counter()
        response = await service.client.post("/v1/agents/bot/invoke", json={"input": "hi"})
        elapsed = time.perf_counter() - started
        body = await response.json()

    assert len(body["error"].pop("trace_id")) == 32
    assert (response.status, body) == (
        fault.status,
        {"error": {"type": fault.type, "message": fault.message.format(address=address)}},
    )
    assert len(model_server.requests_for("gpt-main")) == fault.requests
    slack = SLACK * fault.requests * floor
    assert fault.least <= elapsed < fault.most + slack, f"took {elapsed:.2f} s, floor {floor}"


async def test_the_openai_compatible_endpoint_answers_the_same_typed_error(
    serve: Serve, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [Slow(30, Reply("late"))])
    document = agent_document("bot", model_server, model={"timeout": 0.3, "retries": 0})
    async with serve(document) as service:
        floor = await service.answer_floor(model_server)
        started = time.perf_counter()
        response = await service.client.post(
            "/v1/chat/completions",
            json={"model": "bot", "messages": [{"role": "user", "content": "hi"}]},
        )
        elapsed = time.perf_counter() - started
        body = await response.json()

    assert len(response.headers["X-Trace-Id"]) == 32
    assert (response.status, body) == (
        504,
        {
            "error": {
                "message": "the model endpoint did not answer within model.timeout = 0.3 s",
                "type": "server_error",
                "param": None,
                "code": "timeout",
            }
        },
    )
    assert elapsed < 0.3 + SLACK * floor, f"took {elapsed:.2f} s, floor {floor}"


async def stream_events(service: RunningService, path: str, body: dict[str, Any]) -> list[Any]:
    response = await service.client.post(path, json={**body, "stream": True})
    assert (response.status, response.content_type) == (200, "text/event-stream")
    return parse_sse(await response.text())


async def test_a_stream_broken_mid_answer_ends_with_a_typed_error_event(
    serve: Serve, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [BrokenStream("partial answer that never ends")])
    async with serve(agent_document("bot", model_server, model={"retries": 2})) as service:
        events = await stream_events(service, "/v1/agents/bot/invoke", {"input": "hi"})

    assert [name for name, _ in events] == [
        "run_started",
        "model_request",
        "model_delta",
        "error",
        "run_finished",
    ]
    error, finished = events[3][1], events[4][1]
    assert (error["error_type"], error["message"]) == (
        "model_error",
        f"the connection to the model endpoint at {model_server.address} broke before the "
        "answer was complete after part of the answer was streamed",
    )
    assert finished["status"] == "error"
    assert len(model_server.requests) == 1  # text reached the caller: no retry


async def test_a_stream_that_never_starts_is_retried_then_answers_its_status(
    serve: Serve, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [Fail(503, headers=NO_WAIT)] * 2)
    async with serve(agent_document("bot", model_server, model={"retries": 1})) as service:
        body = {"model": "bot", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        response = await service.client.post("/v1/chat/completions", json=body)
        answer = await response.json()

    # Nothing was sent before the failure: the real status, not a 200 carrying an error.
    assert (response.status, answer) == (
        502,
        {
            "error": {
                "message": "the model endpoint answered 503: Error code: 503 - "
                "scripted failure 503",
                "type": "server_error",
                "param": None,
                "code": "model_error",
            }
        },
    )
    assert len(model_server.requests) == 2


async def test_a_malformed_stream_is_a_typed_error_event_without_retry(
    serve: Serve, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [Malformed("data: {nope\n\n")])
    async with serve(agent_document("bot", model_server, model={"retries": 2})) as service:
        events = await stream_events(service, "/v1/agents/bot/invoke", {"input": "hi"})

    assert [name for name, _ in events] == ["run_started", "model_request", "error", "run_finished"]
    assert events[2][1]["error_type"] == "model_error"
    assert events[2][1]["message"].startswith("malformed stream from the model endpoint: ")
    assert len(model_server.requests) == 1
