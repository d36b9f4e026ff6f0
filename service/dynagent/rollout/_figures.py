"""The figures a canary analysis reads: from Prometheus (the fleet) or this replica.

Prometheus holds each replica's counters of the runs that are evidence about a version
(``dynagent_rollout_requests_total`` and ``dynagent_rollout_latency_seconds``, by agent,
revision, variant and source); summed over the fleet, minus their values when the analysis
began, they are the figures since then. The stable runs of callers ``rollout.match`` keeps
from the canary (source ``unmatched``) are left out, here as in a replica's own figures:
the canary is compared only with the stable serving the callers it may serve. A replica
that restarts takes its counts with it: the sum drops, and the analysis starts its count
again.

Each replica's series is read as its last value within ``LOOKBACK`` (``last_over_time``),
not as an instant vector: a scrape that fails (a replica stalled past the scrape timeout)
marks its series stale, and the plain sum would drop by that replica's counts, start the
count again without them and, once the replica is scraped again, add back everything it
ever counted. A restarted replica's counter is still read at its new, lower value.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from string import Template
from typing import Any

import aiohttp

from dynagent.analysis.distributions import Buckets, Distribution, Moments, Samples
from dynagent.registry.analysis_policy import PrometheusSource
from dynagent.registry.guard import VariantStats

VARIANTS = ("stable", "canary")
LOOKBACK = "1m"
"""How long a replica that is not scraped still counts with its last value."""
REQUESTS = (
    "sum by (variant, source, outcome, weight) (last_over_time(dynagent_rollout_requests_total"
    '{agent="$agent",revision=~"$revisions"}[' + LOOKBACK + "]))"
)
LATENCY = (
    "sum by (variant, le) (last_over_time(dynagent_rollout_latency_seconds_bucket"
    '{agent="$agent",revision=~"$revisions",source!="unmatched"}[' + LOOKBACK + "]))"
)
SCORES = (
    "label_replace(sum by (variant) (last_over_time(dynagent_judge_score_sum"
    '{agent="$agent",revision=~"$revisions",source="online"}[' + LOOKBACK + "])), "
    '"kind", "sum", "", "") or '
    "label_replace(sum by (variant) (last_over_time(dynagent_judge_score_count"
    '{agent="$agent",revision=~"$revisions",source="online"}[' + LOOKBACK + "])), "
    '"kind", "count", "", "")'
)
_SPENT = '$metric{agent="$agent",revision="$revision",variant="canary"}'
_SINCE = f"sum((({_SPENT} - ({_SPENT} @ $at)) >= 0) or {_SPENT})"
"""What the canary revision's counters gained since ``$at``, over the fleet: each
replica's counter minus its value then, or all of it when it began after ``$at`` or
restarted (its difference went below zero). ``increase()`` would miss what a counter held
at its first scrape, and a canary's first runs are exactly that."""
COST = Template(_SINCE).safe_substitute(metric="dynagent_cost_usd_total")
TOKENS = Template(_SINCE).safe_substitute(metric="dynagent_revision_tokens_total")
MAX_SERIES = 1000
"""Series one answer may hold: a query that matches more is not what the checks need."""


class SourceError(Exception):
    """Prometheus could not give the figures (out, slow, or an answer of another shape)."""


@dataclass(frozen=True, slots=True)
class Figures:
    """Counts per variant, and each variant's latencies."""

    requests: Mapping[str, int]
    errors: Mapping[str, int]
    routed: Mapping[str, int]
    """The runs the router chose (no shadow copies): what the sample-ratio check reads."""
    latency: Mapping[str, Distribution]
    buckets: Mapping[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)
    """The latency histogram's cumulative buckets, when the figures came from Prometheus."""
    scores: Mapping[str, Moments] = field(default_factory=dict)
    """Each variant's online scores (``rollout.judge``): how many, mean, variance."""

    def since(self, base: Figures) -> Figures | None:
        """What happened after ``base``; None when a count went down (a replica restarted).
        The split is not such a count: it is of the current weight's runs only, and starts
        low again at each step."""
        counts = [(self.requests, base.requests), (self.errors, base.errors)]
        if any(now.get(v, 0) < then.get(v, 0) for now, then in counts for v in VARIANTS):
            return None
        latency: dict[str, Distribution] = dict(self.latency)
        for variant, buckets in self.buckets.items():
            before = dict(base.buckets.get(variant, ()))
            latency[variant] = Buckets([(le, c - before.get(le, 0.0)) for le, c in buckets])
        return Figures(
            _minus(self.requests, base.requests),
            _minus(self.errors, base.errors),
            _minus(self.routed, base.routed),
            latency,
            self.buckets,
            {v: _scores_since(m, base.scores.get(v)) for v, m in self.scores.items()},
        )


def _scores_since(now: Moments, then: Moments | None) -> Moments:
    """The scores after ``then``, from running count and mean (the variance stays the
    bound a histogram's sum and count allow)."""
    if then is None or then.count == 0 or now.source == "window":
        return now
    count = now.count - then.count
    if count <= 0:
        return Moments(0, 0.0)
    mean = (now.mean * now.count - then.mean * then.count) / count
    return Moments(count, min(1.0, max(0.0, mean)), now.variance)


