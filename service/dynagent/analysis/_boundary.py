"""Always-valid intervals: the normal-mixture confidence sequence.

For an estimate ``d`` with variance ``v`` (a difference of means, or one mean minus its
expected value), the mixture sequential probability ratio test of Johari, Pekelis and
Walsh ("Always valid inference", 2017) with a normal mixing distribution of variance
``tau**2`` rejects ``d == 0`` at level ``alpha`` exactly when zero is outside

    d ± sqrt(v (v + tau²) / tau² · (ln((v + tau²) / v) + 2 ln(1 / alpha)))

and that interval covers the true difference at every sample size at once with
probability at least ``1 - alpha`` (Robbins' normal mixture; Howard et al., "Time-uniform,
nonparametric, nonasymptotic confidence sequences", 2021). ``tau`` is the size of effect
the test is most sensitive to; any value keeps the guarantee.

The same boundary on a count of ``n`` Bernoulli(q) trials gives the ranks between which
the q-quantile of ``n`` samples lies (``rank_band``).
"""

from __future__ import annotations

import math


def half_width(variance: float, tau: float, alpha: float) -> float:
    """Half the width of the always-valid interval of an estimate with this variance."""
    if variance <= 0:
        return 0.0
    tau2 = tau * tau
    spread = variance * (variance + tau2) / tau2
    return math.sqrt(spread * (math.log((variance + tau2) / variance) + 2 * math.log(1 / alpha)))


def interval(estimate: float, variance: float, tau: float, alpha: float) -> tuple[float, float]:
    width = half_width(variance, tau, alpha)
    return estimate - width, estimate + width


def rank_band(n: int, q: float, alpha: float, rho: float = 10.0) -> tuple[int, int]:
    """0-based ranks ``(low, high)`` of ``n`` sorted samples between which the q-quantile
    lies at every ``n`` at once with probability ``1 - alpha``: the normal-mixture
    boundary on the count of samples below the quantile (``rho``: the intrinsic time at
    which the boundary is tightest, in units of ``q (1 - q)`` trials)."""
    variance = n * q * (1 - q)
    boundary = math.sqrt(
        (variance + rho) * (math.log((variance + rho) / rho) + 2 * math.log(1 / alpha))
    )
    centre = n * q
    return math.floor(centre - boundary), math.ceil(centre + boundary)
