"""The same agent on each runtime compared by the overhead benchmark.

Every runtime gets its own ``openai.AsyncOpenAI`` client (retries off) at the
same scripted model server, the same system prompt, the same two async tools,
and runs the scenario's question to its final answer:

- ``raw``: the loop a developer writes by hand on the ``openai`` client;
- ``floor``: the same loop on one ``aiohttp.ClientSession`` with plain ``json``: nothing
  but the HTTP calls and the tools, the physical floor of a run;
- ``dynagent``: ``Agent.run``;
- ``langchain``: ``langchain.agents.create_agent`` with ``langchain_openai.ChatOpenAI``;
- ``pydantic_ai``: ``pydantic_ai.Agent`` with ``OpenAIChatModel``;
- ``openai_agents``: the OpenAI Agents SDK, ``OpenAIChatCompletionsModel``, tracing off.

The peers are the optional extra ``bench``; a peer that is not installed is
reported as such and skipped.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import openai
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam
from pydantic import SecretStr

from bench.scenarios import FUNCTIONS, SYSTEM, Scenario, combine, lookup
from dynagent import AgentBuilder, Resources, Tool, ToolRegistry, load_spec

RunOnce = Callable[[str], Awaitable[str]]
"""Runs one question to its final answer text."""
Close = Callable[[], Awaitable[None]]

TOOLS = (Tool.from_function(lookup), Tool.from_function(combine))


@dataclass(frozen=True, slots=True)
class Runtime:
    name: str
    run: RunOnce
    close: Close
    version: str


def _client(base_url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base_url, api_key="bench-key", max_retries=0)


async def raw(base_url: str, scenario: Scenario) -> Runtime:
    client = _client(base_url)
    tools: list[ChatCompletionToolParam] = [
        {"type": "function", "function": tool.definition.to_openai()["function"]} for tool in TOOLS
    ]

    async def run(question: str) -> str:
        """The minimal ReAct loop a developer would write on the raw client."""
        messages: list[ChatCompletionMessageParam] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": question},
        ]
        for _ in range(8):
            completion = await client.chat.completions.create(
                model=scenario.model,
                messages=messages,
                tools=tools,
                parallel_tool_calls=True,
                timeout=30,
            )
            message = completion.choices[0].message
            calls = [call for call in message.tool_calls or () if call.type == "function"]
            if not calls:
                return message.content or ""
            messages.append(
                {
                    "role": "assistant",
                    "content": message.content,
                    "tool_calls": [
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {
                                "name": call.function.name,
                                "arguments": call.function.arguments,
                            },
                        }
                        for call in calls
                    ],
                }
            )
            outputs = await asyncio.gather(
                *(
                    FUNCTIONS[call.function.name](**json.loads(call.function.arguments))
                    for call in calls
                )
            )
            for call, output in zip(calls, outputs, strict=True):
                messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
        raise RuntimeError("no answer within 8 model calls")

    return Runtime("raw", run, client.close, openai.__version__)


async def floor(base_url: str, scenario: Scenario) -> Runtime:
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
    url = base_url.rstrip("/") + "/chat/completions"
    headers = {"Authorization": "Bearer bench-key", "Content-Type": "application/json"}
    tools = [
        {"type": "function", "function": tool.definition.to_openai()["function"]} for tool in TOOLS
    ]

    async def run(question: str) -> str:
        """The same loop with nothing between it and the wire but aiohttp and ``json``."""
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": question},
        ]
        for _ in range(8):
            body = {
                "model": scenario.model,
                "messages": messages,
                "tools": tools,
                "parallel_tool_calls": True,
            }
            async with session.post(url, data=json.dumps(body), headers=headers) as response:
                message = json.loads(await response.read())["choices"][0]["message"]
            calls = message.get("tool_calls") or []
            if not calls:
                return str(message.get("content") or "")
            messages.append(
                {"role": "assistant", "content": message.get("content"), "tool_calls": calls}
            )
            outputs = await asyncio.gather(
                *(
                    FUNCTIONS[call["function"]["name"]](**json.loads(call["function"]["arguments"]))
                    for call in calls
                )
            )
            for call, output in zip(calls, outputs, strict=True):
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})
        raise RuntimeError("no answer within 8 model calls")

    return Runtime("floor", run, session.close, aiohttp.__version__)


async def dynagent(base_url: str, scenario: Scenario) -> Runtime:
    from importlib.metadata import version

    resources = Resources()
    spec = load_spec(
        {
            "name": "bench",
            "model": {
                "provider": "openai",
                "base_url": base_url,
                "api_key": "bench-key",
                "name": scenario.model,
            },
            "prompt": {"system": SYSTEM},
            "tools": [tool.name for tool in TOOLS],
        }
    )
    registry = ToolRegistry.default({tool.name: tool for tool in TOOLS})
    agent = AgentBuilder(tools=registry, resources=resources, environ={}).build(spec)

    async def run(question: str) -> str:
        return str((await agent.run(question)).output)

    return Runtime("dynagent", run, resources.aclose, version("dynagent"))


async def langchain(base_url: str, scenario: Scenario) -> Runtime:
    from importlib.metadata import version

    from langchain.agents import create_agent
    from langchain_openai import ChatOpenAI

    model = ChatOpenAI(
        model=scenario.model,
        base_url=base_url,
        api_key=SecretStr("bench-key"),
        max_retries=0,
        timeout=30,
    )
    agent = create_agent(model, tools=[lookup, combine], system_prompt=SYSTEM)

    async def run(question: str) -> str:
        state: dict[str, Any] = await agent.ainvoke(
            {"messages": [{"role": "user", "content": question}]}
        )
        return str(state["messages"][-1].content)

    async def close() -> None:
        """Nothing: langchain-openai caches one HTTP client per base URL for every
        ``ChatOpenAI``; closing it would break the next instance."""

    return Runtime("langchain", run, close, version("langchain"))


async def pydantic_ai(base_url: str, scenario: Scenario) -> Runtime:
    from importlib.metadata import version

    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    client = _client(base_url)
    model = OpenAIChatModel(scenario.model, provider=OpenAIProvider(openai_client=client))
    agent = Agent(model, system_prompt=SYSTEM, tools=[lookup, combine])

    async def run(question: str) -> str:
        return str((await agent.run(question)).output)

    return Runtime("pydantic_ai", run, client.close, version("pydantic-ai-slim"))


async def openai_agents(base_url: str, scenario: Scenario) -> Runtime:
    from importlib.metadata import version

    from agents import (
        Agent,
        ModelSettings,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)
    client = _client(base_url)
    agent = Agent(
        name="bench",
        instructions=SYSTEM,
        model=OpenAIChatCompletionsModel(model=scenario.model, openai_client=client),
        tools=[function_tool(lookup), function_tool(combine)],
        model_settings=ModelSettings(parallel_tool_calls=True),
    )

    async def run(question: str) -> str:
        return str((await Runner.run(agent, question)).final_output)

    return Runtime("openai_agents", run, client.close, version("openai-agents"))


Maker = Callable[[str, Scenario], Awaitable[Runtime]]
RUNTIMES: dict[str, Maker] = {
    "raw": raw,
    "floor": floor,
    "dynagent": dynagent,
    "langchain": langchain,
    "pydantic_ai": pydantic_ai,
    "openai_agents": openai_agents,
}
PEERS = ("langchain", "pydantic_ai", "openai_agents")
