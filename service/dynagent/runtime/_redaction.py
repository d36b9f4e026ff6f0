"""Delivering a run's events masked, off the event loop when they are big.

Redactors (``pii_redaction``) and the secret mask run on every text of every event. On
a 1 MB text full of matches that is far more than the 50 ms the event loop may be held
at a time, so an event carrying more than ``INLINE_CHARS`` of text is masked on a worker
thread; events are still delivered in the order they were emitted.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any

from dynagent.events import Event

INLINE_CHARS = 8_192
"""Texts up to this size are masked inline (well under a millisecond of RE2 work each)."""

TEXT_FIELDS = ("input", "content", "arguments", "tool_calls", "output", "message", "text")


_CONTAINERS = (list, tuple, dict)
_TEXTS = (str, list, tuple, dict)


def text_size(value: Any, limit: int = INLINE_CHARS) -> int:
    """Characters of text in ``value``, counted up to a little past ``limit``."""
    if isinstance(value, str):
        return len(value)
    if not isinstance(value, _CONTAINERS):
        return 0
    total = 0
    for item in value.values() if type(value) is dict else value:
        # The strings of a message list counted here, not in a call each.
        if type(item) is str:
            total += len(item)
        elif isinstance(item, _TEXTS):
            total += text_size(item, limit - total)
        if total > limit:
            break
    return total


_FIELDS_OF: dict[type, tuple[str, ...]] = {}
"""The text fields each slotted kind of event has: looked for once per kind, not per event."""


def event_text_size(event: object, limit: int = INLINE_CHARS) -> int:
    """Characters of text in the text fields of ``event``, counted up to a little past
    ``limit``. Every event of every run is counted, twice (here and for its trace)."""
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


def _event_size(event: Event) -> int:
    return event_text_size(event)


class RedactingEmitter:
    """Hands each event to ``sink`` as ``shown`` makes it (masked), in emission order;
    an event with more than ``INLINE_CHARS`` of text is masked on a worker thread."""

    def __init__(self, sink: Callable[[Event], None], shown: Callable[[Event], Event]) -> None:
        self._sink = sink
        self._shown = shown
        self._pending: deque[Event] = deque()
        self._task: asyncio.Task[None] | None = None

    def __call__(self, event: Event) -> None:
        if not self._pending and _event_size(event) <= INLINE_CHARS:
            self._sink(self._shown(event))
            return
        self._pending.append(event)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        try:
            while self._pending:
                event = self._pending[0]
                if _event_size(event) > INLINE_CHARS:
                    masked = await asyncio.to_thread(self._shown, event)
                else:
                    masked = self._shown(event)
                self._pending.popleft()
                self._sink(masked)
        finally:
            self._task = None

    async def flush(self) -> None:
        """Wait until every event emitted so far has reached the sink."""
        while self._task is not None:
            await asyncio.shield(self._task)
