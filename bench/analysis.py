"""What the rollout analysis decides, over many simulated rollouts fed through the real
checks: the sequential error-rate test (``dynagent.analysis.error_rate_check``, checked
after every canary request) beside the fixed-threshold guard
(``dynagent.registry.canary.guard_verdict`` over its window, checked every fifth canary
request) at each threshold; and the sample-ratio check on a sound and a broken split.

Each rollout sends requests at random: 10 % to the canary, the rest to the stable, both
failing 2 % of the time; a *bad* canary fails 7 % (5 points more). It ends at detection
or after ``HORIZON`` canary requests.

    .venv/bin/python -m bench.analysis            # 1,000 rollouts per case
    .venv/bin/python -m bench.analysis --quick    # 300
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from multidict import CIMultiDict, CIMultiDictProxy

from dynagent.analysis import error_rate_check, sample_ratio_check
from dynagent.registry.guard import GuardPolicy, VariantStats, guard_verdict
from dynagent.registry.targeting import compile_match

WEIGHT = 0.10
STABLE_ERRORS = 0.02
BAD_INCREASE = 0.05
HORIZON = 3000
CONFIDENCE = 0.95
FIXED_THRESHOLDS = (0.06, 0.08, 0.10, 0.12, 0.15, 0.20)
FIXED_EVERY = 5
"""The fixed guard reads its whole window on each check: checking every fifth request
keeps the bench short and can only lower its false alarms."""

Detector = Callable[[random.Random, float], int | None]


def sequential(rng: random.Random, canary_errors: float) -> int | None:
    """Canary requests until the sequential test fails the canary, or None."""
    n_s = e_s = n_c = e_c = 0
    while n_c < HORIZON:
        if rng.random() < WEIGHT:
            n_c += 1
            e_c += rng.random() < canary_errors
            check = error_rate_check((n_s, e_s), (n_c, e_c), confidence=CONFIDENCE)
            if check.verdict == "fail":
                return n_c
        else:
            n_s += 1
            e_s += rng.random() < STABLE_ERRORS
    return None


def fixed(threshold: float) -> Detector:
    policy = GuardPolicy(max_error_rate=threshold)

    def detect(rng: random.Random, canary_errors: float) -> int | None:
        stable, canary = VariantStats(policy.window), VariantStats(policy.window)
        while canary.requests < HORIZON:
            if rng.random() < WEIGHT:
                canary.record(rng.random() >= canary_errors, 0.1)
                due = canary.requests % FIXED_EVERY == 0
                if due and guard_verdict(policy, stable, canary) is not None:
                    return canary.requests
            else:
                stable.record(rng.random() >= STABLE_ERRORS, 0.1)
        return None

    return detect


def _rollouts(detect: Detector, rollouts: int) -> dict[str, Any]:
    equal = [detect(random.Random(i), STABLE_ERRORS) for i in range(rollouts)]
    bad_errors = STABLE_ERRORS + BAD_INCREASE
    bad = [detect(random.Random(1_000_000 + i), bad_errors) for i in range(rollouts)]
    # Missed detections count as never: the median is over every bad rollout.
    needed = sorted(x if x is not None else float("inf") for x in bad)
    median = statistics.median(needed)
    return {
        "false_alarm_rate": sum(x is not None for x in equal) / rollouts,
        "detection_rate": sum(x is not None for x in bad) / rollouts,
        "median_requests_to_detect": None if median == float("inf") else median,
    }


def _split(rollouts: int, observed_weight: float) -> float:
    """The share of rollouts the sample-ratio check fails within 5,000 routed requests,
    checked after every request, when the canary really gets ``observed_weight``."""
    failed = 0
    for i in range(rollouts):
        rng = random.Random(2_000_000 + i)
        canary = 0
        for total in range(1, 5001):
            canary += rng.random() < observed_weight
            if total % 10 == 0:
                check = sample_ratio_check(total - canary, canary, WEIGHT * 100)
                if check.verdict == "fail":
                    failed += 1
                    break
    return failed / rollouts


TARGETING = {
    "caller": 'caller == "staff"',
    "caller or header": 'caller == "staff" || headers["x-tenant"] == "acme"',
    "header present and equal": '"x-tenant" in headers && headers["x-tenant"] == "acme"',
    "variable": 'variables.tier == "gold"',
}


def _targeting(requests: int) -> dict[str, dict[str, float]]:
    """Microseconds per request of ``rollout.match`` over a request's attributes (twelve
    headers, as aiohttp hands them over): *distinct*, every request with values not seen
    before (the memo never helps), and *repeat*, 50 callers and tenants taking turns."""
    figures: dict[str, dict[str, float]] = {}
    for name, source in TARGETING.items():
        match = compile_match(source)
        distinct = [_attributes(i) for i in range(requests)]
        repeat = [_attributes(i % 50) for i in range(requests)]
        row = {}
        for label, batch in (("distinct", distinct), ("repeat", repeat)):
            best = float("inf")
            for _ in range(3):
                match = compile_match(source)  # a fresh memo each round
                started = time.perf_counter()
                for attributes in batch:
                    match.eligible(attributes)
                best = min(best, (time.perf_counter() - started) / len(batch) * 1e6)
            row[f"{label}_us"] = round(best, 2)
        figures[name] = row
    return figures


def _attributes(i: int) -> dict[str, Any]:
    headers = CIMultiDict(
        {
            "Host": "agents.example",
            "User-Agent": "bench/1.0",
            "Accept": "application/json",
            "Content-Type": "application/json",
            "Authorization": f"Bearer sk-{i:08d}",
            "X-Tenant": f"tenant-{i}",
            "X-Request-Id": f"req-{i}",
            "Traceparent": f"00-{i:032x}-{i:016x}-01",
            "Content-Length": "42",
            "Accept-Encoding": "gzip",
            "Connection": "keep-alive",
            "X-Team": "search",
        }
    )
    return {
        "caller": f"caller-{i}",
        "headers": CIMultiDictProxy(headers),
        "variables": {"tier": "gold" if i % 2 else "free", "company": "ACME"},
        "metadata": {},
        "user": "",
    }


def measure(rollouts: int) -> dict[str, Any]:
    started = time.perf_counter()
    ours = _rollouts(sequential, rollouts)
    guards = {f"{t:.0%}": _rollouts(fixed(t), rollouts) for t in FIXED_THRESHOLDS}
    # The fixed guard at equal false alarms: the most sensitive threshold whose false
    # alarms are no more than the sequential test's.
    fair = [
        name for name, row in guards.items() if row["false_alarm_rate"] <= ours["false_alarm_rate"]
    ]
    split_rollouts = max(100, rollouts // 5)
    return {
        "rollouts": rollouts,
        "horizon": HORIZON,
        "sequential": ours,
        "fixed_guard": guards,
        "fixed_at_equal_false_alarms": fair[0] if fair else None,
        "sample_ratio": {
            "false_alarm_rate": _split(split_rollouts, WEIGHT),
            "detection_rate_at_7_percent": _split(split_rollouts, 0.07),
            "rollouts": split_rollouts,
        },
        "targeting_us_per_request": _targeting(2000 if rollouts < 1000 else 20_000),
        "seconds": round(time.perf_counter() - started, 1),
    }


def table(figures: dict[str, Any]) -> str:
    def row(name: str, r: dict[str, Any]) -> str:
        median = r["median_requests_to_detect"]
        shown = "never" if median is None else f"{median:.0f}"
        return f"{name:<28} {r['false_alarm_rate']:>11.1%} {r['detection_rate']:>10.1%} {shown:>16}"

    lines = [
        f"{figures['rollouts']} rollouts per case, {figures['horizon']} canary requests at most",
        f"{'detector':<28} {'false alarm':>11} {'detection':>10} {'median requests':>16}",
        row(f"sequential (confidence {CONFIDENCE:g})", figures["sequential"]),
    ]
    fair = figures["fixed_at_equal_false_alarms"]
    for name, r in figures["fixed_guard"].items():
        mark = "  <- equal false alarms" if name == fair else ""
        lines.append(row(f"fixed guard, max {name}", r) + mark)
    ratio = figures["sample_ratio"]
    lines.append(
        f"sample ratio (10 % configured): false alarms {ratio['false_alarm_rate']:.1%}, "
        f"a 7 % split caught {ratio['detection_rate_at_7_percent']:.1%} "
        f"({ratio['rollouts']} rollouts each)"
    )
    lines.append("rollout.match, microseconds per request (bar 5):")
    for name, cost in figures["targeting_us_per_request"].items():
        lines.append(
            f"  {name:<26} distinct {cost['distinct_us']:>6.2f}   repeat {cost['repeat_us']:>6.2f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="300 rollouts per case")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    figures = measure(300 if args.quick else 1000)
    print(json.dumps(figures, indent=2) if args.json else table(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
