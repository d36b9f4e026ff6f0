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
from types import TracebackType

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

    def guard(self, trace_id: str) -> _Guard:
        """Run the block; past the drain deadline it is cancelled and ``ServiceStopping``
        raised for ``trace_id``."""
        return _Guard(self, trace_id)


class _Guard:
    """``Drain.guard``: a class rather than a generator-based context manager, as it is
    entered for a whole run and around each event a stream reads."""

    __slots__ = ("_drain", "_timeout", "_trace_id")

    def __init__(self, drain: Drain, trace_id: str) -> None:
        self._drain = drain
        self._trace_id = trace_id
        self._timeout = asyncio.timeout(drain._deadline)

    async def __aenter__(self) -> None:
        await self._timeout.__aenter__()
        self._drain._running.add(self._timeout)

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        timeout, drain = self._timeout, self._drain
        drain._running.discard(timeout)
        try:
            await timeout.__aexit__(kind, error, traceback)
        except TimeoutError:
            if timeout.expired():
                raise ServiceStopping(
                    "the service is shutting down and this run did not finish within "
                    f"listen.drain_seconds = {drain._seconds:g} s; retry the request",
                    trace_id=self._trace_id,
                ) from None
            raise
