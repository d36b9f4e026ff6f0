"""The runtime agent: an immutable snapshot of one built definition.

A new definition builds a new ``Agent``; a running request keeps the one it
started with. Nothing here is ever patched in place.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from dynagent.deadlines import RunDeadline
from dynagent.events import (
    ErrorEvent,
    Event,
    JsonValue,
    RunFinished,
    RunStarted,
    Usage,
    rounded_usd,
)
from dynagent.exceptions import RunError, RunTimeout
from dynagent.interceptors.base import InterceptorChain, RunContext
from dynagent.masking import SecretValues, StreamMask
from dynagent.models.base import Model, ToolDefinition
from dynagent.models.cut import CUT_ATTEMPTS, tools_size
from dynagent.models.prices import Prices, priced_name
from dynagent.runtime._calls import count_cut_attempts
from dynagent.runtime._event_text import input_summary, masked, masked_value, redacted
from dynagent.runtime._health import SourceHealth
from dynagent.runtime._loop import (
    AgentInput,
    execute_run,
    input_messages,
    render_system,
    system_messages,
)
from dynagent.runtime._one_call import answer, one_call
from dynagent.runtime._redaction import RedactingEmitter
from dynagent.runtime._stream import DeltaGate, EventQueue, unflushed
from dynagent.runtime.options import RunOptions
from dynagent.sessions.base import SessionStore
from dynagent.sessions.scope import new_trace_id
from dynagent.spec._schemas import Validator, validator
from dynagent.spec.agent import AgentSpec
from dynagent.tools.base import Tool

__all__ = ["Agent", "AgentInput", "RunResult", "SourceInfo", "Variant"]

Variant = Literal["stable", "canary"]
_YIELD_EVERY = 32


@dataclass(frozen=True, slots=True)
class SourceInfo:
    """Where a definition came from, shown in status and traces."""

    kind: Literal["file", "nacos", "code"]
    location: str = ""
    """A file path, or ``namespace/group/dataId`` for Nacos."""
    details: Mapping[str, str] = field(default_factory=dict)
    """Extra facts: md5, prompt key and version, …"""
    health: SourceHealth | None = field(default=None, compare=False, repr=False)
    """The source's live health (Nacos): read at status time, not part of the definition."""

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "location": self.location, **self.details}

    def status_dict(self) -> dict[str, Any]:
        """``as_dict()`` plus, for a server source, ``state`` (live, snapshot or
        disconnected) and ``since`` when it entered that state."""
        facts = self.as_dict()
        if self.health is not None:
            facts["state"] = self.health.state_of(self.details.get("from") == "snapshot")
            facts["since"] = self.health.since
        return facts


@dataclass(frozen=True, slots=True)
class RunResult:
    output: JsonValue
    """Text, or the parsed JSON value when the agent has an output schema."""
    agent: str
    revision: str
    variant: Variant
    trace_id: str
    session_id: str | None
    usage: Usage
    steps: int
    """Model calls made."""
    events: tuple[Event, ...]
    cost_usd: float | None = None
    """What its model calls cost (``models.prices``); None when one had no price."""


