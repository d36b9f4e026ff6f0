"""Counter and histogram families that every run adds to, as plain numbers.

``prometheus_client``'s ``Counter`` and ``Histogram`` take a lock on every increment (their
values may be changed from any thread), check that the series is observable, and look the
bucket of an observation up in a Python loop: about a microsecond per call, and a run's end
makes eleven of them. The service changes these series on its event loop only, so here an
increment is an addition to a slot and an observation a ``bisect``. A scrape (from any
thread) reads a copy of the children: a series added meanwhile is in the next scrape.

The families write what ``prometheus_client``'s own would: ``_total`` and ``_created`` for
a counter; cumulative ``_bucket`` samples with ``le``, ``_count``, ``_sum`` and ``_created``
for a histogram (``tests/core/test_tallies.py`` holds the text to theirs).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import INF, floatToGoString


class Tally:
    """One counter series."""

    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount


class Spread:
    """One histogram series: observations counted in the first bucket whose bound is at
    least the value (the last bound is +Inf), and summed."""

    __slots__ = ("_bounds", "counts", "created", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self.counts = [0] * len(bounds)
        self.sum = 0.0
        self.created = time.time()

    def observe(self, amount: float) -> None:
        self.sum += amount
        self.counts[bisect_left(self._bounds, amount)] += 1  # the last bound is +Inf


Child = TypeVar("Child", Tally, Spread)


class _Family(Collector, Generic[Child]):
    kind = ""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        *,
        registry: CollectorRegistry,
    ) -> None:
        self._name = name
        self._documentation = documentation
        self._labelnames = tuple(labelnames)
        self._children: dict[tuple[str, ...], Child] = {}
        registry.register(self)

    def remove(self, *values: str) -> None:
        """Drop the series of ``values`` (none: nothing happens)."""
        self._children.pop(values, None)

    def describe(self) -> Iterable[Metric]:
        """The family without samples: the registry refuses a second of the same name."""
        return [Metric(self._name, self._documentation, self.kind)]

    def collect(self) -> Iterable[Metric]:
        family = Metric(self._name, self._documentation, self.kind)
        for values, child in list(self._children.items()):  # a copy: one C call, atomic
            self._samples(family, dict(zip(self._labelnames, values, strict=True)), child)
        return [family]

    def _samples(self, family: Metric, labels: dict[str, str], child: Child) -> None:
        raise NotImplementedError


class Tallies(_Family[Tally]):
    """A counter family (``prometheus_client.Counter``'s samples)."""

    kind = "counter"

    def labels(self, *values: str) -> Tally:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = Tally()
        return child

    def _samples(self, family: Metric, labels: dict[str, str], child: Tally) -> None:
        family.add_sample(self._name + "_total", labels, child.value)
        family.add_sample(self._name + "_created", labels, child.created)


class Spreads(_Family[Spread]):
    """A histogram family (``prometheus_client.Histogram``'s samples)."""

    kind = "histogram"

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        *,
        buckets: Sequence[float],
        registry: CollectorRegistry,
    ) -> None:
        bounds = tuple(float(b) for b in buckets)
        if bounds != tuple(sorted(bounds)):
            raise ValueError("buckets are not in order")
        self._bounds = bounds if bounds and bounds[-1] == INF else (*bounds, INF)
        self._les = tuple(floatToGoString(b) for b in self._bounds)  # type: ignore[no-untyped-call]
        super().__init__(name, documentation, labelnames, registry=registry)

    def labels(self, *values: str) -> Spread:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = Spread(self._bounds)
        return child

    def _samples(self, family: Metric, labels: dict[str, str], child: Spread) -> None:
        total = 0
        for le, count in zip(self._les, list(child.counts), strict=True):
            total += count
            family.add_sample(self._name + "_bucket", {**labels, "le": le}, total)
        family.add_sample(self._name + "_count", labels, total)
        family.add_sample(self._name + "_sum", labels, child.sum)
        family.add_sample(self._name + "_created", labels, child.created)
