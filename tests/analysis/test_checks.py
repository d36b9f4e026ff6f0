"""The rollout analysis checks: three outcomes, figures in the reason, and false alarms
within the configured risk however often a check is made."""

from __future__ import annotations

import json
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynagent.analysis import error_rate_check, latency_check, sample_ratio_check, score_check
from dynagent.analysis.distributions import Buckets, Moments, Samples


def test_a_clearly_worse_error_rate_fails_with_its_figures() -> None:
    check = error_rate_check((2000, 40), (400, 40), confidence=0.95)

    assert check.verdict == "fail"
    assert "canary 10.00% vs stable 2.00%" in check.reason
    assert check.interval is not None and check.interval[0] > 0
    assert check.figures["canary_errors"] == 40


def test_an_equal_error_rate_passes_once_the_interval_is_inside_the_tolerance() -> None:
    early = error_rate_check((300, 6), (40, 1), max_increase=0.02)
    late = error_rate_check((40_000, 800), (5_000, 100), max_increase=0.02)

    assert early.verdict == "inconclusive"
    assert late.verdict == "pass"
    assert late.interval is not None and late.interval[1] <= 0.02


def test_too_few_requests_is_inconclusive_whatever_they_show() -> None:
    check = error_rate_check((1000, 0), (10, 10), min_requests=20)

    assert check.verdict == "inconclusive"
    assert "too few requests" in check.reason


@pytest.mark.parametrize("confidence", [0.9, 0.95])
def test_checking_after_every_request_keeps_false_alarms_below_the_risk(
    confidence: float,
) -> None:
    """200 rollouts of an equal canary, checked after each of its 1,000 requests."""
    alarms = 0
    for seed in range(200):
        rng = random.Random(seed)
        n_s = e_s = n_c = e_c = 0
        while n_c < 1000:
            if rng.random() < 0.2:
                n_c += 1
                e_c += rng.random() < 0.05
                if (
                    error_rate_check((n_s, e_s), (n_c, e_c), confidence=confidence).verdict
                    == "fail"
                ):
                    alarms += 1
                    break
            else:
                n_s += 1
                e_s += rng.random() < 0.05
    assert alarms / 200 <= 1 - confidence


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 10_000), st.integers(0, 10_000), st.integers(0, 10_000), st.integers(0, 10_000)
)
def test_any_counts_give_a_verdict_and_a_finite_interval(a: int, b: int, c: int, d: int) -> None:
    n_s, n_c = max(a, b), max(c, d)
    check = error_rate_check((n_s, min(a, b)), (n_c, min(c, d)))

    assert check.verdict in ("pass", "fail", "inconclusive")
    if check.interval is not None:
        assert all(math.isfinite(v) for v in check.interval)
        assert check.interval[0] <= check.interval[1]


def test_a_slower_canary_fails_on_samples_and_on_histogram_buckets() -> None:
    rng = random.Random(1)
    stable = [rng.uniform(0.05, 0.15) for _ in range(2000)]
    # Buckets resolve no finer than their bounds: slow enough to clear a bucket.
    slow = [rng.uniform(0.60, 0.90) for _ in range(400)]

    from_samples = latency_check(Samples(stable), Samples(slow), max_ratio=1.5)
    from_buckets = latency_check(_buckets(stable), _buckets(slow), max_ratio=1.5)

    assert from_samples.verdict == "fail"
    assert from_buckets.verdict == "fail"
    assert "above 1.5x" in from_buckets.reason


def test_an_equally_fast_canary_passes_and_a_short_one_is_inconclusive() -> None:
    rng = random.Random(2)
    stable = Samples(rng.uniform(0.05, 0.15) for _ in range(2000))
    same = Samples(rng.uniform(0.05, 0.15) for _ in range(500))
    few = Samples(rng.uniform(0.05, 0.15) for _ in range(30))

    assert latency_check(stable, same, max_ratio=1.5).verdict == "pass"
    assert latency_check(stable, few, max_ratio=1.5).verdict == "inconclusive"


def _buckets(values: list[float]) -> Buckets:
    bounds = [0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, math.inf]
    return Buckets([(b, float(sum(1 for v in values if v <= b))) for b in bounds])


def test_a_score_drop_beyond_the_allowed_one_fails_and_an_equal_one_passes() -> None:
    stable = Moments.of([0.8, 0.9] * 200)
    dropped = Moments.of([0.4, 0.5] * 100)
    equal = Moments.of([0.85] * 200)

    assert score_check(stable, dropped, max_drop=0.1).verdict == "fail"
    assert score_check(stable, equal, max_drop=0.1).verdict == "pass"
    assert score_check(stable, Moments.of([0.9] * 3), max_drop=0.1).verdict == "inconclusive"


def test_a_score_floor_fails_a_canary_below_it() -> None:
    check = score_check(Moments(0, 0.0), Moments.of([0.2, 0.3] * 50), min_score=0.7)

    assert check.verdict == "fail"
    assert "vs floor 0.7" in check.reason


def test_a_broken_split_fails_the_sample_ratio_check_and_a_sound_one_passes() -> None:
    broken = sample_ratio_check(stable_routed=9_500, canary_routed=500, weight=10)
    sound = sample_ratio_check(stable_routed=9_010, canary_routed=990, weight=10)

    assert broken.verdict == "fail"
    assert "sample ratio mismatch" in broken.reason
    assert sound.verdict == "pass"
    assert sample_ratio_check(50, 5, 10).verdict == "inconclusive"


@pytest.mark.parametrize("count", [4, 20, 30])
def test_a_checks_status_is_valid_json_even_when_its_band_is_unbounded(count: int) -> None:
    """Few latencies leave the top of the quantile band at infinity; the status (and the
    live feed that sends it with ``json.dumps``) shows no ``Infinity``, which no browser
    parses, but an open end (None)."""
    few = Samples([0.001 * (i + 1) for i in range(count)])
    check = latency_check(few, few, min_requests=1)
    assert check.interval is not None and check.interval[1] == math.inf
    shown = check.as_dict()
    json.dumps(shown, allow_nan=False)  # raises on an infinity or a NaN
    assert shown["interval"] == [round(check.interval[0], 6), None]
