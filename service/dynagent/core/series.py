"""The last 15 minutes of each agent's traffic, per variant, for the operations page's
sparklines and canary split.

Each run adds to one fixed slot of a ring (O(1), no allocation once the ring exists),
so keeping the figures costs the service nothing measurable whether or not anyone
looks at them; reading them walks at most ``SLOTS`` slots.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

STEP = 30
"""Seconds per slot."""
SLOTS = 30
"""Slots kept: 30 x 30 s = the last 15 minutes."""


class _Ring:
    __slots__ = ("errors", "requests", "seconds", "slots", "total")

    def __init__(self) -> None:
        self.slots = [-1] * SLOTS
        self.requests = [0] * SLOTS
        self.errors = [0] * SLOTS
        self.seconds = [0.0] * SLOTS
        self.total = 0
        """Runs ever recorded: tells a reader whether anything changed since it looked."""

    def add(self, slot: int, seconds: float, failed: bool) -> None:
        i = slot % SLOTS
        if self.slots[i] != slot:
            self.slots[i] = slot
            self.requests[i] = self.errors[i] = 0
            self.seconds[i] = 0.0
        self.requests[i] += 1
        self.errors[i] += failed
        self.seconds[i] += seconds
        self.total += 1

    def window(self, last: int) -> dict[str, list[Any]]:
        requests, errors, mean_ms = [], [], []
        for slot in range(last - SLOTS + 1, last + 1):
            i = slot % SLOTS
            live = self.slots[i] == slot
            count = self.requests[i] if live else 0
            requests.append(count)
            errors.append(self.errors[i] if live else 0)
            mean_ms.append(round(self.seconds[i] / count * 1000, 1) if count else None)
        return {"requests": requests, "errors": errors, "mean_ms": mean_ms}


class RecentSeries:
    """Requests, errors and mean latency per ``STEP`` seconds, per agent and variant."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._rings: dict[tuple[str, str], _Ring] = {}

    def record(self, agent: str, variant: str, seconds: float, failed: bool) -> None:
        ring = self._rings.get((agent, variant))
        if ring is None:
            ring = self._rings[(agent, variant)] = _Ring()
        ring.add(int(self._clock() // STEP), seconds, failed)

    def forget(self, agent: str) -> None:
        for variant in ("stable", "canary"):
            self._rings.pop((agent, variant), None)

    def version(self, agent: str) -> int:
        """Runs recorded for ``agent``: equal numbers mean nothing new to show."""
        return sum(ring.total for (name, _), ring in self._items(agent))

    def of(self, agent: str) -> dict[str, Any]:
        """``{"step", "end", "variants": {variant: {requests, errors, mean_ms}}}``,
        oldest slot first; ``end`` is when the newest slot ends (Unix time)."""
        last = int(self._clock() // STEP)
        variants = {variant: ring.window(last) for (_, variant), ring in self._items(agent)}
        return {"step": STEP, "end": (last + 1) * STEP, "variants": variants}

    def _items(self, agent: str) -> list[tuple[tuple[str, str], _Ring]]:
        found = (((agent, v), self._rings.get((agent, v))) for v in ("stable", "canary"))
        return [(key, ring) for key, ring in found if ring is not None]
