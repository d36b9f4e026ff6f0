"""Typed views of a run's events, for assertions."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from dynagent import Event

E = TypeVar("E")


def event_types(events: Iterable[Event]) -> list[str]:
    """The ``type`` of each event, in order: the shape of a run at a glance."""
    return [event.type for event in events]


def of_type(events: Iterable[Event], kind: type[E]) -> list[E]:
    """The events of one class, in order."""
    return [event for event in events if isinstance(event, kind)]


def one(events: Iterable[Event], kind: type[E]) -> E:
    """The single event of a class; fails when there are none or several."""
    found = of_type(events, kind)
    assert len(found) == 1, f"expected one {kind.__name__}, got {len(found)}"
    return found[0]
