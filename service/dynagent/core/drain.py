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
from asyncio import CancelledError
from types import TracebackType

from dynagent.exceptions import ServiceStopping


class Drain:
    """The deadline of running requests: none while serving, ``drain_seconds`` after
    the shutdown began once stopping. Owned by the app (``DRAIN``)."""

    def __init__(self) -> None:
        self._deadline: float | None = None
        self._seconds = 0.0
        self._inside: set[_Guard] = set()

    @property
    def running(self) -> int:
        """Runs in progress now (a stream counts while it waits for its next event)."""
        return len(self._inside)

    def begin(self, seconds: float) -> None:
        """Runs in progress (and any still starting) have ``seconds`` left to finish."""
        loop = asyncio.get_running_loop()
        self._seconds = seconds
        self._deadline = loop.time() + seconds
        for guard in self._inside:
            guard.arm(loop, self._deadline)

    def guard(self, trace_id: str) -> _Guard:
        """Run the block; past the drain deadline it is cancelled and ``ServiceStopping``
        raised for ``trace_id``. A guard may be entered again once left: a stream enters
        one around each event it waits for."""
        return _Guard(self, trace_id)


class _Guard:
    """``Drain.guard``. While the service serves, entering one costs a set entry and no
    timer: a stream enters it around every event it reads, so ``asyncio.timeout`` (an
    object, a state machine and a timer check per entry) cost more than the rest of the
    event's way to the caller. Once the drain begins, each guard inside gets a timer that
    cancels its task at the deadline; its exit turns that cancellation (and only that:
    a cancellation from elsewhere stays one) into ``ServiceStopping``, as
    ``asyncio.timeout`` turns its own into ``TimeoutError``."""

    __slots__ = ("_cancelling", "_drain", "_expired", "_task", "_timer", "_trace_id")

    def __init__(self, drain: Drain, trace_id: str) -> None:
        self._drain = drain
        self._trace_id = trace_id
        self._task: asyncio.Task[object] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._expired = False
        self._cancelling = 0

    async def __aenter__(self) -> None:
        self.enter()

    def enter(self) -> None:
        """``async with``'s entry, as a plain call: a stream enters a guard around every
        event it waits for, and a coroutine each way cost more than the guard's work."""
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a drain guard is entered in a task")
        drain = self._drain
        self._task, self._cancelling, self._expired = task, task.cancelling(), False
        drain._inside.add(self)
        if drain._deadline is not None:
            self.arm(asyncio.get_running_loop(), drain._deadline)

    def arm(self, loop: asyncio.AbstractEventLoop, deadline: float) -> None:
        """Cancel the guarded block at ``deadline`` (the loop's clock)."""
        if self._timer is None:
            self._timer = loop.call_at(deadline, self._expire)

    def _expire(self) -> None:
        # Armed only while inside (the exit cancels the timer): the block is still running.
        self._timer = None
        self._expired = True
        if self._task is not None:
            self._task.cancel()

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.leave(kind, error)

    def leave(self, kind: type[BaseException] | None, error: BaseException | None) -> None:
        """``async with``'s exit, as a plain call: raises ``ServiceStopping`` (from
        ``error``) when the drain's deadline cancelled the block."""
        drain = self._drain
        drain._inside.discard(self)
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        if not self._expired:
            return
        self._expired = False
        task = self._task
        if task is not None and task.uncancel() <= self._cancelling and kind is CancelledError:
            raise ServiceStopping(
                "the service is shutting down and this run did not finish within "
                f"listen.drain_seconds = {drain._seconds:g} s; retry the request",
                trace_id=self._trace_id,
            ) from None
