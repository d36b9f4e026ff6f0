"""The OpenAI Agents SDK against the service: its default Responses model and
``OpenAIChatCompletionsModel``, each with a function tool, run whole and streamed."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    RunConfig,
    Runner,
    function_tool,
)

from tests.openai.conftest import API_KEY, Served
from tests.support import CallTools, Reply, Step

NO_TRACING = RunConfig(tracing_disabled=True)  # the SDK would export traces to OpenAI


def sdk_agent(service: Served, kind: str, looked_up: list[str]) -> Agent[Any]:
    client = openai.AsyncOpenAI(base_url=service.v1, api_key=API_KEY, max_retries=0)
    model: Any = (
        OpenAIResponsesModel(model="tooled", openai_client=client)
        if kind == "responses"
        else OpenAIChatCompletionsModel(model="tooled", openai_client=client)
    )

    @function_tool  # type: ignore[untyped-decorator]
    def lookup_order(order: str) -> str:
        """The status of an order."""
        looked_up.append(order)
        return "shipped"

    return Agent(name="caller", instructions="Help.", model=model, tools=[lookup_order])


SCRIPT: list[Step] = [CallTools([("lookup_order", {"order": "B-2"})]), Reply("B-2 has shipped.")]


@pytest.mark.parametrize("kind", ["responses", "chat_completions"])
async def test_a_function_tool_round_trip(service: Served, kind: str) -> None:
    service.script(SCRIPT)
    looked_up: list[str] = []
    result = await Runner.run(
        sdk_agent(service, kind, looked_up), "Where is B-2?", run_config=NO_TRACING
    )
    assert (result.final_output, looked_up) == ("B-2 has shipped.", ["B-2"])
    first, second = service.requests()
    assert [t["function"]["name"] for t in first["tools"]] == ["calculator", "lookup_order"]
    assert second["messages"][-1] == {
        "role": "tool",
        "tool_call_id": second["messages"][-2]["tool_calls"][0]["id"],
        "content": "shipped",
    }


@pytest.mark.parametrize("kind", ["responses", "chat_completions"])
async def test_streamed(service: Served, kind: str) -> None:
    service.script(SCRIPT)
    looked_up: list[str] = []
    result = Runner.run_streamed(
        sdk_agent(service, kind, looked_up), "Where is B-2?", run_config=NO_TRACING
    )
    kinds = [event.type async for event in result.stream_events()]
    assert (result.final_output, looked_up) == ("B-2 has shipped.", ["B-2"])
    assert "raw_response_event" in kinds
    assert kinds.count("run_item_stream_event") >= 3  # the call, its output, the answer
