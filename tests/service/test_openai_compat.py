"""``/v1/chat/completions`` through the official ``openai`` client: agents by name."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.support import DEFAULT_MODEL, CallTools, Fail, Reply, ScriptedModelServer
from tests.support._wire import estimate_tokens
from tests.support.service import (
    RunningService,
    agent_document,
    running_service,
    service_config,
    write_agent,
)

API_KEY = "openai-compat-test-key-0001"
TRIAGE_SCHEMA = {
    "type": "object",
    "properties": {"category": {"type": "string", "enum": ["billing", "other"]}},
    "required": ["category"],
}


@pytest.fixture
async def service(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> AsyncIterator[RunningService]:
    write_agent(agents_dir, agent_document("bot", model_server, system="Be brief."))
    write_agent(agents_dir, agent_document("triage", output={"schema": TRIAGE_SCHEMA}))
    environ = {"DYNAGENT_API_KEYS": API_KEY}
    async with running_service(service_config(agents_dir, state_dir), environ=environ) as running:
        yield running


@pytest.fixture
async def client(service: RunningService) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        base_url=f"{service.url}/v1", api_key=API_KEY, max_retries=0
    ) as client:
        yield client


USER: Any = [{"role": "user", "content": "Hi!"}]


async def test_a_completion_is_an_agent_run(
    service: RunningService, client: openai.AsyncOpenAI, model_server: ScriptedModelServer
) -> None:
    model_server.script(DEFAULT_MODEL, [Reply("Hello.")])
    raw = await client.chat.completions.with_raw_response.create(
        model="bot", messages=[{"role": "user", "content": "Hi!"}], temperature=1.5
    )
    completion = raw.parse()
    trace_id = raw.headers["X-Trace-Id"]

    (request,) = model_server.requests
    assert request["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi!"},
    ]
    assert "temperature" not in request  # the agent's definition decides sampling
    prompt, answer = estimate_tokens(request["messages"]), estimate_tokens("Hello.")
    assert completion.model_dump(exclude={"created"}, exclude_none=True) == {
        "id": f"chatcmpl-{trace_id}",
        "object": "chat.completion",
        "model": "bot",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello."},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": answer,
            "total_tokens": prompt + answer,
        },
    }
    assert (raw.headers["X-Agent-Revision"], raw.headers["X-Agent-Variant"]) == (
        service.serving("bot"),
        "stable",
    )


async def test_a_streamed_completion_assembles_the_answer(
    service: RunningService, client: openai.AsyncOpenAI, model_server: ScriptedModelServer
) -> None:
    model_server.script(DEFAULT_MODEL, [Reply("Hello there, friend.", gap=0.06)])
    raw = await client.chat.completions.with_raw_response.create(
        model="bot", messages=[{"role": "user", "content": "Hi!"}], stream=True
    )
    assert raw.headers["X-Agent-Revision"] == service.serving("bot")
    chunks = [chunk async for chunk in raw.parse()]

    assert {c.id for c in chunks} == {f"chatcmpl-{raw.headers['X-Trace-Id']}"}
    assert {c.model for c in chunks} == {"bot"}
    # OpenAI's documented loop: every chunk has a choice, as no usage chunk was asked for.
    content = [c.choices[0].delta.content for c in chunks]
    assert content == ["", "Hello ", "there, ", "friend.", None]
    assert [c.choices[0].finish_reason for c in chunks] == [None, None, None, None, "stop"]
    assert {c.usage for c in chunks} == {None}


async def test_the_usage_chunk_comes_when_asked_for(
    client: openai.AsyncOpenAI, model_server: ScriptedModelServer
) -> None:
    model_server.script(DEFAULT_MODEL, [Reply("Hello there.", gap=0.06)])
    stream = await client.chat.completions.create(
        model="bot", messages=USER, stream=True, stream_options={"include_usage": True}
    )
    chunks = [chunk async for chunk in stream]
    assert [c.choices[0].delta.content for c in chunks[:-1]] == ["", "Hello ", "there.", None]
    assert {c.usage for c in chunks[:-1]} == {None}
    assert chunks[-1].choices == []
    (request,) = model_server.requests
    prompt, answer = estimate_tokens(request["messages"]), estimate_tokens("Hello there.")
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.model_dump(exclude_none=True) == {
        "prompt_tokens": prompt,
        "completion_tokens": answer,
        "total_tokens": prompt + answer,
    }


@pytest.mark.parametrize("stream", [False, True])
async def test_a_structured_answer_is_sent_as_json_text(
    client: openai.AsyncOpenAI, stream: bool
) -> None:
    if stream:
        chunks = await client.chat.completions.create(
            model="triage", messages=[{"role": "user", "content": "Refund?"}], stream=True
        )
        text = "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])
    else:
        completion = await client.chat.completions.create(
            model="triage", messages=[{"role": "user", "content": "Refund?"}]
        )
        text = completion.choices[0].message.content or ""
    assert json.loads(text) == {"category": "billing"}


async def test_name_at_stable_pins_the_stable_version(
    service: RunningService, client: openai.AsyncOpenAI, model_server: ScriptedModelServer
) -> None:
    model_server.script(DEFAULT_MODEL, [Reply("Stable.")])
    raw = await client.chat.completions.with_raw_response.create(
        model="bot@stable", messages=[{"role": "user", "content": "Hi!"}]
    )
    completion = raw.parse()
    assert (completion.model, completion.choices[0].message.content) == ("bot@stable", "Stable.")
    assert raw.headers["X-Agent-Variant"] == "stable"


async def test_name_at_canary_without_a_canary_is_not_found(client: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        await client.chat.completions.create(
            model="bot@canary", messages=[{"role": "user", "content": "Hi!"}]
        )
    assert caught.value.status_code == 404
    assert caught.value.body == {
        "message": "agent 'bot' has no canary",
        "type": "invalid_request_error",
        "param": None,
        "code": "model_not_found",
    }


@pytest.mark.parametrize(
    "model,error",
    [
        ("nobody", openai.NotFoundError),
        ("bot@beta", openai.BadRequestError),
    ],
)
async def test_unknown_models_are_client_errors(
    client: openai.AsyncOpenAI, model: str, error: type[openai.APIStatusError]
) -> None:
    with pytest.raises(error):
        await client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Hi!"}]
        )


async def test_a_wrong_key_is_an_authentication_error(service: RunningService) -> None:
    async with openai.AsyncOpenAI(
        base_url=f"{service.url}/v1", api_key="not-the-key", max_retries=0
    ) as stranger:
        with pytest.raises(openai.AuthenticationError):
            await stranger.chat.completions.create(
                model="bot", messages=[{"role": "user", "content": "Hi!"}]
            )


async def test_a_model_failure_reaches_the_client(
    client: openai.AsyncOpenAI, model_server: ScriptedModelServer
) -> None:
    model_server.script(DEFAULT_MODEL, [Fail(400)])
    with pytest.raises(openai.APIStatusError) as caught:
        await client.chat.completions.create(
            model="bot", messages=[{"role": "user", "content": "Hi!"}]
        )
    assert caught.value.status_code == 502


async def test_a_model_failure_before_the_stream_starts_has_its_status(
    client: openai.AsyncOpenAI, model_server: ScriptedModelServer
) -> None:
    model_server.script(DEFAULT_MODEL, [Fail(400)])
    with pytest.raises(openai.APIStatusError) as caught:
        await client.chat.completions.create(model="bot", messages=USER, stream=True)
    assert caught.value.status_code == 502
    assert caught.value.body == {
        "message": "the model endpoint answered 400: Error code: 400 - scripted failure 400",
        "type": "server_error",
        "param": None,
        "code": "model_error",
    }


async def test_a_model_failure_mid_stream_raises_in_the_client(
    service: RunningService, client: openai.AsyncOpenAI, model_server: ScriptedModelServer
) -> None:
    service.write_agent(
        agent_document("tooled", model_server, tools=["calculator"]),
    )
    await service.registry.wait_for(lambda registry: "tooled" in registry)
    model_server.script(
        DEFAULT_MODEL,
        [CallTools([("calculator", {"expression": "2+2"})], text="Adding."), Fail(400)],
    )
    chunks = await client.chat.completions.create(model="tooled", messages=USER, stream=True)
    seen = []
    with pytest.raises(openai.APIError, match="the model endpoint answered 400"):
        async for chunk in chunks:
            seen.append(chunk.choices[0].delta.content)
    assert seen == ["", "Adding."]
