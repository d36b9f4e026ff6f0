"""One run of one case, apart from the world: its tools replaced, no session written.

An evaluation has no effect outside itself. Every tool is replaced for the run
(``eval_tools``): the case's recorded result where it has one, the real tool only where
it is ``shadow_safe``, otherwise a placeholder the model sees; the run writes no
session; its events reach no listener but the runner.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from dynagent.evals.engine import Outcome, ToolCall
from dynagent.evals.spec import Case
from dynagent.events import Event, ToolCallEvent, ToolResultEvent
from dynagent.exceptions import DynagentError
from dynagent.models.base import Message
from dynagent.runtime.agent import Agent, RunResult
from dynagent.tools.base import Tool

PLACEHOLDER = (
    "EVALUATION RUN: this tool was not executed (it is not shadow_safe and the case "
    "records no result for it); continue as if it had succeeded."
)


def isolated(
    agent: Agent, recorded: Mapping[str, str | tuple[str, ...]], *, live: bool = True
) -> Agent:
    """``agent`` for an evaluation: its tools replaced (``eval_tools``), no session store."""
    tools = eval_tools(agent.tools, recorded, live=live)
    return dataclasses.replace(agent, tools=tools, sessions=None)


async def run_case(
    agent: Agent, case: Case, *, shared: Agent | None = None
) -> tuple[Outcome, str | None]:
    """One run of ``case`` on ``agent`` with its tools replaced (``eval_tools``): what it
    produced, and why it failed if it did. ``shared``: ``isolated(agent, {})`` made once,
    used when the case records no tool results and lets its safe tools run."""
    runner, asked = prepared(agent, case, shared)
    started = time.perf_counter()
    try:
        result = await runner.run(asked, variables=case.variables, variant="stable")
    except DynagentError as exc:
        return failed(exc, started)
    return produced(result, started), None


def prepared(agent: Agent, case: Case, shared: Agent | None) -> tuple[Agent, str | list[Message]]:
    """The agent a case runs on (its tools replaced) and what it is asked."""
    if shared is not None and not case.tool_results and case.live_tools:
        runner = shared
    else:
        runner = isolated(agent, case.tool_results, live=case.live_tools)
    # A case without history is the caller's words alone, as a plain run is given them.
    if not case.history:
        return runner, case.input
    asked: list[Message] = [{"role": t.role, "content": t.content} for t in case.history]
    asked.append({"role": "user", "content": case.input})
    return runner, asked


def failed(exc: DynagentError, started: float) -> tuple[Outcome, str]:
    """A run that ended without an answer: its error carries its events (``RunError``)."""
    latency = (time.perf_counter() - started) * 1000
    events: Sequence[Event] = getattr(exc, "events", ())
    return Outcome("", latency_ms=latency, tool_calls=_calls(events)), str(exc)


def produced(result: RunResult, started: float) -> Outcome:
    latency = (time.perf_counter() - started) * 1000
    usage = result.usage
    output = result.output
    if isinstance(output, str):
        answer, structured = output, None
    else:
        answer, structured = json.dumps(output, ensure_ascii=False), output
    tokens = usage.input_tokens + usage.output_tokens
    calls = _calls(result.events)
    return Outcome(answer, structured, calls, result.steps, latency, tokens, result.cost_usd)


def _calls(events: Sequence[Event]) -> tuple[ToolCall, ...]:
    if ToolCallEvent not in map(type, events):  # most runs of a suite: no tool was called
        return ()
    asked = [event for event in events if isinstance(event, ToolCallEvent)]
    results = {e.call_id: e.output for e in events if isinstance(e, ToolResultEvent)}
    return tuple(
        ToolCall(event.name, _args(event.arguments), results.get(event.call_id)) for event in asked
    )


def _args(arguments: str) -> Mapping[str, Any]:
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def eval_tools(
    tools: Mapping[str, Tool],
    recorded: Mapping[str, str | tuple[str, ...]],
    *,
    live: bool = True,
) -> dict[str, Tool]:
    """``tools`` for an evaluation: a recorded result where the case has one (a list: one
    per call, in order, the last repeated), the real tool where it is ``shadow_safe`` (and
    ``live``), otherwise a placeholder. No tool without a recorded result or
    ``shadow_safe`` runs; with ``live`` False, none runs at all."""
    return {name: _eval_tool(tool, recorded.get(name), live) for name, tool in tools.items()}


def _eval_tool(tool: Tool, recorded: str | tuple[str, ...] | None, live: bool) -> Tool:
    if recorded is None:
        return tool if tool.shadow_safe and live else _answering(tool, (PLACEHOLDER,))
    answers = (recorded,) if isinstance(recorded, str) else recorded
    return _answering(tool, answers or (PLACEHOLDER,))


def _answering(tool: Tool, answers: tuple[str, ...]) -> Tool:
    calls = iter(range(1 << 62))

    async def replay(arguments: dict[str, Any]) -> str:
        return answers[min(next(calls), len(answers) - 1)]

    return dataclasses.replace(tool, function=replay)
