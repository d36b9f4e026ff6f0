"""The offline ``test`` model shows what it was given: the caller's words, each tool call
with its result and the agent's system prompt, the same answer for the same request. Its
answers ignored the prompt (an edit showed only as a new revision hash), and ``What is
17 * 23?`` answered 8: the calculator got its schema's example, ``2 + 2 * 3``."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from dynagent import AgentBuilder, load_spec
from dynagent.events import ModelRequestEvent, ModelResponseEvent
from dynagent.models import ModelRequest, TestModel, ToolDefinition
from dynagent.runtime.agent import Agent
from dynagent.runtime.options import RunOptions


def offline(system: str, **fields: Any) -> Agent:
    document = {"name": "offline", "model": {"provider": "test"}, "prompt": {"system": system}}
    return AgentBuilder(environ={}).build(load_spec({**document, **fields}))


async def test_the_answer_shows_the_callers_words_and_the_rendered_prompt() -> None:
    prompt = {"system": "You help the customers of {{company}}.", "variables": {"company": "ACME"}}
    agent = offline("", prompt=prompt)

    first = await agent.run("Where is my parcel?")
    again = await agent.run("Where is my parcel?")
    other = await agent.run("Where is my parcel?", variables={"company": "Initech"})

    assert (first.output, again.output, other.output) == (
        "[test model] you said: Where is my parcel? | prompt: You help the customers of ACME.",
        first.output,
        "[test model] you said: Where is my parcel? | prompt: You help the customers of Initech.",
    )


async def test_an_edited_prompt_changes_the_answer() -> None:
    before = await offline("You are the support assistant.").run("hi")
    after = await offline("You are the friendly support assistant.").run("hi")

    assert (before.output, after.output) == (
        "[test model] you said: hi | prompt: You are the support assistant.",
        "[test model] you said: hi | prompt: You are the friendly support assistant.",
    )


async def test_a_long_prompt_shows_its_start_with_whitespace_folded() -> None:
    system = "Line one.\n\n   Line two. " + "word " * 100
    result = await offline(system).run("hi")

    shown = str(result.output).split(" | prompt: ", 1)[1]
    assert shown.startswith("Line one. Line two. word word")
    assert (len(shown) <= 161, shown[-1]) == (True, "…")


ARITHMETIC = {
    "What is 17 * 23?": "calculator(17 * 23) -> 391",
    "and (2 + 3) * 4, please": "calculator((2 + 3) * 4) -> 20",
    "1.5 / 3": "calculator(1.5 / 3) -> 0.5",
    "2 ** 10 - 24 then": "calculator(2 ** 10 - 24) -> 1000",
    "no numbers here": "calculator(2 + 2 * 3) -> 8",
}


@pytest.mark.parametrize(("said", "called"), ARITHMETIC.items(), ids=ARITHMETIC.keys())
async def test_a_tool_taking_an_expression_computes_the_arithmetic_in_the_callers_words(
    said: str, called: str
) -> None:
    agent = offline("Calculate.", tools=["calculator"])

    result = await agent.run(said)

    assert result.output == f"[test model] you said: {said} | {called} | prompt: Calculate."


async def test_a_tool_taking_text_gets_the_callers_words_and_others_keep_their_examples() -> None:
    def tool(name: str, schema: dict[str, Any]) -> ToolDefinition:
        properties = {"value": schema}
        return ToolDefinition(name, "", {"type": "object", "properties": properties})

    said = "Where is order A-7?"
    tools = (
        tool("text", {"type": "string"}),
        tool("short", {"type": "string", "maxLength": 5}),
        tool("long", {"type": "string", "minLength": 100}),
        tool("zone", {"type": "string", "examples": ["UTC"]}),
        tool("choice", {"type": "string", "enum": ["a", "b"]}),
        tool("shaped", {"type": "string", "pattern": "^[0-9]+$"}),
        tool("number", {"type": "integer"}),
    )
    request = ModelRequest(({"role": "user", "content": said},), tools)

    response = await TestModel().request(request)

    assert [(c.name, json.loads(c.arguments)["value"]) for c in response.tool_calls] == [
        ("text", said),
        ("short", said[:5]),
        ("long", "a" * 100),
        ("zone", "UTC"),
        ("choice", "a"),
        ("shaped", "example"),
        ("number", 0),
    ]


async def test_a_schema_answer_carries_the_answer_text_in_its_free_text_fields() -> None:
    schema = {
        "type": "object",
        "properties": {
            "category": {"type": "string", "enum": ["billing", "shipping"]},
            "summary": {"type": "string"},
            "short": {"type": "string", "maxLength": 12},
        },
        "required": ["category", "summary", "short"],
    }
    agent = offline("Classify.", output={"schema": schema})

    result = await agent.run("My parcel is late")

    jsonschema.validate(result.output, schema)
    assert result.output == {
        "category": "billing",
        "summary": "[test model] you said: My parcel is late | prompt: Classify.",
        "short": "[test model]",
    }


@pytest.mark.parametrize(
    ("configured", "traced"),
    [("gpt-4o-mini", "test (offline, for gpt-4o-mini)"), ("test", "test")],
)
async def test_traces_name_the_offline_model_that_answered(configured: str, traced: str) -> None:
    document = {
        "name": "offline",
        "model": {"provider": "auto", "name": configured},
        "prompt": {"system": "x"},
    }
    agent = AgentBuilder(environ={}).build(load_spec(document))

    result = await agent.run("hi")

    models = [
        e.model for e in result.events if isinstance(e, ModelRequestEvent | ModelResponseEvent)
    ]
    assert models == [traced, traced]


async def test_hostile_words_are_read_in_bounded_time_and_size() -> None:
    said = "1 + " * 100_000 + "x " * 200_000
    agent = offline("Calculate.", tools=["calculator"])

    result = await agent.run(said)

    calls = next(e.tool_calls for e in result.events if isinstance(e, ModelResponseEvent))
    assert len(calls[0]["arguments"]) <= len('{"expression": ""}') + 1000
    assert str(result.output).startswith("[test model] you said: 1 + 1 + ")
    assert len(str(result.output)) < 2500 + 200  # not the caller's megabyte streamed back


async def test_a_schema_answer_fits_the_agents_schema_and_the_callers_together() -> None:
    own = {
        "type": "object",
        "properties": {"category": {"type": "string", "enum": ["billing", "other"]}},
        "required": ["category"],
    }
    asked = {
        "type": "object",
        "properties": {"category": {"type": "string"}, "urgent": {"type": "boolean"}},
        "required": ["category", "urgent"],
    }
    agent = offline("Classify.", output={"schema": own})

    result = await agent.run("Late parcel", options=RunOptions(output_schema=asked))

    assert result.output == {"category": "billing", "urgent": True}


@pytest.mark.parametrize(
    ("choice", "called"),
    [
        (None, ["lookup", "notify"]),
        ("auto", ["lookup", "notify"]),
        ("required", ["lookup", "notify"]),
        ("none", []),
        ({"type": "function", "function": {"name": "notify"}}, ["notify"]),
    ],
)
async def test_the_offline_model_honours_tool_choice(choice: Any, called: list[str]) -> None:
    tools = tuple(
        ToolDefinition(name, "", {"type": "object", "properties": {}})
        for name in ("lookup", "notify")
    )
    request = ModelRequest(({"role": "user", "content": "hi"},), tools, tool_choice=choice)

    response = await TestModel().request(request)

    assert [call.name for call in response.tool_calls] == called
    assert (response.content is None) == bool(called)
