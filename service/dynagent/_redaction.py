"""Masking a run's events before anything else sees them, off the event loop when big.

Redactors (``pii_redaction``) run on every text of every event. On a 1 MB text full
of matches that is far more than the 50 ms the event loop may be held at a time, so
an event carrying more than ``INLINE_CHARS`` of text is masked on a worker thread;
events are still delivered in the order they were emitted (issue 11).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .events import Event, JsonValue

if TYPE_CHECKING:  # the interceptors package imports this module's INLINE_CHARS
    from .interceptors.base import RunContext

INLINE_CHARS = 8_192
"""Texts up to this size are masked inline (well under a millisecond of RE2 work each)."""

_TEXT_FIELDS = ("input", "content", "arguments", "tool_calls", "output", "message", "text")


def redacted(event: Event, redact: Callable[[str], str]) -> Event:
    changes: dict[str, Any] = {}
    for name in _TEXT_FIELDS:
        value = getattr(event, name, None)
        if value is not None:
            changes[name] = _redact_value(value, redact)
    return dataclasses.replace(event, **changes) if changes else event


def _redact_value(value: JsonValue, redact: Callable[[str], str]) -> JsonValue:
    """Mask the strings (and numbers) inside a JSON value, keeping its structure:
    masking its serialized text could turn ``12345678`` into unparseable ``[PHONE]``."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [_redact_value(item, redact) for item in value]
    if isinstance(value, dict):
        return {key: _redact_value(item, redact) for key, item in value.items()}
    if isinstance(value, int | float) and not isinstance(value, bool):
        masked = redact(str(value))
        return value if masked == str(value) else masked
    return value


def text_size(value: Any, limit: int = INLINE_CHARS) -> int:
    """Characters of text in ``value``, counted up to a little past ``limit``."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list | tuple | dict):
        total = 0
        for item in value.values() if isinstance(value, dict) else value:
            total += text_size(item, limit - total)
            if total > limit:
                break
        return total
    return 0


def _event_size(event: Event) -> int:
    return text_size([getattr(event, name, None) for name in _TEXT_FIELDS])


class RedactingEmitter:
    """``ctx.emit`` of a run with redactors: masks each event, then hands it to ``sink``."""

    def __init__(self, ctx: RunContext, sink: Callable[[Event], None]) -> None:
        self._ctx = ctx
        self._sink = sink
        self._pending: deque[Event] = deque()
        self._task: asyncio.Task[None] | None = None

    def __call__(self, event: Event) -> None:
        if not self._ctx.redactors:
            self._sink(event)
        elif not self._pending and _event_size(event) <= INLINE_CHARS:
            self._sink(redacted(event, self._ctx.redact))
        else:
            self._pending.append(event)
            if self._task is None:
                self._task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        try:
            while self._pending:
                event = self._pending[0]
                if _event_size(event) > INLINE_CHARS:
                    masked = await asyncio.to_thread(redacted, event, self._ctx.redact)
                else:
                    masked = redacted(event, self._ctx.redact)
                self._pending.popleft()
                self._sink(masked)
        finally:
            self._task = None

    async def flush(self) -> None:
        """Wait until every event emitted so far has reached the sink."""
        while self._task is not None:
            await asyncio.shield(self._task)
