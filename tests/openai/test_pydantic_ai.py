"""pydantic-ai against the service: ``run``, ``run_stream`` and a tool of the caller's own
(pydantic-ai runs it; the agent resumes with its result)."""

from __future__ import annotations

import openai
from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from tests.openai.conftest import API_KEY, Served
from tests.support import CallTools, Reply


def model(service: Served, name: str = "bot") -> OpenAIChatModel:
    client = openai.AsyncOpenAI(base_url=service.v1, api_key=API_KEY, max_retries=0)
    return OpenAIChatModel(name, provider=OpenAIProvider(openai_client=client))


async def test_run(service: Served) -> None:
    service.script([Reply("Hello from the agent.")])
    result = await Agent(model(service)).run("Hi")
    assert result.output == "Hello from the agent."
    assert result.usage.requests == 1


async def test_run_stream(service: Served) -> None:
    service.script([Reply("Streaming works fine.")])
    async with Agent(model(service)).run_stream("Hi") as result:
        pieces = [piece async for piece in result.stream_text(delta=True)]
    assert "".join(pieces) == "Streaming works fine."


async def test_a_caller_tool_runs_in_pydantic_ai(service: Served) -> None:
    service.script([CallTools([("lookup_order", {"order": "A-7"})]), Reply("A-7 shipped.")])
    caller = Agent(model(service, "tooled"))
    looked_up: list[str] = []

    @caller.tool_plain  # type: ignore[untyped-decorator]
    def lookup_order(order: str) -> str:
        """The status of an order."""
        looked_up.append(order)
        return "shipped"

    result = await caller.run("Where is A-7?")
    assert (result.output, looked_up) == ("A-7 shipped.", ["A-7"])
    first, second = service.requests()
    assert "lookup_order" in [t["function"]["name"] for t in first["tools"]]
    assert second["messages"][-1]["role"] == "tool"
    assert second["messages"][-1]["content"] == "shipped"
