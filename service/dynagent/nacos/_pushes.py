"""What the Nacos source's pump works through: one typed item per change a push brings."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Pushed:
    """The SDK pushed new content of a dataId this source listens to."""

    data_id: str
    content: str


@dataclass(frozen=True, slots=True)
class Deleted:
    """A dataId was deleted (an empty push, or a fuzzy-watch notice); the pump confirms it
    with a read, since a failed read looks the same."""

    data_id: str


@dataclass(frozen=True, slots=True)
class Announced:
    """The fuzzy watch announced a dataId not listened to yet (new or changed): read it."""

    data_id: str


Push = Pushed | Deleted | Announced
"""An item of the source's queue, handed over by a callback that must not block."""
