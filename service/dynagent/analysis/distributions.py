"""What the checks read: latencies (raw samples of one replica, or the buckets of a
fleet-wide Prometheus histogram) and score moments."""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from dynagent.analysis._boundary import rank_band


class Distribution(Protocol):
    @property
    def count(self) -> int: ...

    def quantile(self, q: float) -> float | None: ...

    def quantile_band(self, q: float, alpha: float) -> tuple[float, float]:
        """Seconds between which the q-quantile lies, always valid at level ``alpha``
        (``inf`` as the upper end when too few samples lie above it)."""
        ...


class Samples:
    """Latencies in seconds, as one replica saw them."""

    def __init__(self, values: Iterable[float]) -> None:
        self._sorted = sorted(values)

    @property
    def count(self) -> int:
        return len(self._sorted)

    def quantile(self, q: float) -> float | None:
        if not self._sorted:
            return None
        index = min(len(self._sorted) - 1, max(0, math.ceil(q * len(self._sorted)) - 1))
        return self._sorted[index]

    def quantile_band(self, q: float, alpha: float) -> tuple[float, float]:
        n = len(self._sorted)
        low, high = rank_band(n, q, alpha)
        lower = self._sorted[low] if 0 <= low < n else 0.0
        upper = self._sorted[high] if 0 <= high < n else math.inf
        return lower, upper


class Buckets:
    """A cumulative histogram (Prometheus ``le`` bounds in seconds, counts at or below
    each, the last bound ``inf``), summed over the fleet."""

    def __init__(self, buckets: Sequence[tuple[float, float]]) -> None:
        ordered = sorted(buckets)
        self._bounds = [bound for bound, _ in ordered]
        self._counts = [count for _, count in ordered]

    @property
    def count(self) -> int:
        return int(self._counts[-1]) if self._counts else 0

    def _bucket(self, rank: float) -> int:
        """The index of the bucket holding the sample of this 0-based rank."""
        return min(len(self._counts) - 1, bisect.bisect_right(self._counts, rank))

    def quantile(self, q: float) -> float | None:
        if not self.count:
            return None
        index = self._bucket(q * self.count)
        return self._bounds[index]

    def quantile_band(self, q: float, alpha: float) -> tuple[float, float]:
        n = self.count
        low, high = rank_band(n, q, alpha)
        if low < 0:
            lower = 0.0
        else:  # the sample of rank ``low`` is above the bound of the bucket before its own
            index = self._bucket(low)
            lower = self._bounds[index - 1] if index > 0 else 0.0
        upper = math.inf if high >= n else self._bounds[self._bucket(high)]
        return lower, upper


@dataclass(frozen=True, slots=True)
class Moments:
    """Scores in 0..1: how many, their mean and variance (the bound 0.25 when only the
    sum and count are known, as from a Prometheus histogram)."""

    count: int
    mean: float
    variance: float = 0.25
    source: str = "totals"
    """``window``: a recent window (no deltas are taken of it); ``totals``: running."""

    @classmethod
    def of(cls, scores: Iterable[float]) -> Moments:
        values = list(scores)
        if not values:
            return cls(0, 0.0)
        mean = sum(values) / len(values)
        spread = sum((v - mean) ** 2 for v in values) / max(1, len(values) - 1)
        # A handful of equal scores says little about the spread: never below a floor.
        return cls(len(values), mean, max(spread, 0.01))
