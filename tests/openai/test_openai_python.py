"""openai-python against the service: sync, async, streaming, ``parse()``, the Responses
API (create, stream, retrieve, continuation, input items, delete) and the models list."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai.types.responses import ResponseFunctionToolCall
from pydantic import BaseModel

from tests.openai.conftest import API_KEY, TRIAGE_SCHEMA, WEATHER_TOOL, Served
from tests.support import CallTools, Fail, Reply
from tests.support._wire import estimate_tokens

USER: Any = [{"role": "user", "content": "Hi!"}]


@pytest.fixture
def client(service: Served) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=service.v1, api_key=API_KEY, max_retries=0) as client:
        yield client


def test_a_sync_completion_applies_only_the_settings_the_agent_allows(
    service: Served, client: openai.OpenAI
) -> None:
    service.script([Reply("Hello.")])
    raw = client.chat.completions.with_raw_response.create(
        model="bot", messages=USER, temperature=0.3, top_p=0.5, max_tokens=50, user="u-1"
    )
    completion = raw.parse()
    (request,) = service.requests()
    assert (request["temperature"], request["max_tokens"], "top_p" in request) == (0.3, 50, False)
    assert raw.headers["X-Ignored-Fields"] == "top_p"
    prompt, answer = estimate_tokens(request["messages"]), estimate_tokens("Hello.")
    assert completion.model_dump(exclude={"created"}, exclude_none=True) == {
        "id": f"chatcmpl-{raw.headers['X-Trace-Id']}",
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


async def test_an_async_completion(service: Served) -> None:
    service.script([Reply("Hello async.")])
    async with openai.AsyncOpenAI(base_url=service.v1, api_key=API_KEY, max_retries=0) as client:
        completion = await client.chat.completions.create(model="bot", messages=USER)
    assert (completion.choices[0].message.content, completion.choices[0].finish_reason) == (
        "Hello async.",
        "stop",
    )


def _tool_script() -> list[CallTools | Reply]:
    return [CallTools([("calculator", {"expression": "2+2"})], text="Let me add."), Reply("4.")]


def test_the_streamed_answer_is_the_answer_byte_for_byte(
    service: Served, client: openai.OpenAI
) -> None:
    service.script([*_tool_script(), *_tool_script()])
    whole = client.chat.completions.create(model="tooled", messages=USER)
    stream = client.chat.completions.create(model="tooled", messages=USER, stream=True)
    pieces = []
    for chunk in stream:  # OpenAI's documented loop: no chunk without a choice
        pieces.append(chunk.choices[0].delta.content or "")
    assert whole.choices[0].message.content == "Let me add.\n\n4."
    assert "".join(pieces) == whole.choices[0].message.content


class Triage(BaseModel):
    category: str


def test_parse_gets_a_validated_answer_after_a_retry(
    service: Served, client: openai.OpenAI
) -> None:
    service.script([Reply('{"category": 5}'), Reply('{"category": "billing"}')])
    completion = client.chat.completions.parse(model="bot", messages=USER, response_format=Triage)
    assert completion.choices[0].message.parsed == Triage(category="billing")
    first, second = service.requests()
    assert first["response_format"]["type"] == "json_schema"
    assert "does not match the required output schema" in second["messages"][-1]["content"]


def test_a_client_tool_ends_the_turn_and_its_result_resumes_it(
    service: Served, client: openai.OpenAI
) -> None:
    service.script([CallTools([("get_weather", {"city": "Paris"})]), Reply("Sunny in Paris.")])
    asked = client.chat.completions.create(
        model="tooled", messages=USER, tools=[WEATHER_TOOL], tool_choice="auto"
    )
    choice = asked.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    assert choice.message.tool_calls is not None
    (call,) = choice.message.tool_calls
    assert call.model_dump() == {
        "id": call.id,
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    history = [
        *USER,
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
    ]
    answer = client.chat.completions.create(model="tooled", messages=history, tools=[WEATHER_TOOL])
    assert answer.choices[0].message.content == "Sunny in Paris."
    first, second = service.requests()
    assert [t["function"]["name"] for t in first["tools"]] == ["calculator", "get_weather"]
    assert first["tool_choice"] == "auto"
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": call.id, "content": "sunny"}


def test_client_tool_calls_stream_as_deltas(service: Served, client: openai.OpenAI) -> None:
    service.script([CallTools([("get_weather", {"city": "Oslo"})], text="Checking.")])
    stream = client.chat.completions.create(
        model="tooled", messages=USER, tools=[WEATHER_TOOL], stream=True
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Checking."
    (calls,) = [c.choices[0].delta.tool_calls for c in chunks if c.choices[0].delta.tool_calls]
    assert [(c.index, c.function.name, c.function.arguments) for c in calls] == [  # type: ignore[union-attr]
        (0, "get_weather", '{"city": "Oslo"}')
    ]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize(
    "fields,message,param",
    [
        ({"n": 2}, "invalid request body: n: Input should be 1", "n"),
        (
            {"tools": [{**WEATHER_TOOL, "function": {"name": "calculator"}}]},
            "client tool name(s) calculator clash with tools of agent 'tooled'; rename them",
            None,
        ),
    ],
    ids=["n", "name clash"],
)
def test_what_an_agent_cannot_honour_is_a_400(
    client: openai.OpenAI, fields: dict[str, object], message: str, param: str | None
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="tooled", messages=USER, **fields)  # type: ignore[call-overload]
    assert caught.value.body == {
        "message": message,
        "type": "invalid_request_error",
        "param": param,
        "code": None,
    }


def test_a_failed_first_model_call_in_a_stream_keeps_its_status(
    service: Served, client: openai.OpenAI
) -> None:
    service.script([Fail(400)])
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="bot", messages=USER, stream=True)
    assert (caught.value.status_code, caught.value.code) == (502, "model_error")


def test_errors_carry_openais_codes(service: Served, client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="nobody", messages=USER)
    stranger = openai.OpenAI(base_url=service.v1, api_key="wrong", max_retries=0)
    with stranger, pytest.raises(openai.AuthenticationError) as denied:
        stranger.models.list()
    assert (missing.value.code, missing.value.type) == ("model_not_found", "invalid_request_error")
    assert (denied.value.code, denied.value.type) == ("invalid_api_key", "invalid_request_error")


def test_the_models_are_the_agents(client: openai.OpenAI) -> None:
    models = client.models.list()
    assert [(m.id, m.object, m.owned_by) for m in models] == [
        ("bot", "model", "dynagent"),
        ("tooled", "model", "dynagent"),
        ("triage", "model", "dynagent"),
    ]
    assert client.models.retrieve("bot").id == "bot"
    assert client.models.retrieve("bot@stable").id == "bot@stable"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("bot@canary")


def test_responses_create_retrieve_and_continue(service: Served, client: openai.OpenAI) -> None:
    service.script([Reply("Hello, Ann."), Reply("You are Ann.")])
    first = client.responses.create(model="bot", input="I am Ann.", instructions="Be kind.")
    assert (first.status, first.output_text) == ("completed", "Hello, Ann.")
    assert client.responses.retrieve(first.id).output_text == "Hello, Ann."
    second = client.responses.create(model="bot", input="Who am I?", previous_response_id=first.id)
    assert second.output_text == "You are Ann."
    assert second.usage is not None and second.usage.total_tokens > 0
    one, two = service.requests()
    assert one["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "system", "content": "Be kind."},
        {"role": "user", "content": "I am Ann."},
    ]
    assert two["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "I am Ann."},
        {"role": "assistant", "content": "Hello, Ann."},
        {"role": "user", "content": "Who am I?"},
    ]


def test_responses_input_items_page_in_both_orders_and_a_deleted_response_is_gone(
    service: Served, client: openai.OpenAI
) -> None:
    service.script([Reply("Hello, Ann."), Reply("You are Ann.")])
    first = client.responses.create(model="bot", input="I am Ann.", instructions="Be kind.")
    second = client.responses.create(model="bot", input="Who am I?", previous_response_id=first.id)

    def said(items: Any) -> list[tuple[str, str]]:
        return [(item.role, item.content[0].text) for item in items]

    newest_first: list[Any] = list(client.responses.input_items.list(second.id))
    assert said(newest_first) == [
        ("user", "Who am I?"),
        ("assistant", "Hello, Ann."),
        ("user", "I am Ann."),
    ]
    assert [item.content[0].type for item in newest_first] == [
        "input_text",
        "output_text",
        "input_text",
    ]
    paged = client.responses.input_items.list(second.id, order="asc", limit=1)
    assert said(paged.data) == [("user", "I am Ann.")] and paged.has_more
    assert said(paged) == said(reversed(newest_first))  # the client follows `after`
    assert client.responses.input_items.list(second.id, order="asc").data == paged.data + [
        item for item in reversed(newest_first[:2])
    ]
    with pytest.raises(openai.BadRequestError):
        client.responses.input_items.list(second.id, limit=101)

    client.responses.delete(second.id)
    for gone in (
        lambda: client.responses.retrieve(second.id),
        lambda: client.responses.input_items.list(second.id),
        lambda: client.responses.delete(second.id),
        lambda: client.responses.create(model="bot", input="?", previous_response_id=second.id),
    ):
        with pytest.raises(openai.NotFoundError):
            gone()
    assert client.responses.retrieve(first.id).output_text == "Hello, Ann."


def test_responses_input_items_hold_client_tool_calls_and_their_results(
    service: Served, client: openai.OpenAI
) -> None:
    service.script([CallTools([("get_weather", {"city": "Rome"})]), Reply("Warm in Rome.")])
    tool: Any = {"type": "function", **WEATHER_TOOL["function"]}
    asked = client.responses.create(model="tooled", input="Weather?", tools=[tool])
    (call,) = asked.output
    assert isinstance(call, ResponseFunctionToolCall)
    result: Any = {"type": "function_call_output", "call_id": call.call_id, "output": "warm"}
    answer = client.responses.create(
        model="tooled", previous_response_id=asked.id, input=[result], tools=[tool]
    )
    items: list[Any] = list(client.responses.input_items.list(answer.id, order="asc"))
    assert [item.type for item in items] == ["message", "function_call", "function_call_output"]
    _, made, returned = items
    assert (made.call_id, made.name, made.arguments) == (
        call.call_id,
        "get_weather",
        call.arguments,
    )
    assert (returned.call_id, returned.output) == (call.call_id, "warm")
    assert len({item.id for item in items}) == 3


def test_responses_client_tools_and_structured_text(service: Served, client: openai.OpenAI) -> None:
    service.script([CallTools([("get_weather", {"city": "Rome"})]), Reply('{"category": "other"}')])
    tool: Any = {"type": "function", **WEATHER_TOOL["function"]}
    asked = client.responses.create(model="tooled", input="Weather?", tools=[tool])
    (call,) = asked.output
    assert isinstance(call, ResponseFunctionToolCall)
    assert (call.type, call.name, call.arguments) == (
        "function_call",
        "get_weather",
        '{"city": "Rome"}',
    )
    result: Any = {"type": "function_call_output", "call_id": call.call_id, "output": "warm"}
    text: Any = {"format": {"type": "json_schema", "name": "triage", "schema": TRIAGE_SCHEMA}}
    answer = client.responses.create(
        model="tooled", previous_response_id=asked.id, input=[result], text=text
    )
    assert json.loads(answer.output_text) == {"category": "other"}
    assert service.requests()[1]["messages"][-2:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call.call_id,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call.call_id, "content": "warm"},
    ]


def test_responses_stream_typed_events(service: Served, client: openai.OpenAI) -> None:
    service.script([Reply("Hello there.", gap=0.06)])  # two deltas, paced
    with client.responses.stream(model="bot", input="Hi") as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert [e.type for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert final.output_text == "Hello there."


REFUSED = {
    "error": {
        "message": "Unsupported value: 'temperature' does not support 0.2 with this model.",
        "type": "invalid_request_error",
        "code": "unsupported_value",
    }
}
"""A refusal of the request the agent's own definition made (its settings): 502, final."""

