"""The one run path: routing, metrics, traces, guard and log context for a run of an
agent, shared by every protocol (our API, OpenAI, A2A) and by programs that embed it."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dynagent._compat.loguru import contextualized
from dynagent.core.auth import Caller
from dynagent.core.drain import Drain
from dynagent.core.evidence import count_called, count_evidence
from dynagent.core.routing import RunRequest, select, session_key_of
from dynagent.core.shadows import ShadowCopy
from dynagent.core.spend import count_spend
from dynagent.events import (
    ErrorEvent,
    Event,
    ModelDelta,
    ModelResponseEvent,
    RunFinished,
    closing_events,
    spent,
)
from dynagent.exceptions import RunError, RunFailed, ServiceStopping
from dynagent.logs import run_line
from dynagent.registry.guard import guard_evidence
from dynagent.runtime.agent import Agent, RunResult, Variant
from dynagent.sessions.scope import new_trace_id
from dynagent.tools.agent import CALL_SCOPE, CallScope

if TYPE_CHECKING:
    from dynagent.core.service import Service


@dataclass(slots=True, eq=False)
class _Served:
    """One request's run: who served it, and since when. Not frozen: its span ends once."""

    service: Service
    who: Caller
    run: RunRequest
    agent: Agent
    variant: Variant
    started: float
    trace_id: str
    """Chosen here so that every line logged during the run can carry it."""
    span: Any = None
    """The run's OpenTelemetry span, when a tracer is configured."""
    nested: list[dict[str, Any]] = field(default_factory=list)
    """Runs of the agents this run called as tools, for its trace."""
    unmatched: bool = False
    """``rollout.match`` kept the run from the canary: evidence about the stable, but no
    sample of the split."""
    weight: str = ""
    """The canary weight that chose the variant (``""``: none did)."""

    def detach_span(self) -> None:
        """The span stops being current in the handler's task; the run's task, started with
        it current, keeps it. A stream's span ends wherever its last event is read (after a
        disconnect, maybe in no task of the request), and only this task can undo its own
        context change."""
        tracer = self.service.tracer
        if tracer is not None and self.span is not None:
            tracer.detach(self.span)

    def closing(
        self, seen: Sequence[Event], kind: str, message: str
    ) -> tuple[ErrorEvent, RunFinished]:
        """The ``error`` and ``run_finished`` of this run cut off from outside (the service
        stopping, its caller gone) after the ``seen`` events: what it spent, a call it was
        cut off in priced as its agent's model (``events.closing_events``)."""
        cost_of = self.agent.cost_of
        return closing_events(self.trace_id, kind, message, seen, self.started, cost_of)

    def close_span(self, events: Sequence[Event], error: str | None) -> None:
        """End the run's span (once), with the model and tool spans of ``events``."""
        tracer, span = self.service.tracer, self.span
        if tracer is not None and span is not None:
            self.span = None
            tracer.finish(span, self.agent, self.variant, events, error)

    def scope(self) -> AbstractContextManager[None]:
        """The caller's key scope and this trace, for the agents the run calls (an agent
        without tools calls none)."""
        if not self.agent.tools:
            return _NOT_CALLING
        who = self.who
        scope = CallScope(who.agents, who.key_digest or None, self.trace_id, nested=self.nested)
        return _Scoped(scope)

    def finish(self, trace_id: str, events: Sequence[Event], error: str | None = None) -> None:
        """The run ended: its span now, the rest with the service's next run ends
        (``RunEnds``), or at once while its agent has a canary (the guard acts on it)."""
        self.close_span(events, error)
        ended = time.perf_counter()
        entry = self.service.registry.table.find(self.agent.name)
        canary = entry is not None and entry.canary is not None
        self.service.run_ends.add(self._count, trace_id, events, error, ended, at_once=canary)

    def _count(
        self, trace_id: str, events: Sequence[Event], error: str | None, ended: float
    ) -> None:
        """The run's metrics, series, spend, trace, the guard's evidence and log line."""
        service, agent = self.service, self.agent
        usage, cost = spent(events, agent.cost_of)
        seconds = ended - self.started
        present = agent.name in service.registry  # a removed agent's figures are gone
        if present:
            service.metrics.observe_run(
                agent.name, self.variant, self.run.endpoint, seconds, usage, error
            )
            service.series.record(agent.name, self.variant, seconds, failed=error is not None)
            count_spend(
                service.metrics,
                service.registry.rollouts.spend,
                agent.name,
                agent.revision,
                self.variant,
                usage=usage,
                cost_usd=cost,
            )
        if self.nested:
            count_called(service, self.nested)
        if trace_id:
            service.traces.record(
                agent,
                self.variant,
                trace_id,
                events,
                owner=self.who.principal,
                nested=self.nested,
                routed=self.run.pin is None,
            )
        options = self.run.options
        shaped = options is not None and options.shapes(agent.spec)
        ok = guard_evidence(error, routed=self.run.pin is None, shaped=shaped)
        if ok is not None and present:
            count_evidence(
                service,
                agent,
                self.variant,
                ok,
                seconds,
                events,
                weight=self.weight,
                unmatched=self.unmatched,
            )
        where = f"{self.run.endpoint} {agent.name}@{agent.revision} ({self.variant})"
        if error:
            run_line("WARNING", trace_id, f"{where} failed: {error}")
        else:
            run_line("INFO", trace_id, f"{where} ok in {seconds * 1000:.0f} ms")


