"""A run that is one model call, whole or streamed: an agent with nothing between its
prompt and the model — no tools, interceptors, session, output schema or cost ceiling —
answered without the loop's machinery (``_loop._Loop``: its tool and schema set-up, the
interceptor chain, the cost meter). A streamed call emits its deltas as the loop's do
(``_calls.StreamedCall``, the loop's own).

Most agents a service serves are of this kind, and every layer each of their requests
passes costs CPU. The call emits what ``_Loop`` emits for the same run, field for field,
through the same ``ctx.emit`` (``tests/runtime/test_one_call.py`` holds the two to it),
so masking, traces, metrics and logs cannot tell them apart. When the model asks for
tools anyway (each call is answered that the agent has no such tool), the run goes on in
the loop, from the answer received.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from dynagent.events import FinalOutput, JsonValue, ModelRequestEvent, Usage
from dynagent.interceptors.base import RunContext
from dynagent.models.base import Message, ModelRequest
from dynagent.models.cut import prompt_size
from dynagent.models.prices import priced_name
from dynagent.runtime._calls import StreamedCall, count_cut, response_event
from dynagent.runtime._costs import CEILINGS
from dynagent.runtime._loop import Agent, go_on
from dynagent.runtime._tracing import within
from dynagent.runtime.options import RunOptions

_NO_SETTINGS: Mapping[str, Any] = {}


def one_call(agent: Agent, options: RunOptions | None, session_key: str | None) -> bool:
    """Whether a run of ``agent`` is one model call whose text is its answer, unless the
    model asks for tools."""
    return (
        not agent.tools
        and not agent.chain.interceptors
        and agent.spec.output is None
        and agent.spec.limits.max_cost_usd is None
        and (agent.sessions is None or session_key is None)
        and (options is None or (not options.client_tools and options.output_schema is None))
        and not CEILINGS.get()  # called as a tool under a caller's ceiling: the loop's meter
    )


async def answer(
    agent: Agent,
    ctx: RunContext,
    messages: list[Message],
    options: RunOptions | None,
    *,
    stream: bool = False,
) -> tuple[JsonValue, Usage, int]:
    """The run's output, usage and model calls, as ``_Loop.run`` returns them;
    ``stream``: the call streamed, each text delta emitted as it comes."""
    model = agent.model
    request = ModelRequest(
        tuple(messages),
        (),
        agent.spec.parallel_tool_calls,
        None,
        options.first_choice(1) if options is not None else None,
        options.settings if options is not None else _NO_SETTINGS,
    )
    ctx.model_calls = 1
    prompt = prompt_size(messages)
    ctx.emit(
        ModelRequestEvent(
            trace_id=ctx.trace_id,
            step=1,
            model=model.name,
            messages=len(messages),
            prompt_chars=prompt,
        )
    )
    started = time.perf_counter()
    streamed = StreamedCall(model, ctx) if stream else None
    try:
        with within("chat 1"):  # the span the model call's traceparent names
            response = await (streamed or model.request)(request)
    except asyncio.CancelledError:
        count_cut(agent.prices, model, ctx, prompt, streamed.chars if streamed else 0)
        raise
    ctx.usage += response.usage
    cost = agent.prices.cost(response.priced_as or priced_name(model), response.usage)
    ctx.emit(response_event(ctx, 1, model, response, started=started, cost=cost))
    ctx.cost_usd = None if cost is None or ctx.cost_usd is None else ctx.cost_usd + cost
    if response.tool_calls:
        return await go_on(agent, ctx, messages, response, options, stream=stream)
    output = response.content or ""
    ctx.emit(FinalOutput(trace_id=ctx.trace_id, step=1, output=output))
    return output, ctx.usage, 1
