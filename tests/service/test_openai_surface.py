"""What the OpenAI routes do beside answering: CORS, stored responses and who may read
them, sessions and variables through extra fields and ``metadata``, ``user`` as the
canary key, ``client_tools: false``, and failures of a streamed Responses run."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from dynagent.registry.canary import picks_canary
from tests.support import DEFAULT_MODEL, CallTools, Fail, Reply, ScriptedModelServer
from tests.support.canary import canary_document, canary_filename
from tests.support.service import (
    RunningService,
    agent_document,
    parse_sse,
    running_service,
    service_config,
    write_agent,
)

KEY, OTHER_KEY = "surface-test-key-aaaaaaaaaaaa", "surface-test-key-bbbbbbbbbbbb"
APP = "https://app.example.com"
USER = [{"role": "user", "content": "Hi!"}]


def auth(key: str = KEY, **headers: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", **headers}


@pytest.fixture
async def service(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> AsyncIterator[RunningService]:
    write_agent(agents_dir, agent_document("bot", model_server, system="Team {{team}}."))
    write_agent(agents_dir, agent_document("locked", model_server, client_tools=False))
    config = service_config(agents_dir, state_dir, cors={"allow_origins": [APP]})
    environ = {"DYNAGENT_API_KEYS": f"{KEY},{OTHER_KEY}"}
    async with running_service(config, environ=environ) as running:
        yield running


async def test_a_preflight_from_an_allowed_origin(service: RunningService) -> None:
    response = await service.client.options(
        "/v1/chat/completions",
        headers={
            "Origin": APP,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type",
        },
    )
    assert response.status == 204
    assert {k: v for k, v in response.headers.items() if k.startswith("Access-Control")} == {
        "Access-Control-Allow-Origin": APP,
        "Access-Control-Allow-Methods": "GET, POST, DELETE, OPTIONS",
        "Access-Control-Allow-Headers": "authorization, content-type",
        "Access-Control-Max-Age": "600",
    }


async def test_a_preflight_from_another_origin_is_refused(service: RunningService) -> None:
    response = await service.client.options(
        "/v1/chat/completions",
        headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
    )
    assert (response.status, "Access-Control-Allow-Origin" in response.headers) == (403, False)


@pytest.mark.parametrize("stream", [False, True])
async def test_answers_to_an_allowed_origin_carry_cors_headers(
    service: RunningService, model_server: ScriptedModelServer, stream: bool
) -> None:
    model_server.script(DEFAULT_MODEL, [Reply("Hello.")])
    body = {"model": "bot", "messages": USER, "stream": stream, "variables": {"team": "a"}}
    response = await service.client.post(
        "/v1/chat/completions", json=body, headers=auth(Origin=APP)
    )
    await response.read()
    assert (response.status, response.headers["Access-Control-Allow-Origin"]) == (200, APP)
    exposed = response.headers["Access-Control-Expose-Headers"].split(", ")
    assert {"X-Trace-Id", "Retry-After", "X-Should-Retry"} <= set(exposed)  # a browser client's
    other = await service.client.get("/v1/models", headers=auth(Origin="https://evil.example"))
    assert (other.status, "Access-Control-Allow-Origin" in other.headers) == (200, False)


async def test_a_session_and_variables_through_extra_fields_and_metadata(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    model_server.script(DEFAULT_MODEL, [Reply("One."), Reply("Two.")])
    first = {"model": "bot", "messages": USER, "session_id": "s-1", "variables": {"team": "a"}}
    second = {
        "model": "bot",
        "messages": [{"role": "user", "content": "Again?"}],
        "metadata": {"session_id": "s-1", "variables": '{"team": "b"}'},
    }
    for body in (first, second):
        response = await service.client.post("/v1/chat/completions", json=body, headers=auth())
        assert response.status == 200, await response.text()
    assert model_server.requests[1]["messages"] == [
        {"role": "system", "content": "Team b."},
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "One."},
        {"role": "user", "content": "Again?"},
    ]


async def test_user_is_the_canary_key_without_a_session(
    service: RunningService, model_server: ScriptedModelServer, agents_dir: Path
) -> None:
    document = agent_document("bot", model_server, system="Team {{team}}.", description="new")
    write_agent(agents_dir, canary_document(document, 50), filename=canary_filename("bot"))
    await service.registry.wait_for(lambda registry: registry.entry("bot").canary is not None)
    users = [f"user-{i}" for i in range(8)] * 2
    model_server.script(DEFAULT_MODEL, [Reply("ok")] * len(users))
    variants = []
    for user in users:
        body = {"model": "bot", "messages": USER, "user": user, "variables": {"team": "a"}}
        response = await service.client.post("/v1/chat/completions", json=body, headers=auth())
        variants.append(response.headers["X-Agent-Variant"])
    expected = ["canary" if picks_canary("bot", user, 50) else "stable" for user in users]
    assert variants == expected
    assert set(expected) == {"stable", "canary"}


async def test_an_agent_may_forbid_client_tools(service: RunningService) -> None:
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    body = {"model": "locked", "messages": USER, "tools": [tool]}
    response = await service.client.post("/v1/chat/completions", json=body, headers=auth())
    assert (response.status, await response.json()) == (
        400,
        {
            "error": {
                "message": "agent 'locked' does not accept client tools (client_tools: false); "
                "send the request without 'tools'",
                "type": "invalid_request_error",
                "param": None,
                "code": None,
            }
        },
    )


def not_found(response_id: str) -> dict[str, Any]:
    return {
        "error": {
            "message": f"no stored response {response_id!r}; only the last 1000 responses "
            "created with store: true by this API key are kept",
            "type": "invalid_request_error",
            "param": None,
            "code": "response_not_found",
        }
    }


async def test_a_stored_response_is_read_only_with_its_key(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    model_server.script(DEFAULT_MODEL, [Reply("Kept."), Reply("Not kept.")])
    body = {"model": "bot", "input": "Hi", "variables": {"team": "a"}}
    kept = await (await service.client.post("/v1/responses", json=body, headers=auth())).json()
    mine = await service.client.get(f"/v1/responses/{kept['id']}", headers=auth())
    assert (mine.status, await mine.json()) == (200, kept)
    theirs = await service.client.get(f"/v1/responses/{kept['id']}", headers=auth(OTHER_KEY))
    assert (theirs.status, await theirs.json()) == (404, not_found(kept["id"]))
    unkept = await service.client.post(
        "/v1/responses", json={**body, "store": False}, headers=auth()
    )
    unkept_id = (await unkept.json())["id"]
    gone = await service.client.get(f"/v1/responses/{unkept_id}", headers=auth())
    assert (gone.status, await gone.json()) == (404, not_found(unkept_id))


async def test_a_streamed_response_that_fails_before_answering_has_its_status(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    model_server.script(DEFAULT_MODEL, [Fail(400)])
    body = {"model": "bot", "input": "Hi", "stream": True, "variables": {"team": "a"}}
    response = await service.client.post("/v1/responses", json=body, headers=auth())
    assert (response.status, (await response.json())["error"]["code"]) == (502, "model_error")


async def test_a_streamed_response_that_fails_later_ends_with_response_failed(
    service: RunningService, model_server: ScriptedModelServer, agents_dir: Path
) -> None:
    write_agent(agents_dir, agent_document("tooled", model_server, tools=["calculator"]))
    await service.registry.wait_for(lambda registry: "tooled" in registry)
    model_server.script(
        DEFAULT_MODEL,
        [CallTools([("calculator", {"expression": "1+1"})], text="Adding."), Fail(400)],
    )
    body = {"model": "tooled", "input": "Hi", "stream": True}
    response = await service.client.post("/v1/responses", json=body, headers=auth())
    events = parse_sse(await response.text())
    assert [name for name, _ in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.failed",
    ]
    failed = events[-1][1]
    assert (failed["sequence_number"], failed["response"]["status"]) == (5, "failed")
    assert failed["response"]["error"] == {
        "code": "model_error",
        "message": "the model endpoint answered 400: Error code: 400 - scripted failure 400",
    }
    assert failed["response"]["output"][0]["content"][0]["text"] == "Adding."


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


async def tooled(service: RunningService, model_server: ScriptedModelServer) -> None:
    service.write_agent(agent_document("tooled", model_server, tools=["calculator"]))
    await service.registry.wait_for(lambda registry: "tooled" in registry)


async def test_agent_and_client_calls_at_once_end_the_turn_with_the_client_calls(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    await tooled(service, model_server)
    both = CallTools([("calculator", {"expression": "1+1"}), ("get_weather", {"city": "Oslo"})])
    model_server.script(DEFAULT_MODEL, [both])
    body = {"model": "tooled", "messages": USER, "tools": [WEATHER]}
    response = await service.client.post("/v1/chat/completions", json=body, headers=auth())
    choice = (await response.json())["choices"][0]
    assert choice == {
        "index": 0,
        "message": {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                }
            ],
        },
        "finish_reason": "tool_calls",
    }


async def test_a_forced_tool_choice_binds_the_first_model_call_only(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    await tooled(service, model_server)
    model_server.script(
        DEFAULT_MODEL, [CallTools([("calculator", {"expression": "2*3"})]), Reply("6.")]
    )
    body = {"model": "tooled", "messages": USER, "tools": [WEATHER], "tool_choice": "required"}
    response = await service.client.post("/v1/chat/completions", json=body, headers=auth())
    assert (await response.json())["choices"][0]["message"]["content"] == "6."
    assert [r["tool_choice"] for r in model_server.requests] == ["required", "auto"]


@pytest.mark.parametrize("agent", ["offline", "offline-tools"])
async def test_the_offline_model_streams_its_answer_byte_for_byte(
    service: RunningService, agent: str
) -> None:
    tools = ["calculator"] if agent == "offline-tools" else []
    service.write_agent(agent_document(agent, tools=tools))
    await service.registry.wait_for(lambda registry: agent in registry)
    body = {"model": agent, "messages": [{"role": "user", "content": "Say  two  words."}]}
    whole = await service.client.post("/v1/chat/completions", json=body, headers=auth())
    content = (await whole.json())["choices"][0]["message"]["content"]
    streamed = await service.client.post(
        "/v1/chat/completions", json={**body, "stream": True}, headers=auth()
    )
    pieces = [
        data["choices"][0]["delta"].get("content") or ""
        for _, data in parse_sse(await streamed.text())
        if data != "[DONE]"
    ]
    assert "".join(pieces) == content
    called = " | calculator(2 + 2 * 3) -> 8" if tools else ""
    assert (
        content
        == f"[test model] you said: Say  two  words.{called} | prompt: You are a test agent."
    )
