"""The scripted model server itself: the harness every runtime test leans on."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.support import CallTools, Fail, Held, Reply, ScriptedModelServer

USER: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]


@pytest.fixture
async def client(model_server: ScriptedModelServer) -> AsyncIterator[openai.AsyncOpenAI]:
    client = openai.AsyncOpenAI(base_url=model_server.base_url, api_key="k", max_retries=0)
    yield client
    await client.close()


async def test_answers_in_the_openai_wire_format(
    model_server: ScriptedModelServer, client: openai.AsyncOpenAI
) -> None:
    model_server.script("m", [CallTools([("add", {"a": 1}), ("bad", "{oops")]), Reply("done")])

    first = await client.chat.completions.create(model="m", messages=USER)
    second = await client.chat.completions.create(model="m", messages=USER)

    assert first.model_dump(include={"object", "model", "choices"}) == {
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "logprobs": None,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "refusal": None,
                    "annotations": None,
                    "audio": None,
                    "function_call": None,
                    "tool_calls": [
                        {
                            "id": "call_1_0",
                            "type": "function",
                            "function": {"name": "add", "arguments": '{"a": 1}'},
                        },
                        {
                            "id": "call_1_1",
                            "type": "function",
                            "function": {"name": "bad", "arguments": "{oops"},
                        },
                    ],
                },
            }
        ],
    }
    assert second.choices[0].message.content == "done"
    assert second.choices[0].finish_reason == "stop"
    assert second.usage is not None
    assert second.usage.total_tokens == second.usage.prompt_tokens + second.usage.completion_tokens


async def test_streams_text_and_tool_call_deltas_with_usage_last(
    model_server: ScriptedModelServer, client: openai.AsyncOpenAI
) -> None:
    model_server.script("m", [CallTools([("add", {"a": 1, "b": 22})], text="Let me add.")])

    stream = await client.chat.completions.create(
        model="m",
        messages=USER,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]

    texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    call_deltas = [
        (
            d.index,
            d.id,
            d.function.name if d.function else None,
            d.function.arguments if d.function else None,
        )
        for c in chunks
        if c.choices
        for d in c.choices[0].delta.tool_calls or ()
    ]
    assert texts == ["Let ", "me ", "add."]
    assert call_deltas[0] == (0, "call_1_0", "add", "")
    assert len(call_deltas) > 2  # the arguments arrive in several pieces
    assert "".join(d[3] or "" for d in call_deltas) == json.dumps({"a": 1, "b": 22})
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None


async def test_a_request_beyond_the_script_is_a_500_and_a_recorded_error(
    model_server: ScriptedModelServer, client: openai.AsyncOpenAI
) -> None:
    with pytest.raises(openai.InternalServerError, match="beyond its script"):
        await client.chat.completions.create(model="unscripted", messages=USER)

    assert len(model_server.errors) == 1
    with pytest.raises(AssertionError, match="beyond its script"):
        model_server.assert_no_errors()
    model_server.errors.clear()


async def test_left_over_steps_fail_assert_complete(model_server: ScriptedModelServer) -> None:
    model_server.script("m", [Reply("never requested")])

    with pytest.raises(AssertionError, match="never requested"):
        model_server.assert_complete()
    model_server.script(
        "m", [Fail(500)], cycle=True
    )  # replaces the script; a cycle at its start is complete


async def test_refuses_a_conversation_the_real_endpoint_would_refuse(
    model_server: ScriptedModelServer, client: openai.AsyncOpenAI
) -> None:
    orphan_result: list[ChatCompletionMessageParam] = [
        *USER,
        {"role": "tool", "tool_call_id": "x", "content": "1"},
    ]

    with pytest.raises(openai.BadRequestError, match="must answer a preceding 'tool_calls'"):
        await client.chat.completions.create(model="m", messages=orphan_result)

    assert model_server.requests == [{"model": "m", "messages": orphan_result}]
    model_server.errors.clear()


async def test_a_failed_expectation_refuses_the_request(
    model_server: ScriptedModelServer, client: openai.AsyncOpenAI
) -> None:
    def no_tools(body: dict[str, Any]) -> None:
        assert "tools" in body, "the model was sent no tools"

    model_server.script("m", [Reply("x", expect=no_tools)])

    with pytest.raises(openai.BadRequestError, match="the model was sent no tools"):
        await client.chat.completions.create(model="m", messages=USER)
    model_server.errors.clear()


async def test_cycle_replays_the_script_and_lists_models(
    model_server: ScriptedModelServer, client: openai.AsyncOpenAI
) -> None:
    model_server.script("m", [Reply("one"), Reply("two")], cycle=True)

    answers = [
        (await client.chat.completions.create(model="m", messages=USER)).choices[0].message.content
        for _ in range(4)
    ]

    assert answers == ["one", "two", "one", "two"]
    assert [m.id async for m in client.models.list()] == ["m"]


async def test_a_held_call_answers_once_released(
    model_server: ScriptedModelServer, client: openai.AsyncOpenAI
) -> None:
    released = asyncio.Event()
    model_server.script("m", [Held(released, Reply("let go"))])
    call = asyncio.create_task(client.chat.completions.create(model="m", messages=USER))
    await model_server.wait_for_requests(1)
    assert not call.done()
    released.set()
    assert (await call).choices[0].message.content == "let go"
