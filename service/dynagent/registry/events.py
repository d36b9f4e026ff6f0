"""What the registry tells its listeners: one frozen event per kind of change.

Listeners match on the class (``isinstance`` or ``match``); ``kind`` is the short name
the metrics label each change with (``dynagent_reloads_total{result=...}``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from dynagent.registry.entry import LastError


@dataclass(frozen=True, slots=True)
class AgentSwapped:
    """A new revision serves as stable (``previous``: the one it replaced, if any)."""

    kind: ClassVar[str] = "swapped"
    name: str
    revision: str
    previous: str | None


@dataclass(frozen=True, slots=True)
class AgentRefused:
    """A definition did not build; the version serving before (if any) stays."""

    kind: ClassVar[str] = "refused"
    name: str
    error: LastError


@dataclass(frozen=True, slots=True)
class AgentRemoved:
    """The name no longer routes; ``reason`` is what its 404 says (may be empty)."""

    kind: ClassVar[str] = "removed"
    name: str
    reason: str


@dataclass(frozen=True, slots=True)
class CanaryStarted:
    """A canary revision (new, or rebuilt as another revision) takes ``weight`` % of traffic."""

    kind: ClassVar[str] = "canary"
    name: str
    revision: str
    weight: float


@dataclass(frozen=True, slots=True)
class CanaryWeightChanged:
    """The same canary revision at a new weight (an edit, or a progressive step)."""

    kind: ClassVar[str] = "canary_weight"
    name: str
    revision: str
    weight: float
    previous: float


@dataclass(frozen=True, slots=True)
class CanaryPaused:
    """The canary's document paused it (``rollout.paused``)."""

    kind: ClassVar[str] = "canary_paused"
    name: str
    revision: str
    reason: str
    by: str


@dataclass(frozen=True, slots=True)
class CanaryResumed:
    """A paused or pulled canary is back in traffic."""

    kind: ClassVar[str] = "canary_resumed"
    name: str
    revision: str


@dataclass(frozen=True, slots=True)
class CanaryRemoved:
    """The canary ended; the stable version takes all traffic."""

    kind: ClassVar[str] = "canary_removed"
    name: str
    revision: str


@dataclass(frozen=True, slots=True)
class CanaryPulled:
    """This replica's guard took the canary out of traffic."""

    kind: ClassVar[str] = "canary_pulled"
    name: str
    revision: str
    reason: str


RegistryEvent = (
    AgentSwapped
    | AgentRefused
    | AgentRemoved
    | CanaryStarted
    | CanaryWeightChanged
    | CanaryPaused
    | CanaryResumed
    | CanaryRemoved
    | CanaryPulled
)

Listener = Callable[[RegistryEvent], None]
