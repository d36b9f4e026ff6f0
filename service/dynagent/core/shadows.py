"""Shadow traffic (``rollout.shadow``): a share of the stable's requests copied to the canary
in the background. The caller has its stable answer already and never waits; the shadow's
outcome, latency and trace are recorded for the canary (endpoint ``shadow`` in /metrics) and
count for its guard. At most ``limit`` shadows run at once; more are dropped, not queued."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from loguru import logger

from dynagent.core.metrics import Metrics
from dynagent.core.spend import count_spend
from dynagent.core.traces import TraceStore
from dynagent.core.tracing import RunTracer
from dynagent.events import Event, spent
from dynagent.exceptions import DynagentError, RunError
from dynagent.models.base import Message
from dynagent.registry.guard import guard_evidence
from dynagent.registry.rollouts import Rollouts
from dynagent.rollout.shadow import shadow_agent
from dynagent.runtime.agent import Agent, AgentInput

LIMIT = 16


@dataclass(frozen=True, slots=True)
class ShadowCopy:
    """One stable request, to be run again on the canary."""

    canary: Agent
    input: AgentInput
    session_id: str | None
    variables: Mapping[str, str]
    history: Sequence[Message]
    """The conversation before the copied turn."""
    owner: str
    """The identity that made the copied request: its shadow's trace is theirs too."""
    stable_span: Any = None
    """The stable run's span handle (OpenTelemetry): the shadow's span is its child."""


class ShadowRunner:
    def __init__(
        self,
        rollouts: Rollouts,
        metrics: Metrics,
        traces: TraceStore,
        limit: int = LIMIT,
        tracer: RunTracer | None = None,
    ) -> None:
        self.rollouts = rollouts
        self.metrics = metrics
        self.traces = traces
        self.tracer = tracer
        self.limit = limit
        self.started = 0
        self.dropped = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._idle = asyncio.Event()
        self._idle.set()

    def wanted(self, name: str) -> Agent | None:
        """The canary to copy this stable request to, or None (no shadow, not sampled)."""
        entry = self.rollouts.table.find(name)
        canary = entry.canary if entry else None
        if canary is None or not canary.serving or canary.policy.shadow <= 0:
            return None
        if random.uniform(0, 100) >= canary.policy.shadow:
            return None
        if len(self._tasks) >= self.limit:
            self.dropped += 1
            return None
        return canary.agent

    def start(self, copy: ShadowCopy) -> None:
        self.started += 1
        task = asyncio.get_running_loop().create_task(self._shadow(copy))
        self._tasks.add(task)
        self._idle.clear()
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not self._tasks:
            self._idle.set()

    @property
    def running(self) -> int:
        return len(self._tasks)

    async def idle(self) -> None:
        """Until no shadow runs (for tests and benchmarks)."""
        await self._idle.wait()

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _shadow(self, copy: ShadowCopy) -> None:
        canary = copy.canary
        started = time.perf_counter()
        trace_id = uuid.uuid4().hex
        tracer = self.tracer
        span = tracer.start_shadow(canary.name, copy.stable_span) if tracer else None
        try:
            events, error = await _run(copy, trace_id)
        except asyncio.CancelledError:  # the service stops: the span ends all the same
            if tracer is not None:
                tracer.finish(span, canary, "canary", (), "cancelled")
            raise
        if tracer is not None:
            tracer.finish(span, canary, "canary", events, error)
        seconds = time.perf_counter() - started
        usage, cost = spent(events, canary.cost_of)
        if canary.name in self.rollouts.table:
            self.metrics.observe_run(canary.name, "canary", "shadow", seconds, usage, error)
            count_spend(
                self.metrics,
                self.rollouts.spend,
                canary.name,
                canary.revision,
                "canary",
                usage=usage,
                cost_usd=cost,
            )
            ok = guard_evidence(error, routed=True, shaped=False)  # a copy of routed traffic
            if ok is not None:
                self.rollouts.observe(canary, "canary", ok=ok, seconds=seconds, routed=False)
                self.metrics.observe_evidence(
                    canary.name, canary.revision, "canary", "shadow", ok, seconds
                )
        if events:
            self.traces.record(canary, "canary", trace_id, events, owner=copy.owner)
        logger.bind(trace_id=trace_id).info(
            "shadow {}@{} {} in {:.0f} ms",
            canary.name,
            canary.revision,
            error or "ok",
            seconds * 1000,
        )


async def _run(copy: ShadowCopy, trace_id: str) -> tuple[Sequence[Event], str | None]:
    """The shadow's events and error kind (None: it answered)."""
    try:
        result = await shadow_agent(copy.canary, copy.history).run(
            copy.input,
            session_id=copy.session_id,
            variables=copy.variables,
            trace_id=trace_id,
            variant="canary",
        )
    except RunError as exc:
        return exc.events, exc.kind
    except DynagentError as exc:  # e.g. a prompt variable the canary needs and the caller lacks
        return (), exc.kind
    return result.events, None
