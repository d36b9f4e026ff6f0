"""The runtime agent: an immutable snapshot of one built definition.

A new definition builds a new ``Agent``; a running request keeps the one it
started with. Nothing here is ever patched in place.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, get_args

from ._health import SourceHealth
from ._redaction import RedactingEmitter
from ._run_loop import AgentInput, execute_run, render_system
from .events import ErrorEvent, Event, JsonValue, ModelDelta, RunFinished, RunStarted, Usage
from .exceptions import RunError, RunTimeout
from .interceptors.base import InterceptorChain, RunContext
from .masking import SecretValues, StreamMask
from .models.base import Model
from .run_options import RunOptions
from .sessions.base import SessionStore
from .sessions.scope import new_trace_id
from .spec import AgentSpec
from .tools.base import Tool

__all__ = ["Agent", "AgentInput", "RunResult", "SourceInfo", "Variant"]

Variant = Literal["stable", "canary"]
_YIELD_EVERY = 32
DELTA_WINDOW = 0.01
"""Seconds between two text deltas handed to a stream's reader (``_EventQueue``)."""


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

    @property
    def name(self) -> str:
        return self.spec.name

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
        queue = _EventQueue()
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
                    # deltas of a long answer held the event loop (issue 11).
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
        # Masked inline, or on a worker thread when an event carries a long text.
        shown = RedactingEmitter(emit, lambda event: self._shown(event, ctx))
        if streamed and self.secrets:  # only streamed runs have deltas
            ctx.emit = _DeltaGate(StreamMask(self.secrets), shown)
        else:
            ctx.emit = shown
        return ctx

    def _shown(self, event: Event, ctx: RunContext) -> Event:
        """The event as traces, streams and logs may see it."""
        if ctx.redactors:
            event = _redacted(event, ctx)
        if self.secrets:
            event = _masked(event, self.secrets.mask)
        return event

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
            await _flushed(ctx)
            raise
        await _flushed(ctx)
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
        await self.chain.before_run(ctx)
        ctx.emit(
            RunStarted(
                trace_id=ctx.trace_id,
                step=0,
                agent=self.name,
                revision=self.revision,
                variant=variant,
                session_id=ctx.session_id,
                input=_input_summary(input),
            )
        )
        try:
            async with asyncio.timeout(self.spec.limits.timeout):
                output, usage, steps = await execute_run(
                    self, ctx, input, stream=stream, options=options
                )
        except TimeoutError:
            error: RunError = RunTimeout(
                f"run took longer than limits.timeout = {self.spec.limits.timeout} s"
            )
            raise self._failed(ctx, error, started) from None
        except RunError as exc:
            raise self._failed(ctx, exc, started) from None
        ctx.emit(
            RunFinished(
                trace_id=ctx.trace_id,
                step=steps,
                status="ok",
                usage=usage,
                duration_ms=_ms_since(started),
            )
        )
        return output, usage, steps

    def _failed(self, ctx: RunContext, error: RunError, started: float) -> RunError:
        step = ctx.model_calls
        ctx.emit(
            ErrorEvent(
                trace_id=ctx.trace_id, step=step, error_type=error.kind, message=error.message
            )
        )
        ctx.emit(
            RunFinished(
                trace_id=ctx.trace_id,
                step=step,
                status="error",
                usage=ctx.usage,
                duration_ms=_ms_since(started),
            )
        )
        error.trace_id = ctx.trace_id
        return error


