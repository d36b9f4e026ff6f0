"""Latency figures: median and tail percentiles of a list of samples."""

from __future__ import annotations

import math
import statistics


def percentile(ordered: list[float], fraction: float) -> float:
    """Nearest-rank percentile of already sorted samples (``fraction`` in 0..1)."""
    if not ordered:
        return math.nan
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def summary(samples: list[float], digits: int = 3) -> dict[str, float]:
    """``n``, median, p95, p99, mean, min and max of ``samples``."""
    ordered = sorted(samples)
    if not ordered:
        return {"n": 0}
    return {
        "n": len(ordered),
        "median": round(statistics.median(ordered), digits),
        "p95": round(percentile(ordered, 0.95), digits),
        "p99": round(percentile(ordered, 0.99), digits),
        "mean": round(statistics.fmean(ordered), digits),
        "min": round(ordered[0], digits),
        "max": round(ordered[-1], digits),
    }


def ratio(ours: float, theirs: float) -> float:
    return round(ours / theirs, 3) if theirs else math.nan
