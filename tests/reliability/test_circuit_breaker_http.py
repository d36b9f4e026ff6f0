"""The circuit breaker as an HTTP caller sees it: a typed 502 ``circuit_open`` with
``Retry-After``, answered at once, with no request reaching the dead endpoint; it
survives agent rebuilds from the file source and half-opens after a tiny cooldown."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tests.support import Fail, Reply, ScriptedModelServer, Slow
from tests.support.service import RunningService, agent_document, revision_of

from .conftest import Serve

DOWN = Fail(503, headers={"retry-after-ms": "0"})
LAST = "the model endpoint answered 503: Error code: 503 - scripted failure 503"
COOLDOWN = 0.2
FAST = 10
"""A refused call (no request is sent) takes less than this many runs that the model answers
at once (``answer_floor``, measured in the same test); waiting out a backoff or a cooldown
would take hundreds."""
STORM = 50
"""The 429 storm's eight callers are all answered within this many such runs."""


async def invoke(service: RunningService, name: str = "bot") -> tuple[int, dict[str, Any], float]:
    started = time.perf_counter()
    response = await service.client.post(f"/v1/agents/{name}/invoke", json={"input": "hi"})
    body = await response.json()
    if response.status == 502 and body["error"]["type"] == "circuit_open":
        assert response.headers["Retry-After"].isdigit()
    return response.status, body, time.perf_counter() - started


def error(body: dict[str, Any]) -> tuple[str, str]:
    return body["error"]["type"], body["error"]["message"]


async def test_a_dead_endpoint_gets_no_request_once_the_circuit_is_open(
    serve: Serve, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [DOWN] * 5)
    model = {"retries": 2, "circuit_breaker": {"failures": 5, "cooldown": 30}}
    document = agent_document("bot", model_server, model=model)
    async with serve(document) as service:
        floor = await service.answer_floor(model_server)
        first = await invoke(service)
        second = await invoke(service)
        reached = len(model_server.requests_for("gpt-main"))
        refused = [await invoke(service) for _ in range(10)]
        chat = await service.client.post(
            "/v1/chat/completions",
            json={"model": "bot", "messages": [{"role": "user", "content": "hi"}]},
        )
        chat_body = await chat.json()

    slowest = max(elapsed for *_, elapsed in refused)
    print(
        f"\nrequests reaching the dead endpoint: {reached} before the circuit opened, "
        f"{len(model_server.requests_for('gpt-main')) - reached} after; slowest refusal "
        f"{slowest * 1000:.1f} ms = {slowest / floor:.1f} answered runs"
    )
    assert (first[0], error(first[1])) == (502, ("model_error", LAST))
    assert (second[0], second[1]["error"]["type"]) == (502, "circuit_open")
    assert reached == 5  # retries + 1, then 2 more until the 5th failure opened it
    message = (
        f"circuit open for gpt-main at {model_server.base_url}, retry after 30s "
        f"(5 consecutive failures; last: {LAST})"
    )
    assert {(status, error(body)) for status, body, _ in refused} == {
        (502, ("circuit_open", message))
    }
    assert slowest < FAST * floor, (slowest, floor)
    assert (chat.status, chat.headers["Retry-After"], chat_body) == (
        502,
        "30",
        {
            "error": {
                "message": message,
                "type": "server_error",
                "param": None,
                "code": "circuit_open",
            }
        },
    )
    assert len(model_server.requests_for("gpt-main")) == 5


async def test_the_open_circuit_outlives_an_edit_of_the_agent(
    serve: Serve, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [DOWN] * 3)
    model = {"retries": 0, "circuit_breaker": {"failures": 3, "cooldown": 30}}
    document = agent_document("bot", model_server, model=model)
    async with serve(document) as service:
        floor = await service.answer_floor(model_server)
        for _ in range(3):
            await invoke(service)
        edited = {**document, "prompt": {"system": "A better prompt."}}
        service.write_agent(edited)
        await service.wait_serving("bot", revision_of(edited))
        status, body, elapsed = await invoke(service)

    assert (status, body["error"]["type"]) == (502, "circuit_open")
    assert elapsed < FAST * floor, (elapsed, floor)
    assert len(model_server.requests_for("gpt-main")) == 3