@dataclass(frozen=True, slots=True, eq=False)
class Agent:
    spec: AgentSpec
    model: Model
    tools: Mapping[str, Tool]
    """Tools by name, interceptors' first; fixed at build time."""
    chain: InterceptorChain
    system_prompt: str | None
    """The system prompt template (``{{var}}`` still unfilled)."""
    revision: str
    sessions: SessionStore | None = None
    source: SourceInfo = SourceInfo("code")
    factory: str = "default"
    built_at: float = field(default_factory=time.time)
    secrets: SecretValues | None = None
    """Values masked in every event (credentials from the environment, API keys)."""
    own_secrets: frozenset[str] = frozenset()
    """The values its definition contributed to ``secrets`` (its credentials): the service
    masks them while this agent is in the registry, and this agent's runs always."""
    prices: Prices = field(default_factory=Prices)
    """The service's ``models.prices``: what its runs' model calls cost."""
    name: str = field(init=False, repr=False)
    """``spec.name``, kept: a run reads it a dozen times."""
    definitions: tuple[ToolDefinition, ...] = field(init=False, repr=False)
    """Its tools' definitions, as each model call sends them."""
    definition_chars: int = field(init=False, repr=False)
    """What those definitions add to each call's prompt size (``tools_size``): measured
    once, not on every run (their parameter schemas are dumped to count them)."""
    output_validator: Validator | None = field(init=False, repr=False)
    """The validator of its output schema, built once: a run built it anew (22 µs for a
    three-field schema, its patterns and references checked again)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", self.spec.name)
        definitions = tuple(tool.definition for tool in self.tools.values())
        object.__setattr__(self, "definitions", definitions)
        object.__setattr__(self, "definition_chars", tools_size(definitions))
        output = self.spec.output
        object.__setattr__(self, "output_validator", validator(output.schema_) if output else None)

    def cost_of(self, usage: Usage) -> float | None:
        """What ``usage`` of its model costs (``models.prices``); None without a price."""
        return self.prices.cost(priced_name(self.model), usage)

    async def run(
        self,
        input: AgentInput,
        *,
        session_id: str | None = None,
        variables: Mapping[str, str] | None = None,
        trace_id: str | None = None,
        variant: Variant = "stable",
        on_event: Callable[[Event], None] | None = None,
        options: RunOptions | None = None,
        session_key: str | None = None,
    ) -> RunResult:
        """Run to the final answer; raises a ``RunError`` that carries the partial trace.

        ``session_key``: store the session under this key rather than ``session_id``."""
        if options is not None:
            options = options.bound(self.spec, self.tools)
        events: list[Event] = []

        def emit(event: Event) -> None:
            events.append(event)
            if on_event is not None:
                on_event(event)

        ctx = self._context(trace_id, session_id, variables, emit)
        ctx.session_key = session_key
        try:
            output, usage, steps = await self._guarded(
                input, ctx, variant, stream=False, options=options
            )
        except RunError as exc:
            exc.events = tuple(events)
            raise
        if self.secrets:  # as its final_output event: stored answers never hold a secret
            output = masked_value(output, self.secrets.mask)
        return RunResult(
            output,
            self.name,
            self.revision,
            variant,
            ctx.trace_id,
            session_id,
            usage,
            steps,
            tuple(events),
            rounded_usd(ctx.cost_usd),
        )

    async def stream(
        self,
        input: AgentInput,
        *,
        session_id: str | None = None,
        variables: Mapping[str, str] | None = None,
        trace_id: str | None = None,
        variant: Variant = "stable",
        options: RunOptions | None = None,
        session_key: str | None = None,
    ) -> AsyncIterator[Event]:
        """Yield the run's events as they happen; a failed run ends with ``error`` and
        ``run_finished`` events rather than an exception."""
        if options is not None:
            options = options.bound(self.spec, self.tools)
        queue = EventQueue()
        ctx = self._context(trace_id, session_id, variables, queue.put_nowait, streamed=True)
        ctx.session_key = session_key
        task = asyncio.create_task(self._guarded(input, ctx, variant, stream=True, options=options))
        task.add_done_callback(lambda _: queue.put_nowait(None))
        try:
            delivered = 0
            while (event := await queue.get()) is not None:
                yield event
                delivered += 1
                if delivered % _YIELD_EVERY == 0:
                    # A full queue is drained without a pause otherwise: thousands of
                    # deltas of a long answer held the event loop.
                    await asyncio.sleep(0)
            if not task.cancelled() and isinstance(task.exception(), RunError):
                return
            await task
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    def _context(
        self,
        trace_id: str | None,
        session_id: str | None,
        variables: Mapping[str, str] | None,
        emit: Callable[[Event], None],
        *,
        streamed: bool = False,
    ) -> RunContext:
        merged = {**self.spec.prompt.variables, **(variables or {})}
        ctx = RunContext(
            trace_id or new_trace_id(),
            self.name,
            self.revision,
            merged,
            session_id,
            system=render_system(self, merged),
            tools=self.tools,
        )
        # Masked inline, or on a worker thread when an event carries a long text. The
        # emitter holds the run's redactors, not the run's context that holds it: no
        # cycle, so a run's objects are freed when it ends, not by the garbage collector.
        shown = RedactingEmitter(emit, _shown_by(ctx.redactors, self.secrets))
        if streamed and self.secrets:  # only streamed runs have deltas
            ctx.emit = DeltaGate(StreamMask(self.secrets), shown)
        else:
            ctx.emit = shown
        return ctx

    async def _guarded(
        self,
        input: AgentInput,
        ctx: RunContext,
        variant: Variant,
        *,
        stream: bool,
        options: RunOptions | None = None,
    ) -> tuple[JsonValue, Usage, int]:
        """The run, returning (or raising) only once every event has been delivered."""
        try:
            result = await self._timed(input, ctx, variant, stream=stream, options=options)
        except RunError:
            if (emitter := unflushed(ctx)) is not None:
                await emitter.flush()
            raise
        if (emitter := unflushed(ctx)) is not None:
            await emitter.flush()
        return result

    async def _timed(
        self,
        input: AgentInput,
        ctx: RunContext,
        variant: Variant,
        *,
        stream: bool,
        options: RunOptions | None,
    ) -> tuple[JsonValue, Usage, int]:
        started = time.perf_counter()
        if self.chain.interceptors:
            await self.chain.before_run(ctx)
        ctx.emit(
            RunStarted(
                trace_id=ctx.trace_id,
                step=0,
                agent=self.name,
                revision=self.revision,
                variant=variant,
                session_id=ctx.session_id,
                input=input_summary(input),
            )
        )
        cut: list[tuple[str, Usage]] = []  # attempts the model client cut off and retried
        counting = CUT_ATTEMPTS.set(cut)
        try:
            # One timer for the run's limit and its model calls' whole-answer limits.
            with RunDeadline(self.spec.limits.timeout, self.spec.model.timeout):
                if one_call(self, options, ctx.session_key or ctx.session_id):
                    sent = [*system_messages(self, ctx), *input_messages(input)]
                    output, usage, steps = await answer(self, ctx, sent, options, stream=stream)
                else:
                    output, usage, steps = await execute_run(
                        self, ctx, input, stream=stream, options=options
                    )
        except TimeoutError:
            error: RunError = RunTimeout(
                f"run took longer than limits.timeout = {self.spec.limits.timeout} s"
            )
            raise self._failed(ctx, error, started, cut) from None
        except RunError as exc:
            raise self._failed(ctx, exc, started, cut) from None
        finally:
            CUT_ATTEMPTS.reset(counting)
        if cut:
            count_cut_attempts(self.prices, ctx, cut)
            usage = ctx.usage
        ctx.emit(
            RunFinished(
                trace_id=ctx.trace_id,
                step=steps,
                status="ok",
                usage=usage,
                duration_ms=_ms_since(started),
                cost_usd=rounded_usd(ctx.cost_usd),
            )
        )
        return output, usage, steps

    def _failed(
        self, ctx: RunContext, error: RunError, started: float, cut: list[tuple[str, Usage]]
    ) -> RunError:
        count_cut_attempts(self.prices, ctx, cut)
        step = ctx.model_calls
        ctx.emit(
            ErrorEvent(
                trace_id=ctx.trace_id,
                step=step,
                error_type=error.kind,
                message=error.message,
                retryable=not error.final,
            )
        )
        ctx.emit(
            RunFinished(
                trace_id=ctx.trace_id,
                step=step,
                status="error",
                usage=ctx.usage,
                duration_ms=_ms_since(started),
                cost_usd=rounded_usd(ctx.cost_usd),
            )
        )
        error.trace_id = ctx.trace_id
        return error


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


def _shown_by(
    redactors: list[Callable[[str], str]], secrets: SecretValues | None
) -> Callable[[Event], Event]:
    """How each event of a run is shown to traces, streams and logs: redacted (the run's
    ``pii_redaction``, added to as it starts), then its agent's secrets masked."""

    def shown(event: Event) -> Event:
        if redactors:
            event = redacted(event, redactors)
        if secrets:
            event = masked(event, secrets.mask)
        return event

    return shown