def _minus(now: Mapping[str, int], then: Mapping[str, int]) -> dict[str, int]:
    return {v: max(0, now.get(v, 0) - then.get(v, 0)) for v in VARIANTS}


def replica_figures(stats: Mapping[Any, VariantStats], shadow: bool) -> Figures:
    """This replica's own figures: totals since each variant's figures began, latencies of
    its recent window. With shadow traffic the canary's runs are not all routed ones, so
    the split is left out (``routed`` empty)."""
    empty = VariantStats()
    got = {v: stats.get(v, empty) for v in VARIANTS}
    return Figures(
        {v: s.requests for v, s in got.items()},
        {v: s.errors for v, s in got.items()},
        {} if shadow else {v: s.routed for v, s in got.items()},
        {v: Samples(o.seconds for o in s.recent if o.ok) for v, s in got.items()},
        scores={v: replace(Moments.of(s.judged.scores), source="window") for v, s in got.items()},
    )


async def prometheus_figures(
    session: aiohttp.ClientSession,
    source: PrometheusSource,
    agent: str,
    revisions: tuple[str, str],
    weight: float | None = None,
) -> Figures:
    """The fleet's figures of ``agent``'s stable and canary ``revisions``; the split
    (``routed``) counts only the runs routed at ``weight``: right after a step, the next
    scrape still brings runs the old weight routed (and a replica that has not seen the
    step yet routes more), which would make a sound split look broken."""
    current = None if weight is None else f"{weight:g}"
    values = {"agent": agent, "revisions": "|".join(revisions)}
    counted = await _query(session, source, Template(source.requests or REQUESTS), values)
    histogram = await _query(session, source, Template(source.latency or LATENCY), values)
    requests = dict.fromkeys(VARIANTS, 0)
    errors = dict.fromkeys(VARIANTS, 0)
    routed = dict.fromkeys(VARIANTS, 0)
    for labels, value in counted:
        variant = labels.get("variant", "")
        if variant not in requests:
            continue
        if labels.get("source") == "unmatched":
            continue  # callers rollout.match keeps from the canary: not compared with it
        count = round(value)
        requests[variant] += count
        errors[variant] += count if labels.get("outcome") == "error" else 0
        at_weight = labels.get("weight", current) == current  # a query without the label: all
        routed[variant] += count if labels.get("source", "routed") == "routed" and at_weight else 0
    buckets: dict[str, list[tuple[float, float]]] = {v: [] for v in VARIANTS}
    for labels, value in histogram:
        if labels.get("variant") in buckets and "le" in labels:
            buckets[labels["variant"]].append((_bound(labels["le"]), value))
    ordered = {v: tuple(sorted(b)) for v, b in buckets.items()}
    scored = await _query(session, source, Template(source.scores or SCORES), values)
    sums: dict[str, dict[str, float]] = {v: {} for v in VARIANTS}
    for labels, value in scored:
        if labels.get("variant") in sums and labels.get("kind") in ("sum", "count"):
            sums[labels["variant"]][labels["kind"]] = value
    scores = {
        v: Moments(round(s.get("count", 0)), s["sum"] / s["count"] if s.get("count") else 0.0)
        for v, s in sums.items()
    }
    latency = {v: Buckets(b) for v, b in ordered.items()}
    return Figures(requests, errors, routed, latency, ordered, scores)


async def prometheus_spend(
    session: aiohttp.ClientSession, source: PrometheusSource, agent: str, revision: str, at: float
) -> tuple[float, int]:
    """US dollars and tokens the fleet's runs of the canary ``revision`` spent since ``at``."""
    values = {"agent": agent, "revision": revision, "at": f"{at:.3f}"}
    usd = await _query(session, source, Template(source.cost or COST), values)
    tokens = await _query(session, source, Template(source.tokens or TOKENS), values)
    return sum(v for _, v in usd), round(sum(v for _, v in tokens))


def _bound(le: str) -> float:
    try:
        return float(le)
    except ValueError:
        return math.inf


async def _query(
    session: aiohttp.ClientSession,
    source: PrometheusSource,
    template: Template,
    values: Mapping[str, str],
) -> list[tuple[dict[str, str], float]]:
    query = template.safe_substitute(values)
    url = source.url.rstrip("/") + "/api/v1/query"
    try:
        async with session.get(
            url, params={"query": query}, timeout=aiohttp.ClientTimeout(total=source.timeout)
        ) as response:
            body: Any = await response.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise SourceError(f"Prometheus at {source.url}: {type(exc).__name__}: {exc}") from None
    if not isinstance(body, dict) or body.get("status") != "success":
        said = body.get("error") if isinstance(body, dict) else body
        raise SourceError(f"Prometheus refused {query!r}: {str(said)[:300]}")
    result = body.get("data", {}).get("result")
    if not isinstance(result, list) or len(result) > MAX_SERIES:
        raise SourceError(f"Prometheus answered {query!r} with no vector of at most {MAX_SERIES}")
    series = []
    for item in result:
        try:
            labels = {str(k): str(v) for k, v in item["metric"].items()}
            series.append((labels, float(item["value"][1])))
        except (KeyError, IndexError, TypeError, ValueError):
            raise SourceError(f"Prometheus answered {query!r} with a malformed sample") from None
    return series
