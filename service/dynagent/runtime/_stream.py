"""How a streamed run's events reach the reader: a queue that wakes the reader once per
batch, and a gate that folds model deltas arriving within ``DELTA_WINDOW``."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from dynagent.events import Event, ModelDelta
from dynagent.interceptors.base import RunContext
from dynagent.masking import StreamMask
from dynagent.runtime._redaction import RedactingEmitter

DELTA_WINDOW = 0.01
"""Seconds between two text deltas handed to a stream's reader (``EventQueue``)."""


class EventQueue:
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
        # The loop is asked for only when it is needed: each ask is a system call
        # (``getpid``, which asyncio compares with the loop's), and most events are
        # taken from a queue that already holds them.
        if not self._items:
            loop = asyncio.get_running_loop()
            while not self._items:
                self._waiter = loop.create_future()
                await self._waiter
        event = self._items.popleft()
        if not isinstance(event, ModelDelta):
            return event
        loop = asyncio.get_running_loop()
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
class DeltaGate:
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


def unflushed(ctx: RunContext) -> RedactingEmitter | None:
    """The run's emitter while some of its events wait to be masked (``flush`` them before
    the run returns); None when all have reached their sink: no coroutine to await then,
    for every run."""
    emitter = ctx.emit.emit if isinstance(ctx.emit, DeltaGate) else ctx.emit
    if isinstance(emitter, RedactingEmitter) and emitter.masking:
        return emitter
    return None
