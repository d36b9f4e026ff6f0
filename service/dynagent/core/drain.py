"""Graceful shutdown: how running requests end when the service is told to stop.

Once the service has closed its port (``dynagent.http.serving``), aiohttp waits
``shutdown_timeout`` for the running handlers, then cancels them and drops their
connections after up to another ``shutdown_timeout``. ``Drain`` makes the deadline exact
and the ending polite: a run still going ``listen.drain_seconds`` after that is cancelled
and its caller gets 503 ``unavailable`` (a stream: ``error`` and ``run_finished``
events), so a client or load balancer knows to retry it elsewhere.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from dynagent.events import ErrorEvent, Event, ModelResponseEvent, RunFinished, Usage
from dynagent.exceptions import ServiceStopping


class Drain:
    """The deadline of running requests: none while serving, ``drain_seconds`` after
    the shutdown began once stopping. Owned by the app (``DRAIN``)."""

    def __init__(self) -> None:
        self._deadline: float | None = None
        self._seconds = 0.0
        self._running: set[asyncio.Timeout] = set()

    @property
    def running(self) -> int:
        """Runs in progress now (a stream counts while it waits for its next event)."""
        return len(self._running)

    def begin(self, seconds: float) -> None:
        """Runs in progress (and any still starting) have ``seconds`` left to finish."""
        self._seconds = seconds
        self._deadline = asyncio.get_running_loop().time() + seconds
        for timeout in self._running:
            timeout.reschedule(self._deadline)

    @asynccontextmanager
    async def guard(self, trace_id: str) -> AsyncIterator[None]:
        """Run the block; past the drain deadline it is cancelled and ``ServiceStopping``
        raised for ``trace_id``."""
        try:
            async with asyncio.timeout(self._deadline) as timeout:
                self._running.add(timeout)
                try:
                    yield
                finally:
                    self._running.discard(timeout)
        except TimeoutError:
            if timeout.expired():
                raise ServiceStopping(
                    "the service is shutting down and this run did not finish within "
                    f"listen.drain_seconds = {self._seconds:g} s; retry the request",
                    trace_id=trace_id,
                ) from None
            raise


def stopped_events(
    error: ServiceStopping, seen: Sequence[Event], started: float
) -> tuple[ErrorEvent, RunFinished]:
    """The last two events of a run cut off by the drain, after the ``seen`` ones."""
    step = seen[-1].step if seen else 0
    usage = Usage()
    for event in seen:
        if isinstance(event, ModelResponseEvent):
            usage += event.usage
    return (
        ErrorEvent(
            trace_id=error.trace_id, step=step, error_type=error.kind, message=error.message
        ),
        RunFinished(
            trace_id=error.trace_id,
            step=step,
            status="error",
            usage=usage,
            duration_ms=round((time.perf_counter() - started) * 1000, 3),
        ),
    )
