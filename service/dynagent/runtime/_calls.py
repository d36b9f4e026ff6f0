"""What a run records of each model call, besides making it: the size of what the model
was sent (``model_request``'s ``prompt_chars``), the ``model_response`` event, and the
count of a call cut off before it answered; and a streamed call, its deltas emitted as
they come (``StreamedCall``).

A call cut off (the run's time up, its caller gone, the service stopping) never reports
its tokens, yet the endpoint has read its prompt and written part of an answer: the run
counts it at an estimate (``events.estimated_usage``) from ``prompt_chars`` and the text
streamed so far, so that no budget misses what such runs spend."""

from __future__ import annotations

import time

from dynagent.events import ModelDelta, ModelResponseEvent, Usage, estimated_usage, rounded_usd
from dynagent.exceptions import ModelError
from dynagent.interceptors.base import RunContext
from dynagent.models.base import Model, ModelRequest, ModelResponse, TextDelta
from dynagent.models.prices import Prices, priced_name


def count_cut(
    prices: Prices, model: Model, ctx: RunContext, prompt_chars: int, answer_chars: int
) -> None:
    """A call cut off after it was sent ``prompt_chars`` and streamed ``answer_chars``,
    counted in the run's usage and cost (priced as ``model``, by ``prices``)."""
    usage = estimated_usage(prompt_chars, answer_chars)
    count_cut_attempts(prices, ctx, [(priced_name(model), usage)])


def count_cut_attempts(prices: Prices, ctx: RunContext, attempts: list[tuple[str, Usage]]) -> None:
    """Cut-off calls ``(model name, usage)`` not counted yet (the model client's notes in
    ``models.cut``, as the run closes), in the run's usage and cost."""
    cost = take_cut_attempts(prices, ctx, attempts)
    ctx.cost_usd = None if cost is None or ctx.cost_usd is None else ctx.cost_usd + cost


def take_cut_attempts(
    prices: Prices, ctx: RunContext, attempts: list[tuple[str, Usage]] | None
) -> float | None:
    """The attempts noted in ``attempts`` (the run's ``CUT_ATTEMPTS``) since the last look:
    their usage added to the run's, their cost returned for the caller to count (None: a
    model without a price), the list emptied."""
    if not attempts:
        return 0.0
    cost: float | None = 0.0
    for model, usage in attempts:
        ctx.usage += usage
        each = prices.cost(model, usage)
        cost = None if each is None or cost is None else cost + each
    attempts.clear()
    return cost


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


class StreamedCall:
    """One streamed model call, as a model handler: each text delta emitted as a
    ``model_delta`` event of the call's step, the text streamed so far counted in
    ``chars`` (what a call cut off is charged for, ``count_cut``)."""

    __slots__ = ("_ctx", "_model", "chars")

    def __init__(self, model: Model, ctx: RunContext) -> None:
        self._model = model
        self._ctx = ctx
        self.chars = 0

    async def __call__(self, request: ModelRequest) -> ModelResponse:
        ctx = self._ctx
        final: ModelResponse | None = None
        streamed_text = False
        try:
            async for item in self._model.stream(request):
                if isinstance(item, TextDelta):
                    streamed_text = True
                    self.chars += len(item.text)
                    ctx.emit(
                        ModelDelta(trace_id=ctx.trace_id, step=ctx.model_calls, text=item.text)
                    )
                else:
                    final = item
        except ModelError as exc:
            if not (streamed_text and exc.retryable):
                raise
            # Text already reached the caller: a retry would splice two answers.
            raise ModelError(
                f"{exc.message} after part of the answer was streamed", status=exc.status
            ) from exc
        if final is None:
            raise ModelError("the model stream ended without a response")
        return final
