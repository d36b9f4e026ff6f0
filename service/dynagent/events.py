"""Typed events of a run.

The same events feed ``Agent.stream()``, SSE responses, structured logs and the
trace store. Each carries the trace id, the step (model call) index and a
timestamp; model responses and the run's end carry token usage.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

JsonValue = Any
"""A value that ``json.dumps`` accepts."""


@dataclasses.dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    """Of ``input_tokens``, those the endpoint read from its prompt cache (priced apart)."""

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cached_input_tokens + other.cached_input_tokens,
        )

    def as_dict(self) -> dict[str, int]:
        counts = {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
        }
        if self.cached_input_tokens:  # only endpoints with a prompt cache report them
            counts["cached_input_tokens"] = self.cached_input_tokens
        return counts


WHOLE = 1 << 62
"""A limit of ``text_size`` that counts a text whole."""

_CONTAINERS = (list, tuple, dict)
_TEXTS = (str, list, tuple, dict)


def text_size(value: Any, limit: int = WHOLE) -> int:
    """Characters of text in ``value``, counted up to a little past ``limit`` (the values
    of a dict, not its keys)."""
    if isinstance(value, str):
        return len(value)
    if not isinstance(value, _CONTAINERS):
        return 0
    total = 0
    for item in value.values() if type(value) is dict else value:
        # The strings of a message list counted here, not in a call each.
        if type(item) is str:
            total += len(item)
        elif isinstance(item, _TEXTS):
            total += text_size(item, limit - total)
        if total > limit:
            break
    return total


@functools.cache
def _layout(kind: Any) -> tuple[tuple[str, ...], Callable[[Any], Any], tuple[str, ...]]:
    """An event class's field names, one call reading them all (a tuple), and the names
    of those that may hold a ``Usage``: read once per class, not per event (a streamed
    run turns every event it sends into a dict; ``dataclasses.fields()`` per call was
    most of the cost of recording 30,000 deltas)."""
    fields = dataclasses.fields(kind)  # every event has trace_id, step and at: a tuple
    names = tuple(f.name for f in fields)
    usages = tuple(f.name for f in fields if "Usage" in str(f.type))
    return names, operator.attrgetter(*names), usages


class _Sized:
    """The slot where the run's masking emitter leaves an event's text size, counted once
    where it is masked, for its trace (``runtime._redaction``); not a field: no copy,
    comparison or dict of the event carries it."""

    __slots__ = ("_text_size",)


def counted_size(event: object) -> int:
    """The text size kept with ``event`` where it was masked; -1 when none was."""
    size: int = getattr(event, "_text_size", -1)
    return size


def keep_size(event: _Sized, size: int) -> None:
    """Keep ``size`` with ``event`` (frozen: its slot set from outside the dataclass)."""
    object.__setattr__(event, "_text_size", size)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _Event(_Sized):
    trace_id: str
    step: int
    at: float = dataclasses.field(default_factory=time.time)
    """Unix time the event was emitted."""

    def as_dict(self) -> dict[str, JsonValue]:
        kind: Any = type(self)
        names, read, usages = _layout(kind)
        data = dict(zip(names, read(self), strict=False))  # one length: one layout
        for key in usages:
            value = data[key]
            if isinstance(value, Usage):
                data[key] = value.as_dict()
        return data


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RunStarted(_Event):
    type: Literal["run_started"] = "run_started"
    agent: str
    revision: str
    variant: str
    session_id: str | None
    input: JsonValue


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ModelRequestEvent(_Event):
    type: Literal["model_request"] = "model_request"
    model: str
    messages: int
    """How many messages the model was sent."""
    prompt_chars: int = 0
    """Characters of text the model was sent (its messages and tool definitions): what a
    call cut off before it answered is counted from (``cut_usage``)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ModelResponseEvent(_Event):
    type: Literal["model_response"] = "model_response"
    model: str
    content: str | None
    tool_calls: list[dict[str, str]]
    usage: Usage
    duration_ms: float
    cost_usd: float | None = None
    """What this call cost (``models.prices``); None when the model that answered has no
    price."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ModelDelta(_Event):
    type: Literal["model_delta"] = "model_delta"
    text: str


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallEvent(_Event):
    type: Literal["tool_call"] = "tool_call"
    call_id: str
    name: str
    arguments: str


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ToolResultEvent(_Event):
    type: Literal["tool_result"] = "tool_result"
    call_id: str
    name: str
    output: str
    is_error: bool
    duration_ms: float


STEP_SEPARATOR = "\n\n"
"""Between the texts of two model calls of one turn, in the answer text."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class FinalOutput(_Event):
    """The answer of the run, the same on every surface: without an output schema, every
    text the model wrote in the turn (text beside a tool call too), the texts of successive
    model calls joined by ``STEP_SEPARATOR``; with one, the validated JSON value alone."""

    type: Literal["final_output"] = "final_output"
    output: JsonValue


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ErrorEvent(_Event):
    type: Literal["error"] = "error"
    error_type: str
    message: str
    retryable: bool = True
    """False when the same request would fail the same way (``RunError.final``): a run past
    its own limits, a model endpoint that refused the request itself."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RunFinished(_Event):
    type: Literal["run_finished"] = "run_finished"
    status: Literal["ok", "error"]
    usage: Usage
    duration_ms: float
    cost_usd: float | None = None
    """What the run's model calls cost (``models.prices``); None when a model it used has
    no price."""

    @staticmethod
    def of(events: Sequence[Event]) -> RunFinished | None:
        """A run's closing event, with its usage and cost; None if the run never ended."""
        return next((e for e in reversed(events) if isinstance(e, RunFinished)), None)