CONTEXT_TOO_LONG = {
    "error": {
        "message": "This model's maximum context length is 8192 tokens.",
        "type": "invalid_request_error",
        "code": "context_length_exceeded",
    }
}


def test_a_request_the_model_endpoint_refuses_is_sent_once_by_a_client_that_retries(
    service: Served,
) -> None:
    """openai-python retries a 502 twice by default; the service's answer to a request its
    model endpoint refused says a retry would fail alike, so the run is made once."""
    service.script([Fail(400, REFUSED)])
    with openai.OpenAI(base_url=service.v1, api_key=API_KEY) as retrying:
        assert retrying.max_retries == 2
        with pytest.raises(openai.InternalServerError) as failed:
            retrying.chat.completions.create(model="bot", messages=USER)
    assert failed.value.status_code == 502
    assert failed.value.response.headers["X-Should-Retry"] == "false"
    assert "Unsupported value" in failed.value.message
    assert len(service.requests()) == 1


def test_a_streamed_request_the_model_endpoint_refuses_is_sent_once_too(service: Served) -> None:
    """The stream is held until the model answers: a refusal before its first chunk is the
    same 502 with ``X-Should-Retry: false``, and the client does not make the run again."""
    service.script([Fail(400, REFUSED)])
    with (
        openai.OpenAI(base_url=service.v1, api_key=API_KEY) as retrying,
        pytest.raises(openai.InternalServerError) as failed,
    ):
        retrying.chat.completions.create(model="bot", messages=USER, stream=True)
    assert failed.value.response.headers["X-Should-Retry"] == "false"
    assert len(service.requests()) == 1


@pytest.mark.parametrize("stream", [False, True])
def test_an_input_longer_than_the_context_window_is_the_callers_400(
    service: Served, stream: bool
) -> None:
    """As OpenAI answers it: ``BadRequestError`` with ``code: context_length_exceeded``, a
    caller's mistake (to shorten its messages), not a server error; whole or streamed."""
    service.script([Fail(400, CONTEXT_TOO_LONG)])
    with (
        openai.OpenAI(base_url=service.v1, api_key=API_KEY) as client,
        pytest.raises(openai.BadRequestError) as failed,
    ):
        client.chat.completions.create(model="bot", messages=USER, stream=stream)
    assert failed.value.status_code == 400
    assert failed.value.code == "context_length_exceeded"
    assert "maximum context length" in failed.value.message
    assert len(service.requests()) == 1