async def test_after_the_cooldown_one_trial_call_goes_through_and_closes_it(
    serve: Serve, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [DOWN] * 2 + [Slow(0.3, Reply("back")), Reply("closed")])
    model = {"retries": 0, "circuit_breaker": {"failures": 2, "cooldown": COOLDOWN}}
    async with serve(agent_document("bot", model_server, model=model)) as service:
        for _ in range(2):
            await invoke(service)
        assert (await invoke(service))[1]["error"]["type"] == "circuit_open"

        await asyncio.sleep(COOLDOWN)  # the cooldown itself, nothing more
        trial_and_refused = await asyncio.gather(*(invoke(service) for _ in range(3)))
        after = await invoke(service)

    outcomes = sorted(
        body.get("output") or body["error"]["type"] for _, body, _ in trial_and_refused
    )
    assert outcomes == ["back", "circuit_open", "circuit_open"]
    assert (after[0], after[1]["output"]) == (200, "closed")
    assert len(model_server.requests) == 4


async def test_a_failed_trial_call_opens_it_again_at_once(
    serve: Serve, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [DOWN] * 3)
    model = {"retries": 0, "circuit_breaker": {"failures": 2, "cooldown": COOLDOWN}}
    async with serve(agent_document("bot", model_server, model=model)) as service:
        for _ in range(2):
            await invoke(service)
        await asyncio.sleep(COOLDOWN)
        trial = await invoke(service)
        refused = await invoke(service)

    assert error(trial[1]) == ("model_error", LAST)
    assert (refused[0], refused[1]["error"]["type"]) == (502, "circuit_open")
    assert "(3 consecutive failures;" in refused[1]["error"]["message"]
    assert len(model_server.requests) == 3


async def test_the_fallback_serves_at_once_while_the_primary_circuit_is_open(
    serve: Serve, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [DOWN] * 2)
    model_server.script("gpt-fallback", [Reply("from the fallback")] * 6)
    fallback = {"provider": "openai", "base_url": model_server.base_url, "name": "gpt-fallback"}
    model = {"retries": 0, "circuit_breaker": {"failures": 2}, "fallback": fallback}
    async with serve(agent_document("bot", model_server, model=model)) as service:
        answers = [await invoke(service) for _ in range(6)]

    assert [(status, body["output"]) for status, body, _ in answers] == [
        (200, "from the fallback")
    ] * 6
    assert len(model_server.requests_for("gpt-main")) == 2
    assert len(model_server.requests_for("gpt-fallback")) == 6


async def test_a_429_storm_from_concurrent_callers_is_cut_short(
    serve: Serve, model_server: ScriptedModelServer
) -> None:
    """8 callers at once, 2 retries each: 24 requests without a breaker."""
    model_server.script("gpt-main", [Fail(429, headers={"retry-after": "0"})], cycle=True)
    model = {"retries": 2, "circuit_breaker": {"failures": 5, "cooldown": 30}}
    async with serve(agent_document("bot", model_server, model=model)) as service:
        floor = await service.answer_floor(model_server)
        started = time.perf_counter()
        answers = await asyncio.gather(*(invoke(service) for _ in range(8)))
        elapsed = time.perf_counter() - started
        late = await invoke(service)

    assert {status for status, *_ in answers} == {502}
    assert {body["error"]["type"] for _, body, _ in answers} <= {"model_error", "circuit_open"}
    assert 5 <= len(model_server.requests_for("gpt-main")) <= 5 + 8 - 1
    assert elapsed < STORM * floor, (elapsed, floor)
    assert (late[0], late[1]["error"]["type"]) == (502, "circuit_open")
