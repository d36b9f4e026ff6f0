"""One timer for a run's deadlines; background tasks stopped without losing the
stopper's own cancellation (``cancelled``).

A run is bounded by ``limits.timeout``; each model call in it by ``model.timeout`` for
its whole answer (so that an endpoint trickling bytes cannot hold it longer). Two nested
``asyncio.timeout`` scopes scheduled and cancelled a timer each per model call; here a run
has one ``loop.call_at`` handle, armed at the nearest of the two deadlines. A deadline
that moves later (a model call ended, the next one started later) leaves the handle where
it is: when it fires early it is armed again at the deadline now in force.

What a caller sees is what the nested scopes gave: the run's deadline passing raises
``TimeoutError`` where the run's scope ends; a model call's deadline passing raises
``TimeoutError`` where that call's scope ends, and the run goes on (a retry gets a new
deadline). A cancellation from elsewhere passes through, as with ``asyncio.timeout``.
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar, Token
from math import inf
from types import TracebackType
from typing import Any

_RUN: ContextVar[RunDeadline | None] = ContextVar("dynagent_run_deadline", default=None)

_RUN_EXPIRED = "run"
_CALL_EXPIRED = "call"
_CANCELLED = asyncio.CancelledError


class RunDeadline:
    """``with RunDeadline(seconds):`` the run's block, in the run's task; model calls in
    that task take their deadline from it (``call_deadline``)."""

    __slots__ = (
        "_armed",
        "_call_at",
        "_call_seconds",
        "_cancelling",
        "_expired",
        "_handle",
        "_loop",
        "_run_at",
        "_seconds",
        "_task",
        "_token",
    )
    _token: Token[RunDeadline | None]

    def __init__(self, seconds: float, call_seconds: float | None = None) -> None:
        """``call_seconds``: the whole-answer limit its model calls will most likely
        ask for; the timer is first set as if one started now, so that the first call
        need not set it again (a timer that fires before a deadline is due is set again)."""
        self._seconds = seconds
        self._call_seconds = inf if call_seconds is None else call_seconds
        self._call_at = inf
        """The whole-answer deadline of the model call under way (none: ``inf``)."""
        self._expired = ""

    def __enter__(self) -> None:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a run's deadline is entered in a task")
        loop = self._loop = task.get_loop()
        self._task = task
        self._cancelling = task.cancelling()
        now = loop.time()
        self._run_at = now + self._seconds
        self._armed = min(self._run_at, now + self._call_seconds)
        self._handle = loop.call_at(self._armed, self._fire)
        self._token = _RUN.set(self)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._handle.cancel()
        _RUN.reset(self._token)
        expired = self._expired == _RUN_EXPIRED
        # As asyncio.timeout: its own cancellation taken back, a TimeoutError unless
        # another one is pending.
        if expired and self._task.uncancel() <= self._cancelling and kind is _CANCELLED:
            raise TimeoutError from error

    def _arm(self, when: float) -> None:
        self._handle.cancel()
        self._armed = when
        self._handle = self._loop.call_at(when, self._fire)

    def _fire(self) -> None:
        due = min(self._run_at, self._call_at)
        if due > self._armed:  # the deadline in force moved later since the handle was set
            self._arm(due)
            return
        self._expired = _CALL_EXPIRED if self._call_at < self._run_at else _RUN_EXPIRED
        self._task.cancel()


class _CallDeadline:
    """A model call's whole-answer deadline, kept by its run's ``RunDeadline``."""

    __slots__ = ("_at", "_cancelling", "_outer", "_run", "_seconds")

    def __init__(self, run: RunDeadline, seconds: float | None) -> None:
        self._run = run
        self._seconds = seconds

    async def __aenter__(self) -> None:
        run = self._run
        self._outer = run._call_at
        self._at = inf if self._seconds is None else run._loop.time() + self._seconds
        self._cancelling = run._task.cancelling()
        if self._at < run._call_at:
            run._call_at = self._at
            if self._at < run._armed:
                run._arm(self._at)

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        run = self._run
        ours = run._expired == _CALL_EXPIRED and run._call_at == self._at
        run._call_at = self._outer
        if ours:
            run._expired = ""
            run._arm(min(run._run_at, run._call_at))  # the rest of the run
            if run._task.uncancel() <= self._cancelling and kind is _CANCELLED:
                raise TimeoutError from error


def call_deadline(seconds: float | None) -> _CallDeadline | asyncio.Timeout:
    """``async with call_deadline(seconds):`` a model call's whole answer: on its run's
    timer when it is made in its run's task, else on a timer of its own."""
    run = _RUN.get()
    if run is not None and run._task is asyncio.current_task() and not run._expired:
        return _CallDeadline(run, seconds)
    return asyncio.timeout(seconds)


async def cancelled(*tasks: asyncio.Future[Any]) -> None:
    """Cancel ``tasks`` and return once every one has ended, their ``CancelledError``
    absorbed; an error one raised before it was cancelled is raised (the first).

    The stopper's own cancellation, if it comes while it waits, is raised once they have
    all ended. ``task.cancel()`` then ``suppress(CancelledError): await task`` lost it:
    a cancellation of the waiting task reaches the task it awaits and comes back as that
    task's ``CancelledError``, which the ``suppress`` swallowed, and a shutdown told to
    stop waiting went on as if it had not been."""
    waiting = asyncio.current_task()
    before = waiting.cancelling() if waiting is not None else 0
    for task in tasks:
        task.cancel()
    failure: BaseException | None = None
    for task in tasks:
        try:
            await task
        except asyncio.CancelledError:
            pass
        except Exception as exc:
            failure = failure or exc
    if waiting is not None and waiting.cancelling() > before:
        raise asyncio.CancelledError
    if failure is not None:
        raise failure
