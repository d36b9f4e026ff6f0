"""The canary's checks against its stable version, each *pass*, *fail* or *inconclusive*.

- ``error_rate_check``: a sequential test on the difference of the error rates (the
  mixture SPRT); its false-alarm rate stays below ``1 - confidence`` however often it is
  checked.
- ``latency_check``: a quantile of each variant's latencies, as an always-valid band
  from samples or from a Prometheus histogram's buckets, compared by ``max_ratio``.
- ``score_check``: mean scores (judge or feedback) with always-valid intervals: a floor
  for the canary's mean and the largest drop below the stable's.
- ``sample_ratio_check``: the share of routed traffic the canary received against its
  configured weight. A mismatch means routing is broken and every other comparison is
  void.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from dynagent.analysis._boundary import interval
from dynagent.analysis.distributions import Distribution, Moments

CheckVerdict = Literal["pass", "fail", "inconclusive"]

ERROR_TAU = 0.05
"""The error-rate difference (5 points) the sequential test is most sensitive to."""
SCORE_TAU = 0.1
RATIO_TAU = 0.05


@dataclass(frozen=True, slots=True)
class Check:
    """One check's outcome: its verdict, why, the figures and the interval it used."""

    name: str
    verdict: CheckVerdict
    reason: str
    figures: Mapping[str, Any] = field(default_factory=dict)
    interval: tuple[float, float] | None = None

    def as_dict(self) -> dict[str, Any]:
        shown = None if self.interval is None else [_round(v) for v in self.interval]
        return {
            "name": self.name,
            "verdict": self.verdict,
            "reason": self.reason,
            "figures": {k: _round(v) for k, v in self.figures.items()},
            "interval": shown,
        }


def _round(value: Any) -> Any:
    """A figure as the status shows it; an unbounded end (a latency band with too few slow
    samples reaches infinity) is None: JSON has no infinity, and the live feed's
    ``Infinity`` would be a parse error in every browser watching."""
    if not isinstance(value, float):
        return value
    return round(value, 6) if math.isfinite(value) else None


def error_rate_check(
    stable: tuple[int, int],
    canary: tuple[int, int],
    *,
    confidence: float = 0.95,
    max_increase: float = 0.02,
    min_requests: int = 20,
    tau: float = ERROR_TAU,
) -> Check:
    """``stable``/``canary``: (requests, errors). *fail* when the canary's error rate is
    higher than the stable's beyond doubt; *pass* when it is at most ``max_increase``
    higher beyond doubt; else *inconclusive*."""
    (n_s, e_s), (n_c, e_c) = stable, canary
    figures: dict[str, Any] = {"stable_requests": n_s, "stable_errors": e_s}
    figures |= {"canary_requests": n_c, "canary_errors": e_c}
    if min(n_s, n_c) < min_requests:
        reason = f"too few requests: {n_c} canary, {n_s} stable (needs {min_requests} each)"
        return Check("error_rate", "inconclusive", reason, figures)
    rate_s, rate_c = e_s / n_s, e_c / n_c
    # Half an error and one request added to each side keep the variance above zero
    # while neither variant has failed yet.
    smooth_s, smooth_c = (e_s + 0.5) / (n_s + 1), (e_c + 0.5) / (n_c + 1)
    variance = smooth_s * (1 - smooth_s) / n_s + smooth_c * (1 - smooth_c) / n_c
    low, high = interval(rate_c - rate_s, variance, tau, 1 - confidence)
    figures |= {"stable_rate": rate_s, "canary_rate": rate_c}
    said = f"canary {rate_c:.2%} vs stable {rate_s:.2%}, difference in [{low:+.2%}, {high:+.2%}]"
    if low > 0:
        return Check("error_rate", "fail", f"error rate higher: {said}", figures, (low, high))
    if high <= max_increase:
        return Check("error_rate", "pass", said, figures, (low, high))
    more = f"{said}; not yet within +{max_increase:.2%}"
    return Check("error_rate", "inconclusive", more, figures, (low, high))


