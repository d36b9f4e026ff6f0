"""``python -m bench._flat_serve MODE serve --config FILE --port PORT``: ``dynagent serve``
with its whole runs of an agent without tools made flat, an experiment of
``bench.throughput --flat-run``: what the layers of the run path cost, and what is left
when they are gone.

A flat run does in one function what the one run path (``core.runs.run_agent``) and the
runtime (``Agent.run`` → the loop → the interceptor chain → the model) do for a run with
no tools, interceptors, session or output schema: the variant routed as ever, the same
five events through the same masking emitter, the run's deadline, one model call, and
the same records at the end (``MODE`` ``records``), or none of them (``bare``: no
metrics, trace, evidence or log line). Streams, and any other run, take the service's
own path. It answers no error the way the service does: a measuring device, not a
second run path.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

from loguru import logger

from dynagent.cli import main as dynagent_main
from dynagent.core import runs
from dynagent.deadlines import RunDeadline
from dynagent.events import (
    Event,
    FinalOutput,
    ModelRequestEvent,
    ModelResponseEvent,
    RunFinished,
    RunStarted,
    rounded_usd,
)
from dynagent.models.base import Message, ModelRequest
from dynagent.models.cut import prompt_size
from dynagent.models.prices import priced_name
from dynagent.runtime._event_text import input_summary, masked
from dynagent.runtime._loop import render_system
from dynagent.runtime._redaction import RedactingEmitter
from dynagent.runtime.agent import Agent, RunResult

if TYPE_CHECKING:
    from dynagent.core.auth import Caller
    from dynagent.core.routing import RunRequest
    from dynagent.core.service import Service

MODES = ("records", "bare")


def install(mode: str) -> None:
    """Make ``core.runs.run_agent`` flat for runs of an agent without tools."""
    general = runs.run_agent
    keep_records = mode == "records"

    async def run_agent(service: Service, who: Caller, run: RunRequest) -> tuple[Agent, Any]:
        served = await runs._serve(service, who, run)
        agent = served.agent
        if agent.tools or agent.chain.interceptors or agent.spec.output or run.session_id:
            served.close_span((), None)
            return await general(service, who, run)
        events: list[Event] = []
        secrets = agent.secrets
        emit = RedactingEmitter(
            events.append, (lambda e: masked(e, secrets.mask)) if secrets else (lambda e: e)
        )
        with logger.contextualize(trace_id=served.trace_id):
            async with service.drain.guard(served.trace_id):
                result = await _flat(agent, served.variant, served.trace_id, run, emit, events)
        if keep_records:
            served.finish(served.trace_id, events)
        return agent, result

    runs.run_agent = run_agent


async def _flat(
    agent: Agent,
    variant: Any,
    trace_id: str,
    run: RunRequest,
    emit: RedactingEmitter,
    events: list[Event],
) -> RunResult:
    started = time.perf_counter()
    system = render_system(agent, {**agent.spec.prompt.variables, **run.variables})
    given: list[Message] = (
        [{"role": "user", "content": run.input}]
        if isinstance(run.input, str)
        else [dict(m) for m in run.input]
    )
    messages: tuple[Message, ...] = (
        *([{"role": "system", "content": system}] if system else []),
        *given,
    )
    emit(
        RunStarted(
            trace_id=trace_id,
            step=0,
            agent=agent.name,
            revision=agent.revision,
            variant=variant,
            session_id=None,
            input=input_summary(run.input),
        )
    )
    model = agent.model
    with RunDeadline(agent.spec.limits.timeout, agent.spec.model.timeout):
        emit(
            ModelRequestEvent(
                trace_id=trace_id,
                step=1,
                model=model.name,
                messages=len(messages),
                prompt_chars=prompt_size(messages),
            )
        )
        called = time.perf_counter()
        settings = run.options.settings if run.options is not None else {}
        response = await model.request(
            ModelRequest(messages, (), agent.spec.parallel_tool_calls, None, None, settings)
        )
    cost = rounded_usd(agent.prices.cost(response.priced_as or priced_name(model), response.usage))
    emit(
        ModelResponseEvent(
            trace_id=trace_id,
            step=1,
            model=response.model or model.name,
            content=response.content,
            tool_calls=[],
            usage=response.usage,
            duration_ms=round((time.perf_counter() - called) * 1000, 3),
            cost_usd=cost,
        )
    )
    output = response.content or ""
    emit(FinalOutput(trace_id=trace_id, step=1, output=output))
    emit(
        RunFinished(
            trace_id=trace_id,
            step=1,
            status="ok",
            usage=response.usage,
            duration_ms=round((time.perf_counter() - started) * 1000, 3),
            cost_usd=cost,
        )
    )
    return RunResult(
        output,
        agent.name,
        agent.revision,
        variant,
        trace_id,
        None,
        response.usage,
        1,
        tuple(events),
        cost,
    )


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in MODES:
        sys.exit(f"usage: python -m bench._flat_serve {{{','.join(MODES)}}} serve …")
    install(sys.argv[1])
    sys.exit(dynagent_main(sys.argv[2:]))
