"""The bookkeeping of finished runs, applied in batches.

A run's end is counted in its metrics, recent series and spend, kept as a trace, weighed
by the canary guard and logged. Done as each run ended, on the request's own path, that
work cost about a fifth of serving a whole answer (measured by leaving it out, in
docs/benchmarks.md), and most of that was not the work itself but what it did to the
processor's caches between the requests' own work. Applied together, every
``SETTLE_AFTER`` seconds, the same work costs a fraction of that.

Whoever reads what it writes settles it first (``RunEnds.settle``): every HTTP request
but the agent runs themselves (the front middleware), a canary's routing (its guard and
budget read the evidence and spend of the runs before), trace reads and metric scrapes
in the process (``TraceStore``, ``Metrics``), and the service's stop. So what is read is
what it would be had each run's end been applied as it came.

A fleet that shares a Redis writes each trace there before the run is answered (any
replica reads it at once): its run ends are applied as they come, not batched. So are
the runs of an agent with a canary: its guard pulls a failing canary before the failed run
is answered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from loguru import logger

SETTLE_AFTER = 0.02
"""Seconds a finished run's bookkeeping may wait for the others of that time."""
MOST_WAITING = 512
"""Run ends that are applied at once, however recent."""


class RunEnds:
    """Finished runs' bookkeeping, applied in the order the runs ended."""

    def __init__(self, *, batched: bool = True, after: float = SETTLE_AFTER) -> None:
        self.batched = batched
        self.after = after
        """Seconds an end waits at most (``SETTLE_AFTER``)."""
        self._waiting: list[tuple[Callable[..., None], tuple[Any, ...]]] = []
        self._due_on: asyncio.AbstractEventLoop | None = None
        """The loop that will apply what waits (None: nothing is due)."""

    def add(self, apply: Callable[..., None], *args: Any, at_once: bool = False) -> None:
        """``apply(*args)`` within ``SETTLE_AFTER`` seconds, or before anything reads;
        ``at_once``: now, after the ends that wait (a canary's run: its guard acts on it
        before the run is answered)."""
        self._waiting.append((apply, args))
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # no loop to apply it later
            loop = None
        if at_once or not self.batched or loop is None or len(self._waiting) >= MOST_WAITING:
            self.settle()
        elif self._due_on is not loop:  # none due, or due on a loop now gone
            self._due_on = loop
            loop.call_later(self.after, self._due)

    def __len__(self) -> int:
        return len(self._waiting)

    def _due(self) -> None:
        self._due_on = None
        self.settle()

    def settle(self) -> None:
        """Apply every run end that waits; one that fails is logged, the rest applied.
        Called from another thread (an exporter of the process's own), it asks the loop
        the ends came from to apply them: the stores they write are the loop's."""
        loop = self._due_on
        if self._waiting and loop is not None and loop.is_running():
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is not loop:  # that loop runs in another thread
                loop.call_soon_threadsafe(self.settle)
                return
        while self._waiting:
            waiting, self._waiting = self._waiting, []
            for apply, args in waiting:
                try:
                    apply(*args)
                except Exception:
                    logger.exception("a finished run's bookkeeping failed")
