"""Whether the registry is ready, which sources are degraded, and how to hear of changes.

``Changes`` is shared by the registry's parts: each change bumps its counter (what
pollers compare and waiters wake on) and may tell the listeners a typed event.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from dynagent.registry.events import Listener, RegistryEvent


@dataclass
class Changes:
    """A change counter, an event waiters park on, and the listeners told of each change."""

    count: int = 0
    """Bumped on every swap, error, addition, removal, guard action and source health change."""
    listeners: list[Listener] = field(default_factory=list)
    """Called with every ``RegistryEvent``, in the order they subscribed."""
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def bump(self) -> None:
        self.count += 1
        # Wake every waiter without awaiting: the swap itself never yields.
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def tell(self, event: RegistryEvent) -> None:
        for listener in self.listeners:
            listener(event)

    async def wait_for(self, predicate: Callable[[], bool], within: float = 10.0) -> None:
        """Wait until ``predicate()`` holds, re-checked on every change."""
        async with asyncio.timeout(within):
            while not predicate():
                await self._changed.wait()


@dataclass
class Readiness:
    """Whether every source has loaded, and which serve from a fallback."""

    changes: Changes
    ready: bool = False
    """True once every source has delivered its first full load."""
    degraded: dict[str, str] = field(default_factory=dict)
    """Sources serving from a fallback (e.g. a snapshot), and why."""
    stale_refused: dict[str, int] = field(default_factory=dict)
    """Per source: versions refused as older than the one served (a Nacos cluster node
    behind the others); no change of readiness, a count for the metrics."""

    def mark_ready(self) -> None:
        self.ready = True
        self.changes.bump()

    def refused_stale(self, source: str) -> None:
        """``source`` refused a version older than the one it serves."""
        self.stale_refused[source] = self.stale_refused.get(source, 0) + 1

    def set_degraded(self, source: str, reason: str | None) -> None:
        """Record why ``source`` serves from a fallback, or (``None``) that it is healthy."""
        if self.degraded.get(source) == reason:
            return
        if reason is None:
            del self.degraded[source]
        else:
            self.degraded[source] = reason
        self.changes.bump()