def rounded_usd(cost: float | None) -> float | None:
    """To a millionth of a cent: float sums of many calls show no long tails."""
    return None if cost is None else round(cost, 8)


CHARS_PER_TOKEN = 4
"""A call cut off before it answered never reports its tokens, though the endpoint has
read the whole prompt and written part of an answer: it is counted at about four
characters a token, the vendors' own rule of thumb for English text."""


def estimated_usage(prompt_chars: int, answer_chars: int) -> Usage:
    """The usage counted for a call cut off after reading ``prompt_chars`` characters and
    writing ``answer_chars``."""
    return Usage(-(-prompt_chars // CHARS_PER_TOKEN), -(-answer_chars // CHARS_PER_TOKEN))


def cut_usage(events: Sequence[Event]) -> Usage:
    """The estimated usage of the call ``events`` end in the middle of: a ``model_request``
    that neither a ``model_response`` nor an ``error`` followed (its text streamed so far
    counted as its answer)."""
    cut: ModelRequestEvent | None = None
    answered = 0
    for event in events:
        if isinstance(event, ModelRequestEvent):
            cut, answered = event, 0
        elif isinstance(event, ModelDelta):
            answered += len(event.text)
        elif isinstance(event, (ModelResponseEvent, ErrorEvent)):
            cut = None
    return Usage() if cut is None else estimated_usage(cut.prompt_chars, answered)


def spent(
    events: Sequence[Event], price: Callable[[Usage], float | None] | None = None
) -> tuple[Usage, float | None]:
    """What a run's model calls used and cost: as its closing event says or, for a run cut
    off before it closed (its caller gone, the service stopping), summed over the calls
    that answered plus an estimate of the call it was cut off in (``cut_usage``), priced by
    ``price`` (the run's agent's model price) when given. The cost is None when a model
    that answered has no price."""
    finished = RunFinished.of(events)
    if finished is not None:
        return finished.usage, finished.cost_usd
    usage = Usage()
    cost_usd: float | None = 0.0
    for event in events:
        if isinstance(event, ModelResponseEvent):
            usage += event.usage
            if cost_usd is not None:
                cost_usd = None if event.cost_usd is None else cost_usd + event.cost_usd
    cut = cut_usage(events)
    if cut.total_tokens:
        usage += cut
        if cost_usd is not None and price is not None:
            extra = price(cut)
            cost_usd = None if extra is None else cost_usd + extra
    return usage, rounded_usd(cost_usd)


Event = (
    RunStarted
    | ModelRequestEvent
    | ModelResponseEvent
    | ModelDelta
    | ToolCallEvent
    | ToolResultEvent
    | FinalOutput
    | ErrorEvent
    | RunFinished
)


def closing_events(  # noqa: PLR0917
    trace_id: str,
    kind: str,
    message: str,
    seen: Sequence[Event],
    started: float,
    price: Callable[[Usage], float | None],
) -> tuple[ErrorEvent, RunFinished]:
    """The ``error`` and ``run_finished`` a run cut off from outside (the service
    stopping, its caller gone) ends with after the ``seen`` events, which it never emitted
    itself: its trace says how it ended and what it spent (``spent``, a model call it was
    cut off in priced by ``price``); ``started``: ``time.perf_counter()`` at its start."""
    step = seen[-1].step if seen else 0
    usage, cost = spent(seen, price)
    return (
        ErrorEvent(trace_id=trace_id, step=step, error_type=kind, message=message),
        RunFinished(
            trace_id=trace_id,
            step=step,
            status="error",
            usage=usage,
            duration_ms=round((time.perf_counter() - started) * 1000, 3),
            cost_usd=cost,
        ),
    )