_NOT_CALLING = nullcontext()


class _Scoped:
    """``CALL_SCOPE`` set to ``scope`` for a block (a class, not a generator: every run
    enters it)."""

    __slots__ = ("_scope", "_token")

    def __init__(self, scope: CallScope) -> None:
        self._scope = scope

    def __enter__(self) -> None:
        self._token = CALL_SCOPE.set(self._scope)

    def __exit__(self, *exc: object) -> None:
        CALL_SCOPE.reset(self._token)


async def _serve(service: Service, who: Caller, run: RunRequest) -> _Served:
    agent, variant, unmatched, weight = await select(service, who, run)
    tracer = service.tracer
    span = tracer.start(run.name, run.carrier) if tracer is not None else None
    started = time.perf_counter()
    trace_id = new_trace_id()
    return _Served(
        service,
        who,
        run,
        agent,
        variant,
        started,
        trace_id,
        span,
        unmatched=unmatched,
        weight=weight,
    )


async def run_agent(service: Service, who: Caller, run: RunRequest) -> tuple[Agent, RunResult]:
    """Run ``run`` for ``who`` on the agent the registry routes it to, whole: the one
    run path every protocol calls (metrics, trace, guard, shadow copy included)."""
    served = await _serve(service, who, run)
    shadow = await _shadow_of(served)
    seen: list[Event] = []
    try:
        with contextualized(trace_id=served.trace_id), served.scope():
            async with service.drain.guard(served.trace_id):
                result = await served.agent.run(
                    run.input,
                    session_id=run.session_id,
                    variables=run.variables,
                    trace_id=served.trace_id,
                    variant=served.variant,
                    on_event=seen.append,
                    options=run.options,
                    session_key=session_key_of(who, run),
                )
    except ServiceStopping as exc:
        exc.events = (*seen, *served.closing(seen, exc.kind, exc.message))
        exc.revision, exc.variant = served.agent.revision, served.variant
        served.finish(exc.trace_id, exc.events, error=exc.kind)
        await service.traces.written(exc.trace_id)
        raise
    except RunError as exc:
        exc.revision, exc.variant = served.agent.revision, served.variant
        served.finish(exc.trace_id, exc.events, error=exc.kind)
        await service.traces.written(exc.trace_id)
        raise
    except BaseException as exc:  # refused before it ran (e.g. a missing prompt variable)
        served.close_span(seen, getattr(exc, "kind", type(exc).__name__))
        raise
    served.finish(result.trace_id, result.events)
    await service.traces.written(result.trace_id)  # readable on any replica once answered
    if shadow is not None:
        service.shadows.start(shadow)
    return served.agent, result


async def _shadow_of(served: _Served) -> ShadowCopy | None:
    """The canary to copy this request to (``rollout.shadow``) and the conversation before
    it, read now: by the time the shadow starts, the stable's turn is in the session."""
    if served.variant != "stable" or served.run.pin is not None:
        return None
    canary = served.service.shadows.wanted(served.run.name)
    if canary is None:
        return None
    run, store = served.run, served.agent.sessions
    scoped = session_key_of(served.who, run)
    history = await store.load(scoped) if store is not None and scoped else []
    return ShadowCopy(
        canary,
        run.input,
        run.session_id,
        run.variables,
        history,
        owner=served.who.principal,
        stable_span=served.span,
    )