def latency_check(
    stable: Distribution,
    canary: Distribution,
    *,
    quantile: float = 0.95,
    max_ratio: float = 1.5,
    floor_ms: float = 50.0,
    confidence: float = 0.95,
    min_requests: int = 20,
) -> Check:
    """The ``quantile`` of the canary's latencies against ``max_ratio`` times the
    stable's (at least ``floor_ms``): *fail* when the canary's band lies above that
    limit, *pass* when it lies below, else *inconclusive*."""
    name = f"latency_p{round(quantile * 100):d}"
    figures: dict[str, Any] = {"stable_requests": stable.count, "canary_requests": canary.count}
    if min(stable.count, canary.count) < min_requests:
        reason = f"too few requests: {canary.count} canary, {stable.count} stable"
        return Check(name, "inconclusive", reason, figures)
    alpha = (1 - confidence) / 2  # two bands, one risk
    s_low, s_high = stable.quantile_band(quantile, alpha)
    c_low, c_high = canary.quantile_band(quantile, alpha)
    floor = floor_ms / 1000
    figures |= {
        "stable_ms": _ms(stable.quantile(quantile)),
        "canary_ms": _ms(canary.quantile(quantile)),
    }
    band = f"canary p{round(quantile * 100)} in [{_ms(c_low)}, {_ms(c_high)}] ms"
    if c_low > max_ratio * max(s_high, floor):
        limit = _ms(max_ratio * max(s_high, floor))
        reason = f"{band}, above {max_ratio:g}x the stable's ({limit} ms)"
        return Check(name, "fail", reason, figures, (c_low, c_high))
    limit_ms = _ms(max_ratio * max(s_low, floor))
    if c_high <= max_ratio * max(s_low, floor):
        return Check(name, "pass", f"{band}, within {limit_ms} ms", figures, (c_low, c_high))
    reason = f"{band}, not yet within {limit_ms} ms"
    return Check(name, "inconclusive", reason, figures, (c_low, c_high))


def _ms(seconds: float | None) -> float | None:
    if seconds is None or seconds == float("inf"):
        return None
    return round(seconds * 1000, 1)


def score_check(
    stable: Moments,
    canary: Moments,
    *,
    min_score: float | None = None,
    max_drop: float | None = None,
    confidence: float = 0.95,
    min_scores: int = 10,
    tau: float = SCORE_TAU,
) -> Check:
    """Mean scores in 0..1: *fail* when the canary's mean is below ``min_score`` or more
    than ``max_drop`` below the stable's beyond doubt; *pass* when each configured bound
    holds beyond doubt; else *inconclusive*."""
    figures: dict[str, Any] = {"stable_scores": stable.count, "canary_scores": canary.count}
    if canary.count < min_scores or (max_drop is not None and stable.count < min_scores):
        reason = f"too few scores: {canary.count} canary, {stable.count} stable"
        return Check("score", "inconclusive", reason, figures)
    figures |= {"stable_mean": stable.mean, "canary_mean": canary.mean}
    alpha = (1 - confidence) / (2 if min_score is not None and max_drop is not None else 1)
    verdicts: list[tuple[CheckVerdict, str, tuple[float, float]]] = []
    if min_score is not None:
        low, high = interval(canary.mean, canary.variance / canary.count, tau, alpha)
        said = f"canary mean {canary.mean:.3f} in [{low:.3f}, {high:.3f}] vs floor {min_score:g}"
        verdict: CheckVerdict = (
            "fail" if high < min_score else "pass" if low >= min_score else "inconclusive"
        )
        verdicts.append((verdict, said, (low, high)))
    if max_drop is not None:
        variance = canary.variance / canary.count + stable.variance / stable.count
        low, high = interval(canary.mean - stable.mean, variance, tau, alpha)
        said = f"canary - stable mean in [{low:+.3f}, {high:+.3f}] vs allowed drop {max_drop:g}"
        verdict = "fail" if high < -max_drop else "pass" if low >= -max_drop else "inconclusive"
        verdicts.append((verdict, said, (low, high)))
    return _combined("score", verdicts, figures)


def _combined(
    name: str,
    verdicts: list[tuple[CheckVerdict, str, tuple[float, float]]],
    figures: dict[str, Any],
) -> Check:
    if not verdicts:
        return Check(name, "pass", "no bound configured", figures)
    for wanted in ("fail", "inconclusive"):
        for verdict, said, band in verdicts:
            if verdict == wanted:
                return Check(name, verdict, said, figures, band)
    return Check(name, "pass", "; ".join(s for _, s, _ in verdicts), figures, verdicts[0][2])


def sample_ratio_check(
    stable_routed: int,
    canary_routed: int,
    weight: float,
    *,
    confidence: float = 0.999,
    min_requests: int = 100,
    tau: float = RATIO_TAU,
) -> Check:
    """The canary's share of the requests the router chose for (``weight``: percent)
    against that weight: *fail* on a mismatch beyond doubt (routing is broken), else
    *pass* once ``min_requests`` were routed."""
    total = stable_routed + canary_routed
    expected = weight / 100
    figures: dict[str, Any] = {"routed": total, "canary_routed": canary_routed, "weight": weight}
    if total < min_requests or expected <= 0 or expected >= 1:
        reason = f"{total} routed requests (needs {min_requests})"
        verdict: CheckVerdict = "inconclusive" if total < min_requests else "pass"
        return Check("sample_ratio", verdict, reason, figures)
    share = canary_routed / total
    variance = expected * (1 - expected) / total
    low, high = interval(share - expected, variance, tau, 1 - confidence)
    figures["canary_share"] = share
    said = f"canary got {share:.2%} of {total} routed requests, configured {expected:.2%}"
    if low > 0 or high < 0:
        return Check("sample_ratio", "fail", f"sample ratio mismatch: {said}", figures, (low, high))
    return Check("sample_ratio", "pass", said, figures, (low, high))
