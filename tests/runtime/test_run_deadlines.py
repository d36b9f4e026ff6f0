"""A run's deadlines, its own (``limits.timeout``) and each model call's whole answer
(``model.timeout``), on one timer: what a run gets back is what two nested timeouts gave
(which limit passed first, with its own error), for one model call or several, a call
retried after its limit, and an endpoint that trickles bytes (no read waits long, the
whole answer does)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest
from aiohttp import web

from dynagent import ModelError, Tool
from dynagent.exceptions import RunTimeout
from dynagent.models import ToolDefinition
from tests.support import AgentFactory, CallTools, Reply, ScriptedModelServer, Slow
from tests.support.served import served

NO_ARGS = {"type": "object", "properties": {}}
COMPLETION = orjson.dumps(
    {
        "id": "c",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-main",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
)


def ping() -> Tool:
    async def run(arguments: dict[str, Any]) -> str:
        return "pong"

    return Tool.of(ToolDefinition("ping", "ping", NO_ARGS), run)


@pytest.fixture
async def trickling() -> AsyncIterator[Callable[..., str]]:
    """An endpoint whose answers are whitespace a byte every 20 ms for ``seconds[n]``,
    then a completion; ``url(*seconds)``: an address whose n-th answer takes ``seconds[n]``
    (the last, for every answer after)."""
    plans: dict[int, list[float]] = {}

    async def chat(request: web.Request) -> web.StreamResponse:
        plan = plans[int(request.match_info["plan"])]
        seconds = plan.pop(0) if len(plan) > 1 else plan[0]
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        loop = asyncio.get_running_loop()
        until = loop.time() + seconds
        while loop.time() < until:
            await response.write(b" ")
            await asyncio.sleep(0.02)
        await response.write(COMPLETION)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/{plan}/v1/chat/completions", chat)
    async with served(app) as base:

        def url(*seconds: float) -> str:
            plans[len(plans)] = list(seconds)
            return f"{base}/{len(plans) - 1}/v1"

        yield url


async def test_a_trickled_answer_past_model_timeout_is_the_model_s_timeout(
    make_agent: AgentFactory, trickling: Any
) -> None:
    agent = make_agent(
        model={"base_url": trickling(5), "timeout": 0.3, "retries": 0}, limits={"timeout": 5}
    )
    with pytest.raises(ModelError) as caught:
        await agent.run("hi")
    assert (caught.value.kind, caught.value.message) == (
        "timeout",
        "the model endpoint did not answer within model.timeout = 0.3 s",
    )


async def test_a_call_retried_after_its_limit_gets_a_new_one_within_the_run(
    make_agent: AgentFactory, trickling: Any
) -> None:
    agent = make_agent(
        model={"base_url": trickling(5, 0.1), "timeout": 0.3, "retries": 1},
        limits={"timeout": 5},
    )
    result = await agent.run("hi")
    assert result.output == "ok"


async def test_a_run_limit_nearer_than_the_model_s_is_the_run_s_timeout(
    make_agent: AgentFactory, trickling: Any
) -> None:
    agent = make_agent(model={"base_url": trickling(5), "timeout": 5}, limits={"timeout": 0.3})
    with pytest.raises(RunTimeout, match=r"limits.timeout = 0.3 s"):
        await agent.run("hi")


async def test_each_model_call_has_its_whole_limit_however_long_the_run_is(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    # Three calls of 0.2 s each under a 0.35 s model.timeout: 0.6 s in all.
    tool_round = Slow(0.2, CallTools([("ping", {})]))
    model_server.script("gpt-main", [tool_round, tool_round, Slow(0.2, Reply("done"))])
    agent = make_agent(tools=[ping()], model={"timeout": 0.35, "retries": 0})
    assert (await agent.run("go")).output == "done"


@pytest.mark.parametrize("tool_rounds", [0, 2])
async def test_a_run_s_deadlines_are_one_timer_however_many_model_calls(
    make_agent: AgentFactory,
    model_server: ScriptedModelServer,
    monkeypatch: pytest.MonkeyPatch,
    tool_rounds: int,
) -> None:
    model_server.script("gpt-main", [CallTools([("ping", {})])] * tool_rounds + [Reply("done")])
    agent = make_agent(tools=[ping()])
    await agent.run("warm")  # the connection pool's own timers are not the run's
    model_server.script("gpt-main", [CallTools([("ping", {})])] * tool_rounds + [Reply("done")])
    loop = asyncio.get_running_loop()
    scheduled: list[str] = []
    original = loop.call_at

    def call_at(when: float, callback: Any, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        scheduled.append(getattr(callback, "__module__", ""))
        return original(when, callback, *args, **kwargs)

    monkeypatch.setattr(loop, "call_at", call_at)
    await agent.run("go")
    monkeypatch.undo()
    deadlines = [m for m in scheduled if m in ("asyncio.timeouts", "dynagent.deadlines")]
    # Each tool call keeps a timer of its own (its ``timeout``); the run and its model
    # calls share one.
    assert len(deadlines) == 1 + tool_rounds
