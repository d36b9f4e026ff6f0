"""A model call cut off before it answered (the run's time up, its caller gone, the
service stopping) never reports its tokens, yet the endpoint read its prompt and wrote
part of an answer: the run counts it at an estimate, four characters a token of the
prompt sent (``model_request``'s ``prompt_chars``) and of the text streamed so far."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from dynagent import Tool
from dynagent.events import (
    ErrorEvent,
    ModelDelta,
    ModelRequestEvent,
    ModelResponseEvent,
    RunFinished,
    Usage,
    spent,
)
from dynagent.exceptions import CostLimitExceeded, ModelError, RunTimeout
from dynagent.models import ToolDefinition
from dynagent.models.cut import MEDIA_CHARS, prompt_size
from dynagent.models.prices import Price, Prices
from dynagent.runtime.agent import Agent
from tests.support import AgentFactory, Reply, ScriptedModelServer, Slow

PRICES = Prices({"gpt-main": Price(input=3.0, output=15.0)})
WORDS = " ".join(f"word{i}" for i in range(30))


def priced(agent: Agent) -> Agent:
    return dataclasses.replace(agent, prices=PRICES)


def prompt_chars(body: dict[str, Any]) -> int:
    """The characters of text in a request's messages, as the service counts them."""
    return sum(len(m["role"]) + len(m["content"]) for m in body["messages"])


def cost(usage: Usage) -> float:
    return round((usage.input_tokens * 3.0 + usage.output_tokens * 15.0) / 1e6, 8)


def test_a_call_cut_off_is_estimated_and_an_answered_or_failed_one_is_not() -> None:
    request = ModelRequestEvent(trace_id="t", step=1, model="m", messages=2, prompt_chars=10)
    deltas = [ModelDelta(trace_id="t", step=1, text=t) for t in ("abcde", "fg")]
    answer = ModelResponseEvent(
        trace_id="t", step=1, model="m", content="x", tool_calls=[], usage=Usage(7, 1),
        duration_ms=1.0, cost_usd=0.5,
    )  # fmt: skip
    failed = ErrorEvent(trace_id="t", step=1, error_type="model_error", message="refused")

    assert spent([request, *deltas]) == (Usage(3, 2), 0.0)  # no price: its cost unknown
    assert spent([request, *deltas], lambda u: u.total_tokens / 100) == (Usage(3, 2), 0.05)
    assert spent([request, answer, request], lambda u: 1.0) == (Usage(10, 1), 1.5)
    assert spent([request, answer]) == (Usage(7, 1), 0.5)
    assert spent([request, failed]) == (Usage(), 0.0)


