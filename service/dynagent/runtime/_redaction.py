"""Delivering a run's events masked, off the event loop when they are big, each with its
size for the trace counted once.

Redactors (``pii_redaction``) and the secret mask run on every text of every event. On
a 1 MB text full of matches that is far more than the 50 ms the event loop may be held
at a time, so an event carrying more than ``INLINE_CHARS`` of text is masked on a worker
thread; events are still delivered in the order they were emitted.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable

from dynagent.events import WHOLE, Event, counted_size, keep_size, text_size

INLINE_CHARS = 8_192
"""Texts up to this size are masked inline (well under a millisecond of RE2 work each)."""

EVENT_BYTES = 200
"""What an event holds in a trace beside its text, about."""
TEXT_FIELDS = ("input", "content", "arguments", "tool_calls", "output", "message", "text")


_FIELDS_OF: dict[type, tuple[str, ...]] = {}
"""The text fields each slotted kind of event has: looked for once per kind, not per event."""


def event_text_size(event: object, limit: int = INLINE_CHARS) -> int:
    """Characters of text in the text fields of ``event``, counted up to a little past
    ``limit``. Every event of every run is counted once, where it is masked; its trace
    reads that count (``trace_bytes``) unless masking changed the event."""
    kind = type(event)
    names = _FIELDS_OF.get(kind)
    if names is None:
        names = tuple(name for name in TEXT_FIELDS if hasattr(event, name))
        if hasattr(kind, "__slots__"):  # every instance has the same fields
            _FIELDS_OF[kind] = names
    total = 0
    for name in names:
        value = getattr(event, name)
        total += len(value) if type(value) is str else text_size(value, limit - total)
        if total > limit:
            break
    return total


def trace_bytes(events: Iterable[Event]) -> int:
    """About how many bytes ``events`` hold in a trace: their text, plus a little each.
    Each event's text is counted where it was masked (``RedactingEmitter``) when it went
    through one, else here. Every event of every run is counted: one loop."""
    total = 0
    for event in events:
        size = counted_size(event)
        total += EVENT_BYTES + (size if size >= 0 else event_text_size(event, limit=WHOLE))
    return total


def _shown_sized(shown: Callable[[Event], Event], event: Event) -> Event:
    """``shown(event)``, its size counted whole: for a long text, on the worker thread."""
    masked = shown(event)
    keep_size(masked, event_text_size(masked, limit=WHOLE))
    return masked


class RedactingEmitter:
    """Hands each event to ``sink`` as ``shown`` makes it (masked), in emission order;
    an event with more than ``INLINE_CHARS`` of text is masked on a worker thread. Each
    event's text is counted once, and the count kept with it for its trace. Every event
    of every run passes here: it is written flat."""

    def __init__(self, sink: Callable[[Event], None], shown: Callable[[Event], Event]) -> None:
        self._sink = sink
        self._shown = shown
        self._pending: deque[tuple[Event, int]] = deque()
        self._task: asyncio.Task[None] | None = None

    def __call__(self, event: Event) -> None:
        if self._pending:  # after the ones waiting for a worker thread, counted there
            self._pending.append((event, -1))
            return
        size = event_text_size(event)
        if size <= INLINE_CHARS:
            self._sink(self._inline(event, size))
            return
        self._pending.append((event, size))
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._drain())

    def _inline(self, event: Event, size: int) -> Event:
        """``event`` masked here; its count (whole, at most ``INLINE_CHARS``) kept for
        its trace unless masking made it another event."""
        shown = self._shown(event)
        if shown is event:
            keep_size(event, size)
        return shown

    async def _drain(self) -> None:
        try:
            while self._pending:
                event, size = self._pending[0]
                if size < 0:
                    size = event_text_size(event)
                if size > INLINE_CHARS:
                    masked = await asyncio.to_thread(_shown_sized, self._shown, event)
                else:
                    masked = self._inline(event, size)
                self._pending.popleft()
                self._sink(masked)
        finally:
            self._task = None

    @property
    def masking(self) -> bool:
        """Whether events wait for a worker thread (``flush`` has something to wait for)."""
        return self._task is not None

    async def flush(self) -> None:
        """Wait until every event emitted so far has reached the sink."""
        while self._task is not None:
            await asyncio.shield(self._task)