class _EventQueue:
    """The events of a streamed run on their way to its reader.

    Text deltas reach the reader at most once per ``DELTA_WINDOW``: the first at once,
    and those that arrive sooner after it are held until the window ends (or until an
    event of another kind comes) and joined into one. A model streaming a long answer in
    tiny chunks then costs every later stage (masking, SSE, trace, socket writes) a
    bounded amount per second, not an amount per chunk; a human reader sees no difference.
    """

    def __init__(self) -> None:
        self._items: deque[Event | None] = deque()
        self._waiter: asyncio.Future[None] | None = None
        """Woken by any event (the reader waits for the queue to fill)."""
        self._hold: asyncio.Future[None] | None = None
        """Woken by an event that is not a delta (the reader holds deltas back)."""
        self._delta_at = -DELTA_WINDOW

    def put_nowait(self, event: Event | None) -> None:
        self._items.append(event)
        for waiter in (self._waiter, None if isinstance(event, ModelDelta) else self._hold):
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

    async def get(self) -> Event | None:
        loop = asyncio.get_running_loop()
        while not self._items:
            self._waiter = loop.create_future()
            await self._waiter
        event = self._items.popleft()
        if not isinstance(event, ModelDelta):
            return event
        deadline = self._delta_at + DELTA_WINDOW
        if loop.time() < deadline and all(isinstance(e, ModelDelta) for e in self._items):
            self._hold = loop.create_future()
            timer = loop.call_later(deadline - loop.time(), _wake, self._hold)
            await self._hold
            timer.cancel()
        self._delta_at = loop.time()
        texts = [event.text]
        while self._items and _same_call(self._items[0], event):
            texts.append(self._items.popleft().text)  # type: ignore[union-attr]
        return event if len(texts) == 1 else dataclasses.replace(event, text="".join(texts))


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _same_call(queued: Event | None, delta: ModelDelta) -> bool:
    return isinstance(queued, ModelDelta) and queued.step == delta.step


@dataclass(slots=True)
class _DeltaGate:
    """Streamed text through a ``StreamMask``: a secret split over two deltas is masked;
    what a delta held back goes out before the next event of any other kind."""

    mask: StreamMask
    emit: Callable[[Event], None]
    held: ModelDelta | None = None

    def __call__(self, event: Event) -> None:
        if isinstance(event, ModelDelta):
            text = self.mask.feed(event.text)
            self.held = event
            if text:
                self.emit(dataclasses.replace(event, text=text))
            return
        rest = self.mask.flush()
        if rest and self.held is not None:
            self.emit(dataclasses.replace(self.held, text=rest))
        self.emit(event)


async def _flushed(ctx: RunContext) -> None:
    emitter = ctx.emit.emit if isinstance(ctx.emit, _DeltaGate) else ctx.emit
    if isinstance(emitter, RedactingEmitter):
        await emitter.flush()


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


def _input_summary(input: AgentInput) -> JsonValue:
    return input if isinstance(input, str) else [dict(m) for m in input]


_TEXT_FIELDS = ("input", "content", "arguments", "tool_calls", "output", "message", "text")


def _redacted(event: Event, ctx: RunContext) -> Event:
    changes: dict[str, Any] = {}
    for name in _TEXT_FIELDS:
        value = getattr(event, name, None)
        if value is not None:
            changes[name] = _redact_value(value, ctx.redact)
    return dataclasses.replace(event, **changes) if changes else event


def _masked(event: Event, mask: Callable[[str], str]) -> Event:
    """Every text of ``event`` masked, its model name and error message included."""
    changes: dict[str, Any] = {}
    for name in _TEXT_OF[type(event)]:
        value = getattr(event, name)
        if isinstance(value, str | list | dict):
            masked = _redact_value(value, mask)
            if masked != value:
                changes[name] = masked
    return dataclasses.replace(event, **changes) if changes else event


_NOT_TEXT = frozenset(
    {"trace_id", "step", "at", "type", "usage", "duration_ms", "is_error", "messages"}
)
_TEXT_OF: Mapping[type, tuple[str, ...]] = MappingProxyType(
    {
        kind: tuple(f.name for f in dataclasses.fields(kind) if f.name not in _NOT_TEXT)
        for kind in get_args(Event)
    }
)
"""The fields of each event type that may hold text (not ids, times or counts)."""


def _redact_value(value: JsonValue, redact: Callable[[str], str]) -> JsonValue:
    """Mask the strings (and numbers) inside a JSON value, keeping its structure:
    masking its serialized text could turn ``12345678`` into unparseable ``[PHONE]``."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [_redact_value(item, redact) for item in value]
    if isinstance(value, dict):
        return {key: _redact_value(item, redact) for key, item in value.items()}
    if isinstance(value, int | float) and not isinstance(value, bool):
        masked = redact(str(value))
        return value if masked == str(value) else masked
    return value
