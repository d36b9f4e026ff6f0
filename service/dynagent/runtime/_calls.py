"""What a run records of each model call, besides making it: the size of what the model
was sent (``model_request``'s ``prompt_chars``), the ``model_response`` event, and the
count of a call cut off before it answered.

A call cut off (the run's time up, its caller gone, the service stopping) never reports
its tokens, yet the endpoint has read its prompt and written part of an answer: the run
counts it at an estimate (``events.estimated_usage``) from ``prompt_chars`` and the text
streamed so far, so that no budget misses what such runs spend."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

from dynagent.events import ModelResponseEvent, estimated_usage, rounded_usd
from dynagent.interceptors.base import RunContext
from dynagent.models.base import Message, Model, ModelResponse, ToolDefinition
from dynagent.models.prices import Prices, priced_name
from dynagent.runtime._redaction import text_size

_WHOLE = 1 << 62
"""``text_size``'s limit that counts a text whole."""


def definitions_size(definitions: Sequence[ToolDefinition]) -> int:
    """What tool definitions add to each call's ``prompt_chars``: their names,
    descriptions and argument schemas as JSON."""
    return sum(
        len(d.name) + len(d.description) + len(json.dumps(d.parameters)) for d in definitions
    )


def prompt_size(messages: Sequence[Message], definitions: int = 0) -> int:
    """``prompt_chars`` of a call sent ``messages`` and tool definitions of ``definitions``
    characters (``definitions_size``)."""
    return text_size(messages, _WHOLE) + definitions


def count_cut(
    prices: Prices, model: Model, ctx: RunContext, prompt_chars: int, answer_chars: int
) -> None:
    """A call cut off after it was sent ``prompt_chars`` and streamed ``answer_chars``,
    counted in the run's usage and cost (priced as ``model``, by ``prices``)."""
    usage = estimated_usage(prompt_chars, answer_chars)
    ctx.usage += usage
    if ctx.cost_usd is not None:
        cost = prices.cost(priced_name(model), usage)
        ctx.cost_usd = None if cost is None else ctx.cost_usd + cost


def response_event(
    ctx: RunContext,
    step: int,
    model: Model,
    response: ModelResponse,
    *,
    started: float,
    cost: float | None,
) -> ModelResponseEvent:
    """The ``model_response`` event of model call ``step``, which started at ``started``
    (``time.perf_counter``) and cost ``cost``."""
    return ModelResponseEvent(
        trace_id=ctx.trace_id,
        step=step,
        model=response.model or model.name,
        content=response.content,
        tool_calls=[
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in response.tool_calls
        ],
        usage=response.usage,
        duration_ms=round((time.perf_counter() - started) * 1000, 3),
        cost_usd=rounded_usd(cost),
    )
