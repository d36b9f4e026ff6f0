"""``Agent.stream``: SSE from the model, events in order, failures as events."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import cast

from dynagent import Agent, Event, Tool, Usage
from dynagent.events import ErrorEvent, FinalOutput, ModelDelta, ModelResponseEvent, RunFinished
from tests.support import (
    AgentFactory,
    BrokenStream,
    CallTools,
    Fail,
    Malformed,
    Reply,
    ScriptedModelServer,
    Slow,
    event_types,
    of_type,
    one,
)


async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


ADD = Tool.from_function(add)


async def collect(agent: Agent, text: str = "2 + 3?") -> list[Event]:
    return [event async for event in agent.stream(text)]


def deltas(events: list[Event]) -> list[str]:
    return [e.text for e in of_type(events, ModelDelta)]


def squeezed(types: list[str]) -> list[str]:
    """Event types with each run of ``model_delta`` written once."""
    return [t for i, t in enumerate(types) if t != "model_delta" or types[i - 1] != t]


def joined(pieces: list[tuple[int, str]], step: int) -> str:
    return "".join(text for at, text in pieces if at == step)


async def test_a_model_writing_at_a_reading_pace_streams_each_piece_as_it_comes(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [Reply("one two three four", gap=0.08)])
    agent = make_agent()

    events = await collect(agent, "count")

    # Pieces further apart than the delta window are each passed on when they come.
    assert deltas(events) == ["one ", "two ", "three ", "four"]


async def test_a_flood_of_tiny_chunks_reaches_the_reader_in_few_deltas(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    text = "".join(f"w{i} " for i in range(20_000))
    model_server.script("gpt-main", [Reply(text)])  # 20,000 chunks, as fast as they go
    agent = make_agent()

    events = await collect(agent, "flood me")

    assert "".join(deltas(events)) == text == one(events, FinalOutput).output
    # Joined per network block and per delta window: a few hundred at most, not 20,000.
    assert len(deltas(events)) < 1_000, len(deltas(events))


async def test_events_arrive_in_order_with_deltas_and_reassembled_tool_calls(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script(
        "gpt-main",
        [CallTools([("add", {"a": 2, "b": 3})], text="Let me add."), Reply("The sum is 5.")],
    )
    agent = make_agent(tools=[ADD])

    events = await collect(agent)

    # Deltas that arrive closer together than the delta window reach the reader joined.
    assert squeezed(event_types(events)) == [
        "run_started",
        "model_request",
        "model_delta",
        "model_response",
        "tool_call",
        "tool_result",
        "model_request",
        "model_delta",
        "model_response",
        "final_output",
        "run_finished",
    ]
    pieces = [(e.step, e.text) for e in of_type(events, ModelDelta)]
    assert [(step, joined(pieces, step)) for step in (1, 2)] == [
        (1, "Let me add."),
        (2, "The sum is 5."),
    ]
    first, second = of_type(events, ModelResponseEvent)
    assert (first.content, first.tool_calls) == (
        "Let me add.",
        [{"id": "call_1_0", "name": "add", "arguments": '{"a": 2, "b": 3}'}],
    )
    final = one(events, FinalOutput)
    # The answer is every text of the turn, one model call's after the other's.
    assert final.output == f"{first.content}\n\n{second.content}" == "Let me add.\n\nThe sum is 5."
    assert [e.output for e in events if e.type == "tool_result"] == ["5"]


async def test_streaming_asks_for_usage_and_sums_it(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [CallTools([("add", {"a": 1, "b": 1})]), Reply("2")])
    agent = make_agent(tools=[ADD])

    events = await collect(agent)

    assert [(b["stream"], b["stream_options"]) for b in model_server.requests] == [
        (True, {"include_usage": True})
    ] * 2
    responses = [e.usage for e in of_type(events, ModelResponseEvent)]
    finished = one(events, RunFinished)
    assert finished.status == "ok"
    assert finished.usage == responses[0] + responses[1]
    assert all(u.input_tokens > 0 and u.output_tokens > 0 for u in responses)
    assert finished.usage != Usage()


async def test_a_dropped_stream_ends_with_error_events_not_an_exception(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [BrokenStream("partial answer that never ends")])
    agent = make_agent()

    events = await collect(agent)

    assert event_types(events) == [
        "run_started",
        "model_request",
        "model_delta",
        "error",
        "run_finished",
    ]
    error = one(events, ErrorEvent)
    assert (error.error_type, error.message) == (
        "model_error",
        f"the connection to the model endpoint at {model_server.address} broke before the "
        "answer was complete after part of the answer was streamed",
    )
    assert one(events, RunFinished).status == "error"


async def test_a_stream_broken_after_text_is_not_retried_into_a_spliced_answer(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [BrokenStream("partial words here")])
    interceptors = [{"retry": {"max_attempts": 3, "backoff": 0}}]
    agent = make_agent(model={"retries": 2}, interceptors=interceptors)

    events = await collect(agent)

    assert deltas(events) == ["partial "]
    assert one(events, ErrorEvent).error_type == "model_error"
    assert len(model_server.requests) == 1


async def test_a_malformed_stream_is_a_model_error_event(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [Malformed("data: {nope\n\n")])
    agent = make_agent()

    events = await collect(agent)

    assert event_types(events) == ["run_started", "model_request", "error", "run_finished"]
    assert one(events, ErrorEvent).message.startswith("malformed stream from the model endpoint: ")


async def test_a_stream_that_fails_to_start_is_retried_then_falls_back(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [Fail(429, headers={"retry-after": "0"})] * 2)
    model_server.script("gpt-fallback", [Reply("from the fallback")])
    fallback = {"provider": "openai", "base_url": model_server.base_url, "name": "gpt-fallback"}
    agent = make_agent(model={"retries": 1, "fallback": fallback})

    events = await collect(agent)

    assert "".join(deltas(events)) == "from the fallback"
    assert one(events, FinalOutput).output == "from the fallback"


async def test_closing_the_stream_early_cancels_the_run(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [Slow(30, Reply("never read"))])
    agent = make_agent()

    stream = cast(AsyncGenerator[Event, None], agent.stream("hi"))
    seen = [await anext(stream), await anext(stream)]
    await model_server.wait_for_requests(1)
    await stream.aclose()

    assert event_types(seen) == ["run_started", "model_request"]
    running = [t for t in asyncio.all_tasks() if "_guarded" in repr(t.get_coro())]
    assert running == []
