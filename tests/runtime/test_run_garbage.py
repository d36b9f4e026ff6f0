"""A run's objects are freed by reference counting as it ends. A reference cycle through
a run (its context, its masking emitter, its event queue) would leave every object of the
run for the garbage collector, which walks all young objects each time it runs: on a
busy service, a collection every few requests. Whole, streamed, with tools and with a
redacting interceptor, no object of the service's own is left in a cycle."""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from dynagent import Tool
from dynagent.models import ToolDefinition
from tests.support import AgentFactory, CallTools, Reply, ScriptedModelServer


def _echo() -> Tool:
    async def run(arguments: dict[str, Any]) -> str:
        return "SSN 123-45-6789"

    return Tool.of(ToolDefinition("lookup", "Look up.", {"type": "object"}), run)


async def _left_in_cycles(runs: Callable[[], Awaitable[None]]) -> Counter[str]:
    """The service's objects ``runs`` left unreachable but not freed, by type."""
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        await runs()
        gc.collect()
        return Counter(
            f"{type(thing).__module__}.{type(thing).__qualname__}"
            for thing in gc.garbage
            if type(thing).__module__.startswith("dynagent")
        )
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


async def _drained(events: AsyncIterator[object]) -> None:
    async for _ in events:
        pass


async def test_whole_and_streamed_runs_leave_nothing_for_the_garbage_collector(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    agent = make_agent()
    model_server.script("gpt-main", [Reply("warm")] + [Reply("one two three")] * 6)
    await agent.run("warm up")  # first-use caches are not a run's garbage

    async def runs() -> None:
        for _ in range(3):
            await agent.run("hello")
            await _drained(agent.stream("hello"))

    assert await _left_in_cycles(runs) == Counter()


async def test_runs_with_tools_and_redaction_leave_nothing_for_the_garbage_collector(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    agent = make_agent(tools=[_echo()], interceptors=["pii_redaction"])
    steps: list[CallTools | Reply] = [
        CallTools([("lookup", {})]),
        Reply("Mail jane@corp.example.com"),
    ]
    model_server.script("gpt-main", steps * 5)
    await agent.run("warm up")

    async def runs() -> None:
        for _ in range(2):
            await agent.run("I am jane@corp.example.com")
            await _drained(agent.stream("I am jane@corp.example.com"))

    assert await _left_in_cycles(runs) == Counter()