async def stream_agent(
    service: Service, who: Caller, run: RunRequest, *, hold: bool = False
) -> tuple[Agent, Variant, str, AsyncIterator[Event]]:
    """Start a streamed run and return its trace id and events.

    The first event is taken here, so bad input fails before any header is sent.
    ``hold`` waits further, until the model has started answering: a run that fails
    before then raises ``RunFailed`` with the run's own error kind, so the caller
    answers with its real status instead of a stream that carries the error.
    """
    served = await _serve(service, who, run)
    shadow = await _shadow_of(served)
    # The run's task starts inside the first ``anext`` and keeps this log context.
    with contextualized(trace_id=served.trace_id), served.scope():
        events = served.agent.stream(
            run.input,
            session_id=run.session_id,
            variables=run.variables,
            trace_id=served.trace_id,
            variant=served.variant,
            options=run.options,
            session_key=session_key_of(who, run),
        )
        try:
            first = await anext(events)
        except BaseException as exc:  # refused before it started: only the span to close
            served.close_span((), getattr(exc, "kind", type(exc).__name__))
            raise
        served.detach_span()
    recorded = _recorded(served, first, events, service.drain, shadow)
    if hold:
        recorded = await _held(recorded, served)
    return served.agent, served.variant, first.trace_id, recorded


_ANSWERING = (ModelDelta, ModelResponseEvent, RunFinished)

DISCONNECTED = "disconnected"
"""The error kind of a streamed run whose caller left before its end."""
LEFT = "the caller closed the connection before the run ended"


async def _held(events: AsyncIterator[Event], served: _Served) -> AsyncIterator[Event]:
    """The events, read ahead up to the model's first answer (or the run's end)."""
    ahead: list[Event] = []
    async for event in events:
        ahead.append(event)
        if isinstance(event, ErrorEvent):
            async for _ in events:  # run_finished: let the run be recorded
                pass
            error = RunFailed(
                event.error_type,
                event.message,
                trace_id=event.trace_id,
                retryable=event.retryable,
            )
            error.revision, error.variant = served.agent.revision, served.variant
            raise error
        if isinstance(event, _ANSWERING):
            break
    return _replayed(ahead, events)


async def _replayed(ahead: list[Event], rest: AsyncIterator[Event]) -> AsyncIterator[Event]:
    for event in ahead:
        yield event
    async for event in rest:
        yield event


async def _recorded(
    served: _Served,
    first: Event,
    events: AsyncIterator[Event],
    drain: Drain,
    shadow: ShadowCopy | None = None,
) -> AsyncIterator[Event]:
    """The run's events as they come; at the end it is recorded and, if it went well, its
    shadow copy (``rollout.shadow``) started, as a whole run's is."""
    seen = [first]
    error: str | None = DISCONNECTED
    waiting = drain.guard(first.trace_id)  # entered for each event's wait, not its write
    try:
        yield first
        while True:
            try:
                waiting.enter()  # ``async with waiting``, written out: once per event
                try:
                    # ``anext(events, None)`` without the wrapper it builds per call.
                    event = await events.__anext__()
                except StopAsyncIteration:
                    event = None
                except BaseException as exc:
                    waiting.leave(type(exc), exc)
                    raise
                waiting.leave(None, None)
            except ServiceStopping as exc:
                for last in served.closing(seen, exc.kind, exc.message):
                    seen.append(last)
                    yield last
                error = exc.kind
                break
            if event is None:
                break
            seen.append(event)
            if isinstance(event, ErrorEvent):
                error = event.error_type
            elif isinstance(event, RunFinished) and event.status == "ok":
                error = None
            yield event
    finally:
        if error == DISCONNECTED:  # its trace says so, and what it spent till then
            seen.extend(served.closing(seen, error, LEFT))
        served.finish(first.trace_id, seen, error=error)
        await served.service.traces.written(first.trace_id)  # before the stream's end
        if shadow is not None and error is None:
            served.service.shadows.start(shadow)