async def test_a_whole_run_whose_time_runs_out_mid_call_counts_the_call(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [Slow(30, Reply("too late"))])
    agent = priced(make_agent(limits={"timeout": 0.3}))

    with pytest.raises(RunTimeout) as caught:
        await agent.run("tell me a story")

    (body,) = model_server.requests
    request = next(e for e in caught.value.events if isinstance(e, ModelRequestEvent))
    assert request.prompt_chars == prompt_chars(body)
    finished = RunFinished.of(caught.value.events)
    assert finished is not None
    assert finished.usage == Usage(-(-prompt_chars(body) // 4), 0)
    assert finished.cost_usd == cost(finished.usage) > 0


async def test_the_loop_counts_its_tool_definitions_in_the_prompt_of_a_cut_call(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    async def run(arguments: dict[str, Any]) -> str:
        return "pong"

    schema = {"type": "object", "properties": {"target": {"type": "string"}}}
    ping = Tool.of(ToolDefinition("ping", "Ping a host by its name.", schema), run)
    model_server.script("gpt-main", [Slow(30, Reply("too late"))])
    agent = priced(make_agent(tools=[ping], limits={"timeout": 0.3}))

    with pytest.raises(RunTimeout) as caught:
        await agent.run("ping it")

    (body,) = model_server.requests
    request = next(e for e in caught.value.events if isinstance(e, ModelRequestEvent))
    # The definition's texts: its name, description and the schema's strings.
    assert request.prompt_chars > prompt_chars(body) + len("Ping a host by its name.")
    finished = RunFinished.of(caught.value.events)
    assert finished is not None and finished.usage.input_tokens == -(-request.prompt_chars // 4)


async def test_a_streamed_run_cut_off_mid_answer_counts_the_text_streamed(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    never = asyncio.Event()
    model_server.script("gpt-main", [Reply(WORDS, pause=never)])
    agent = priced(make_agent(limits={"timeout": 0.5}))

    events = [event async for event in agent.stream("tell me a story")]

    (body,) = model_server.requests
    streamed = "".join(e.text for e in events if isinstance(e, ModelDelta))
    assert streamed and WORDS.startswith(streamed)
    assert isinstance(events[-2], ErrorEvent) and events[-2].error_type == "timeout"
    finished = RunFinished.of(events)
    assert finished is not None
    assert finished.usage == Usage(-(-prompt_chars(body) // 4), -(-len(streamed) // 4))
    assert finished.cost_usd == cost(finished.usage)


async def test_attempts_cut_off_at_the_models_deadline_count_when_the_run_fails(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    # A long answer that each attempt's model.timeout cuts off: the endpoint was sent the
    # prompt twice, and the failed run counts both.
    model_server.script("gpt-main", [Slow(30, Reply("too late"))] * 2)
    agent = priced(make_agent(model={"timeout": 0.2, "retries": 1}, limits={"timeout": 10}))

    with pytest.raises(ModelError) as caught:
        await agent.run("write a very long story")

    assert caught.value.kind == "timeout"
    bodies = model_server.requests
    assert len(bodies) == 2
    finished = RunFinished.of(caught.value.events)
    assert finished is not None
    assert finished.usage == Usage(2 * -(-prompt_chars(bodies[0]) // 4), 0)
    assert finished.cost_usd == cost(finished.usage) > 0


async def test_an_attempt_cut_off_and_retried_counts_beside_the_answer(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [Slow(30, Reply("too late")), Reply("in time")])
    agent = priced(make_agent(model={"timeout": 0.2, "retries": 1}, limits={"timeout": 10}))

    result = await agent.run("hurry")

    (cut, answered) = model_server.requests
    (response,) = [e for e in result.events if isinstance(e, ModelResponseEvent)]
    # The answer's event shows what the endpoint reported; the run adds the cut attempt.
    attempt = Usage(-(-prompt_chars(cut) // 4), 0)
    assert result.usage == response.usage + attempt
    finished = RunFinished.of(result.events)
    assert finished is not None and finished.usage == result.usage
    assert result.cost_usd == finished.cost_usd == cost(result.usage)
    assert prompt_chars(cut) == prompt_chars(answered)


def ceiling(agent: Agent, usd: float) -> Agent:
    """``agent`` priced, with ``limits.max_cost_usd = usd``."""
    limits = agent.spec.limits.model_copy(update={"max_cost_usd": usd})
    spec = agent.spec.model_copy(update={"limits": limits})
    return dataclasses.replace(agent, spec=spec, prices=PRICES)


async def test_an_attempt_cut_off_counts_toward_the_runs_cost_ceiling_at_once(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [Reply("in time")])
    answered = await ceiling(make_agent(), 1.0).run("hurry")
    assert answered.cost_usd is not None and answered.cost_usd > 0
    (body,) = model_server.requests
    attempt = cost(Usage(-(-prompt_chars(body) // 4), 0))
    # The answer alone stays under this ceiling; with the attempt cut off before it, over.
    limit = answered.cost_usd + attempt / 2
    model_server.script("gpt-main", [Slow(30, Reply("too late")), Reply("in time")])
    retried = make_agent(model={"timeout": 0.2, "retries": 1}, limits={"timeout": 10})

    with pytest.raises(CostLimitExceeded) as caught:
        await ceiling(retried, limit).run("hurry")

    assert "after model call 1" in caught.value.message
    assert caught.value.spent == pytest.approx(answered.cost_usd + attempt)


def test_an_image_counts_as_an_image_not_as_the_characters_of_its_data() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 1_000_000}}
    text = {"type": "text", "text": "What is in this picture?"}
    hostile = {"type": ["text"], "text": "a type no set may hold"}
    messages = [{"role": "user", "content": [text, image, hostile, "plain"]}]

    size = prompt_size(messages)

    assert size == len("user") + len(text["text"]) + 2 * MEDIA_CHARS + len("plain")
    assert prompt_size([{"role": "user", "content": "hi"}], tools=10) == len("user") + 2 + 10
