"""langchain-openai's ``ChatOpenAI`` against the service: ``invoke``, ``stream``,
``bind_tools`` (a client tool) and ``with_structured_output``."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_openai import ChatOpenAI
from pydantic import BaseModel

from tests.openai.conftest import API_KEY, WEATHER_TOOL, Served
from tests.support import CallTools, Fail, Reply, Step


def chat(service: Served, model: str = "bot", **options: Any) -> ChatOpenAI:
    return ChatOpenAI(model=model, base_url=service.v1, api_key=API_KEY, max_retries=0, **options)


def test_invoke(service: Served) -> None:
    service.script([Reply("Hello from the agent.")])
    answer = chat(service, temperature=0.2).invoke("Hi")
    assert (answer.content, answer.response_metadata["finish_reason"]) == (
        "Hello from the agent.",
        "stop",
    )
    (request,) = service.requests()
    assert request["temperature"] == 0.2  # bot allows callers to set it


def test_stream_equals_invoke_on_a_tool_using_agent(service: Served) -> None:
    steps: list[Step] = [
        CallTools([("calculator", {"expression": "6*7"})], text="Computing."),
        Reply("42."),
    ]
    service.script([*steps, *steps])
    model = chat(service, "tooled")
    whole = model.invoke("6 times 7?")
    streamed = "".join(str(chunk.content) for chunk in model.stream("6 times 7?"))
    assert (whole.content, streamed) == ("Computing.\n\n42.", "Computing.\n\n42.")


def test_bind_tools_gets_the_call_and_resumes_with_its_result(service: Served) -> None:
    service.script([CallTools([("get_weather", {"city": "Lima"})]), Reply("Lima is cloudy.")])
    model = chat(service, "tooled").bind_tools([WEATHER_TOOL])
    asked = model.invoke([HumanMessage("Weather in Lima?")])
    assert isinstance(asked, AIMessage)
    (call,) = asked.tool_calls
    assert (call["name"], call["args"]) == ("get_weather", {"city": "Lima"})
    assert asked.response_metadata["finish_reason"] == "tool_calls"
    answer = model.invoke(
        [
            HumanMessage("Weather in Lima?"),
            asked,
            ToolMessage("cloudy", tool_call_id=call["id"]),
        ]
    )
    assert answer.content == "Lima is cloudy."


class Weather(BaseModel):
    city: str
    sky: str


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_with_structured_output(service: Served, method: str) -> None:
    if method == "function_calling":  # a forced client tool: the turn ends with its call
        service.script([CallTools([("Weather", {"city": "Nice", "sky": "blue"})])])
    else:
        service.script([Reply('{"city": "Nice", "sky": "blue"}')])
    model = chat(service).with_structured_output(Weather, method=method)
    assert model.invoke("Weather in Nice?") == Weather(city="Nice", sky="blue")
    (request,) = service.requests()
    if method == "function_calling":
        assert request["tool_choice"] == {"type": "function", "function": {"name": "Weather"}}
    else:
        assert request["response_format"]["type"] == "json_schema"


def test_a_request_the_model_endpoint_refuses_is_not_retried_by_chat_openai(
    service: Served,
) -> None:
    """``ChatOpenAI`` with its default retries: the service's 502 for a request its model
    endpoint refused says a retry would fail alike, and the run is made once."""
    service.script([Fail(400, {"error": {"message": "unsupported value: 'temperature'"}})])
    with pytest.raises(openai.InternalServerError):
        ChatOpenAI(model="bot", base_url=service.v1, api_key=API_KEY).invoke("Hi")
    assert len(service.requests()) == 1
