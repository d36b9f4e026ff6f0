"""The texts of a run's events, masked: PII redactors and the secret mask applied to
every text field of an event before anyone sees it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from types import MappingProxyType
from typing import Any, get_args

from dynagent.events import Event, JsonValue
from dynagent.interceptors.base import redact_with
from dynagent.runtime._loop import AgentInput


def input_summary(input: AgentInput) -> JsonValue:
    return input if isinstance(input, str) else [dict(m) for m in input]


_STRUCTURED = (str, list, dict)
_NUMBERS = (int, float)
"""Tuples, not ``X | Y``: a union written in a call is built on every call (200 ns)."""
_TEXT_FIELDS = ("input", "content", "arguments", "tool_calls", "output", "message", "text")


def redacted(event: Event, redactors: Sequence[Callable[[str], str]]) -> Event:
    """Every text of ``event`` through each of ``redactors`` in turn (a run's
    ``RunContext.redactors``, which its interceptors may add to while it runs)."""
    redact = partial(redact_with, redactors)
    changes: dict[str, Any] = {}
    for name in _TEXT_FIELDS:
        value = getattr(event, name, None)
        if value is not None:
            changes[name] = _redact_value(value, redact)
    return dataclasses.replace(event, **changes) if changes else event


def masked(event: Event, mask: Callable[[str], str]) -> Event:
    """Every text of ``event`` masked, its model name and error message included."""
    changes: dict[str, Any] = {}
    for name in _TEXT_OF[type(event)]:
        value = getattr(event, name)
        if type(value) is str:  # most texts: masked in one call
            masked: JsonValue = mask(value)
            if masked != value:
                changes[name] = masked
        elif isinstance(value, _STRUCTURED):
            masked = _redact_value(value, mask)
            if masked != value:
                changes[name] = masked
    return dataclasses.replace(event, **changes) if changes else event


_NOT_TEXT = frozenset(
    {"trace_id", "step", "at", "type", "usage", "duration_ms", "is_error", "messages"}
)
_PROTOCOL = frozenset({"error_type", "status", "variant"})
"""Fields whose values are words of the protocol (``forbidden``, ``ok``, ``canary``):
never masked, whatever a mask holds — a client reads them to decide what to do."""
_TEXT_OF: Mapping[type, tuple[str, ...]] = MappingProxyType(
    {
        kind: tuple(f.name for f in dataclasses.fields(kind) if f.name not in _NOT_TEXT | _PROTOCOL)
        for kind in get_args(Event)
    }
)
"""The fields of each event type that may hold text (not ids, times, counts or protocol
words)."""


def masked_value(value: JsonValue, mask: Callable[[str], str]) -> JsonValue:
    """A run's output (text or a JSON value) masked as its events are."""
    return _redact_value(value, mask)


def _redact_value(value: JsonValue, redact: Callable[[str], str]) -> JsonValue:
    """Mask the strings (and numbers) inside a JSON value, keeping its structure:
    masking its serialized text could turn ``12345678`` into unparseable ``[PHONE]``."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [_redact_value(item, redact) for item in value]
    if isinstance(value, dict):
        return {key: _redact_value(item, redact) for key, item in value.items()}
    if isinstance(value, _NUMBERS) and not isinstance(value, bool):
        masked = redact(str(value))
        return value if masked == str(value) else masked
    return value
