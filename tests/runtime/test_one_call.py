"""A run that is one model call (``runtime._one_call``), whole or streamed, is the run the
loop makes:
the same answer, the same request on the wire, the same events field for field (masked
alike), the same failure; and an agent with anything the loop does for it takes the loop."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from dynagent import Tool
from dynagent.exceptions import RunError
from dynagent.interceptors.base import Interceptor, InterceptorChain
from dynagent.masking import SecretValues
from dynagent.runtime import _costs, _one_call
from dynagent.runtime import agent as agent_module
from dynagent.runtime.agent import Agent, RunResult
from dynagent.runtime.options import RunOptions
from dynagent.sessions.memory import MemorySessionStore
from tests.support import AgentFactory, CallTools, Fail, Reply, ScriptedModelServer

T = TypeVar("T")
_VARYING = frozenset({"trace_id", "duration_ms", "at"})
SECRET = "sk-one-call-secret-0123456789"


def _numbered(value: Any) -> Any:
    """``value`` with the request number taken out of the scripted server's call ids
    (``call_{request}_{n}``: requests are counted over the server's life)."""
    return json.loads(re.sub(r"call_\d+_", "call_", json.dumps(value)))


def _events(result_or_error: RunResult | RunError) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = _numbered(
        [
            {key: value for key, value in event.as_dict().items() if key not in _VARYING}
            for event in result_or_error.events
        ]
    )
    return events


async def _both(
    monkeypatch: pytest.MonkeyPatch,
    model_server: ScriptedModelServer,
    steps: list[Any],
    run: Callable[[], Awaitable[T]],
) -> tuple[T | RunError, T | RunError, list[dict[str, Any]]]:
    """``run`` once as one call, once through the loop, the model scripted alike; what
    each returned or raised, and the bodies each sent the model."""
    outcomes: list[T | RunError] = []
    for as_one_call in (True, False):
        model_server.script("gpt-main", steps)
        if not as_one_call:
            monkeypatch.setattr(agent_module, "one_call", lambda *_: False)
        try:
            outcomes.append(await run())
        except RunError as exc:
            outcomes.append(exc)
    sent = model_server.requests
    half = len(sent) // 2
    assert _numbered(sent[:half]) == _numbered(sent[half:])
    return outcomes[0], outcomes[1], sent[:half]


async def test_an_answer_is_the_loops_answer_event_for_event(
    make_agent: AgentFactory, model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = make_agent(model={"settings": {"temperature": 0.3}})
    assert _one_call.one_call(agent, None, None)

    one, looped, sent = await _both(
        monkeypatch,
        model_server,
        [Reply("Paris.")],
        lambda: agent.run("Capital of France?", variables={}),
    )

    assert isinstance(one, RunResult) and isinstance(looped, RunResult)
    assert (one.output, one.steps, one.usage) == (looped.output, looped.steps, looped.usage)
    assert one.output == "Paris."
    assert _events(one) == _events(looped)
    assert [e["type"] for e in _events(one)] == [
        "run_started",
        "model_request",
        "model_response",
        "final_output",
        "run_finished",
    ]
    assert sent[0]["temperature"] == 0.3
    assert "tools" not in sent[0]


async def test_a_model_asking_for_tools_goes_on_in_the_loop(
    make_agent: AgentFactory, model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = make_agent()

    one, looped, sent = await _both(
        monkeypatch,
        model_server,
        [CallTools([("lookup", {"key": "a"})]), Reply("No tool, then.")],
        lambda: agent.run("Look it up."),
    )

    assert isinstance(one, RunResult) and isinstance(looped, RunResult)
    assert one.output == looped.output == "No tool, then."
    assert one.steps == looped.steps == 2
    assert _events(one) == _events(looped)
    assert "unknown tool 'lookup'" in sent[1]["messages"][-1]["content"]


async def test_a_failed_call_fails_the_run_as_the_loops_does(
    make_agent: AgentFactory, model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = make_agent(model={"retries": 0})

    one, looped, _ = await _both(
        monkeypatch, model_server, [Fail(400)], lambda: agent.run("Anything.")
    )

    assert isinstance(one, RunError) and isinstance(looped, RunError)
    assert (one.kind, type(one)) == (looped.kind, type(looped))
    assert _events(one) == _events(looped)
    assert [e["type"] for e in _events(one)][-2:] == ["error", "run_finished"]


async def test_secrets_are_masked_alike(
    make_agent: AgentFactory, model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = dataclasses.replace(make_agent(), secrets=SecretValues([SECRET]))

    one, looped, _ = await _both(
        monkeypatch,
        model_server,
        [Reply(f"the key is {SECRET}")],
        lambda: agent.run(f"say {SECRET}"),
    )

    assert isinstance(one, RunResult) and isinstance(looped, RunResult)
    assert one.output == looped.output
    assert SECRET not in str(one.output)
    assert _events(one) == _events(looped)
    assert SECRET not in repr(_events(one))


async def _streamed(agent: Agent, text: str) -> list[dict[str, Any]]:
    """The events of ``agent``'s streamed run of ``text``, as ``_events`` shows them."""
    shown = []
    async for event in agent.stream(text):
        shown.append({k: v for k, v in event.as_dict().items() if k not in _VARYING})
    events: list[dict[str, Any]] = _numbered(shown)
    return events


async def _both_streamed(
    monkeypatch: pytest.MonkeyPatch,
    model_server: ScriptedModelServer,
    steps: list[Any],
    agent: Agent,
    text: str,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """``_both`` for a streamed run (which ends with its error events, not an exception):
    its events as one call, then through the loop, and the bodies the first sent."""
    one, looped, sent = await _both(
        monkeypatch, model_server, steps, lambda: _streamed(agent, text)
    )
    assert isinstance(one, list) and isinstance(looped, list)
    return one, looped, sent


async def test_a_streamed_answer_is_the_loops_stream_event_for_event(
    make_agent: AgentFactory, model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = make_agent(model={"settings": {"temperature": 0.3}})
    calls: list[bool] = []
    answer = _one_call.answer

    async def noted(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs.get("stream", False))
        return await answer(*args, **kwargs)

    monkeypatch.setattr(agent_module, "answer", noted)

    one, looped, sent = await _both_streamed(
        monkeypatch, model_server, [Reply("Paris, of course.")], agent, "Capital of France?"
    )

    assert calls == [True]  # the first run took the one call, streamed
    assert one == looped
    kinds = [e["type"] for e in one]
    assert [k for i, k in enumerate(kinds) if not i or kinds[i - 1] != k] == [
        "run_started",
        "model_request",
        "model_delta",  # the deltas of one window joined, however many
        "model_response",
        "final_output",
        "run_finished",
    ]
    assert "".join(e["text"] for e in one if e["type"] == "model_delta") == "Paris, of course."
    assert sent[0]["stream"] is True and sent[0]["temperature"] == 0.3


@pytest.mark.parametrize(
    "steps",
    [
        [CallTools([("lookup", {"key": "a"})]), Reply("No tool, then.")],
        [Fail(400)],
        [Reply(f"the key is {SECRET}, split", pieces=["the key is ", SECRET[:9], SECRET[9:]])],
    ],
    ids=["tools asked for", "a failed call", "a secret across deltas"],
)
async def test_a_streamed_run_goes_on_fails_and_masks_as_the_loops_does(
    make_agent: AgentFactory,
    model_server: ScriptedModelServer,
    monkeypatch: pytest.MonkeyPatch,
    steps: list[Any],
) -> None:
    agent = dataclasses.replace(make_agent(model={"retries": 0}), secrets=SecretValues([SECRET]))

    one, looped, _ = await _both_streamed(monkeypatch, model_server, steps, agent, "Go.")

    assert one == looped
    assert SECRET not in repr(one)
    assert one[-1]["type"] == "run_finished"


async def _ignored(_: Any) -> str:
    return ""


class _Noting(Interceptor):
    name = "noting"


@pytest.mark.parametrize(
    "change",
    [
        "a tool",
        "an interceptor",
        "an output schema",
        "a cost ceiling",
        "a session",
        "client tools",
        "the caller's schema",
        "a caller's ceiling",
    ],
)
async def test_anything_the_loop_does_for_a_run_takes_the_loop(
    make_agent: AgentFactory, change: str
) -> None:
    plain = make_agent()
    assert _one_call.one_call(plain, None, None)
    options: RunOptions | None = None
    key: str | None = None
    agent: Agent = plain
    token = None
    if change == "a tool":
        agent = make_agent(tools=[Tool.from_function(_ignored)])
    elif change == "an interceptor":
        agent = dataclasses.replace(plain, chain=InterceptorChain((_Noting(),)))
    elif change == "an output schema":
        agent = make_agent(output={"schema": {"type": "object"}})
    elif change == "a cost ceiling":
        agent = dataclasses.replace(
            plain,
            spec=plain.spec.model_copy(
                update={"limits": plain.spec.limits.model_copy(update={"max_cost_usd": 1.0})}
            ),
        )
    elif change == "a session":
        agent, key = dataclasses.replace(plain, sessions=MemorySessionStore()), "s-1"
    elif change == "client tools":
        tool = Tool.from_function(_ignored).definition
        options = RunOptions(client_tools=(tool,))
    elif change == "the caller's schema":
        options = RunOptions(output_schema={"type": "object"})
    else:
        token = _costs.CEILINGS.set((_costs.Ceiling("caller", 1.0),))

    try:
        assert not _one_call.one_call(agent, options, key)
    finally:
        if token is not None:
            _costs.CEILINGS.reset(token)
