"""The ReAct loop through the real openai client: tool calls, tool errors, limits, timeouts."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from dynagent import MaxStepsExceeded, RunTimeout, Tool, ToolFailed
from dynagent.exceptions import BadRequest
from dynagent.models import ToolDefinition
from tests.support import (
    SYSTEM_PROMPT,
    AgentFactory,
    CallTools,
    Reply,
    ScriptedModelServer,
    Slow,
    event_types,
)

NO_ARGS = {"type": "object", "properties": {}}


def code_tool(name: str, run: Any, *, timeout: float = 2.0) -> Tool:
    return Tool.of(ToolDefinition(name, f"the {name} tool", NO_ARGS), run, timeout=timeout)


async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


ADD = Tool.from_function(add)


def called(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def tool_results(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


async def test_a_tool_round_sends_the_whole_conversation_back(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [CallTools([("add", {"a": 2, "b": 3})]), Reply("It is 5.")])
    agent = make_agent(tools=[ADD])

    result = await agent.run("What is 2 + 3?")

    assert result.output == "It is 5."
    assert result.steps == 2
    first, second = model_server.requests
    assert first["tools"] == [ADD.definition.to_openai()]
    assert first["parallel_tool_calls"] is True
    assert "response_format" not in first
    assert second["messages"] == [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": "What is 2 + 3?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [called("call_1_0", "add", '{"a": 2, "b": 3}')],
        },
        {"role": "tool", "tool_call_id": "call_1_0", "content": "5"},
    ]
    assert event_types(result.events) == [
        "run_started",
        "model_request",
        "model_response",
        "tool_call",
        "tool_result",
        "model_request",
        "model_response",
        "final_output",
        "run_finished",
    ]
    assert {e.trace_id for e in result.events} == {result.trace_id}


async def test_two_tool_calls_run_concurrently(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    running = {"left": asyncio.Event(), "right": asyncio.Event()}

    def meets(me: str, other: str) -> Tool:
        async def run(arguments: dict[str, Any]) -> str:
            running[me].set()
            await running[other].wait()  # returns only while the other tool runs too
            return f"{me} met {other}"

        return code_tool(me, run)

    model_server.script("gpt-main", [CallTools([("left", {}), ("right", {})]), Reply("both met")])
    agent = make_agent(tools=[meets("left", "right"), meets("right", "left")])

    result = await agent.run("go")

    assert tool_results(model_server.requests[1]) == ["left met right", "right met left"]
    assert event_types(result.events) == [
        "run_started",
        "model_request",
        "model_response",
        "tool_call",
        "tool_call",
        "tool_result",
        "tool_result",
        "model_request",
        "model_response",
        "final_output",
        "run_finished",
    ]


async def test_parallel_tool_calls_off_runs_tools_one_after_another(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    log: list[str] = []

    def logged(name: str) -> Tool:
        async def run(arguments: dict[str, Any]) -> str:
            log.append(f"{name} start")
            await asyncio.sleep(0)  # a chance to interleave, were the calls concurrent
            log.append(f"{name} end")
            return name

        return code_tool(name, run)

    model_server.script("gpt-main", [CallTools([("one", {}), ("two", {})]), Reply("ok")])
    agent = make_agent(tools=[logged("one"), logged("two")], parallel_tool_calls=False)

    await agent.run("go")

    assert log == ["one start", "one end", "two start", "two end"]
    assert model_server.requests[0]["parallel_tool_calls"] is False


async def test_a_tool_that_raises_is_reported_and_the_model_recovers(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    async def broken(arguments: dict[str, Any]) -> str:
        raise RuntimeError("database is down")

    model_server.script("gpt-main", [CallTools([("lookup", {})]), Reply("Sorry, try later.")])
    agent = make_agent(tools=[code_tool("lookup", broken)])

    result = await agent.run("find it")

    assert result.output == "Sorry, try later."
    assert tool_results(model_server.requests[1]) == ["TOOL_ERROR: RuntimeError: database is down"]
    [outcome] = [e for e in result.events if e.type == "tool_result"]
    assert (outcome.name, outcome.output, outcome.is_error) == (
        "lookup",
        "TOOL_ERROR: RuntimeError: database is down",
        True,
    )


@pytest.mark.parametrize(
    ("arguments", "reported"),
    [
        (
            "{not json",
            "TOOL_ERROR: arguments are not valid JSON (Expecting property name enclosed in "
            "double quotes: line 1 column 2 (char 1)); send a JSON object",
        ),
        ({"a": "two", "b": 3}, "TOOL_ERROR: invalid arguments: a: 'two' is not of type 'integer'"),
        ({"a": 2}, "TOOL_ERROR: invalid arguments: 'b' is a required property"),
        ("[2, 3]", "TOOL_ERROR: invalid arguments: [2, 3] is not of type 'object'"),
    ],
)
async def test_invalid_tool_arguments_go_back_to_the_model(
    make_agent: AgentFactory,
    model_server: ScriptedModelServer,
    arguments: dict[str, Any] | str,
    reported: str,
) -> None:
    model_server.script("gpt-main", [CallTools([("add", arguments)]), Reply("fixed")])
    agent = make_agent(tools=[ADD])

    result = await agent.run("add")

    assert result.output == "fixed"
    assert tool_results(model_server.requests[1]) == [reported]


async def test_an_unknown_tool_name_is_reported_with_the_known_ones(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [CallTools([("launch", {})]), Reply("I cannot.")])
    agent = make_agent(tools=[ADD])

    await agent.run("launch")

    assert tool_results(model_server.requests[1]) == [
        "TOOL_ERROR: unknown tool 'launch'; available: add"
    ]


async def test_on_error_fail_ends_the_run_and_cancels_the_sibling_call(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    sibling: list[str] = []

    async def broken(arguments: dict[str, Any]) -> str:
        raise RuntimeError("card declined")

    async def waits(arguments: dict[str, Any]) -> str:
        sibling.append("started")
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            sibling.append("cancelled")
            raise
        return "never"

    model_server.script("gpt-main", [CallTools([("hold", {}), ("charge", {})])])
    agent = make_agent(
        tools=[code_tool("charge", broken), code_tool("hold", waits, timeout=60)],
        spec_tools=["hold", {"name": "charge", "on_error": "fail"}],
    )

    with pytest.raises(ToolFailed) as caught:
        await agent.run("pay")

    assert caught.value.message == "tool 'charge' failed: card declined"
    assert sibling == ["started", "cancelled"]
    assert event_types(caught.value.events) == [
        "run_started",
        "model_request",
        "model_response",
        "tool_call",
        "tool_call",
        "error",
        "run_finished",
    ]


async def test_max_steps_ends_the_run_with_the_partial_trace(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script(
        "gpt-main", [CallTools([("add", {"a": 1, "b": 1})]), CallTools([("add", {"a": 2, "b": 2})])]
    )
    agent = make_agent(tools=[ADD], limits={"max_steps": 2})

    with pytest.raises(MaxStepsExceeded) as caught:
        await agent.run("loop")

    error = caught.value
    assert error.message == "no final answer within limits.max_steps = 2"
    assert event_types(error.events) == [
        "run_started",
        *["model_request", "model_response", "tool_call", "tool_result"] * 2,
        "error",
        "run_finished",
    ]
    assert [(e.type, e.output) for e in error.events if e.type == "tool_result"] == [
        ("tool_result", "2"),
        ("tool_result", "4"),
    ]
    finished = error.events[-1]
    assert finished.type == "run_finished"
    assert (finished.status, finished.step) == ("error", 2)
    assert error.trace_id == error.events[0].trace_id
    # A failed run still reports the tokens its model calls used.
    used = [e.usage for e in error.events if e.type == "model_response"]
    assert finished.usage == used[0] + used[1]
    assert finished.usage.total_tokens > 0


async def test_a_slow_model_ends_the_run_with_run_timeout(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [Slow(30, Reply("too late"))])
    agent = make_agent(limits={"timeout": 0.2})

    with pytest.raises(RunTimeout) as caught:
        await agent.run("hurry")

    assert caught.value.message == "run took longer than limits.timeout = 0.2 s"
    assert event_types(caught.value.events) == [
        "run_started",
        "model_request",
        "error",
        "run_finished",
    ]


async def test_a_hanging_tool_ends_the_run_with_run_timeout(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    async def hangs(arguments: dict[str, Any]) -> str:
        await asyncio.Event().wait()
        return "never"

    model_server.script("gpt-main", [CallTools([("hang", {})])])
    agent = make_agent(tools=[code_tool("hang", hangs, timeout=60)], limits={"timeout": 0.2})

    with pytest.raises(RunTimeout) as caught:
        await agent.run("hang")

    assert event_types(caught.value.events) == [
        "run_started",
        "model_request",
        "model_response",
        "tool_call",
        "error",
        "run_finished",
    ]


async def test_a_tool_past_its_timeout_is_reported(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    async def hangs(arguments: dict[str, Any]) -> str:
        await asyncio.Event().wait()
        return "never"

    model_server.script("gpt-main", [CallTools([("hang", {})]), Reply("gave up")])
    agent = make_agent(tools=[code_tool("hang", hangs, timeout=0.05)])

    await agent.run("hang")

    assert tool_results(model_server.requests[1]) == [
        "TOOL_ERROR: ToolTimeout: tool 'hang' took longer than 0.05 s"
    ]


async def test_prompt_variables_fill_the_system_prompt(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [Reply("hi")])
    agent = make_agent(
        prompt={"system": "Answer in {{lang}} for {{team}}.", "variables": {"lang": "en"}}
    )

    await agent.run("hello", variables={"team": "ops"})

    assert model_server.requests[0]["messages"][0] == {
        "role": "system",
        "content": "Answer in en for ops.",
    }
    assert json.dumps(model_server.requests[0]).count("{{") == 0


async def test_a_missing_prompt_variable_is_a_bad_request_before_any_model_call(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    agent = make_agent(prompt={"system": "Answer for {{team}}."})

    with pytest.raises(BadRequest, match="needs variable 'team'; pass it in 'variables'"):
        await agent.run("hello")

    assert model_server.requests == []
