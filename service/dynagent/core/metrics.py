"""Prometheus metrics, per agent and variant, on a registry owned by the app."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from dynagent.core.tallies import Spread, Spreads, Tallies, Tally
from dynagent.events import Usage

SCORE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
"""A judge's scores, 0 to 1."""
_PerAgent = MetricWrapperBase | Tallies | Spreads
"""A family with a series per agent: ``forget`` removes an agent's."""
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
EVIDENCE_LABELS = ("agent", "revision", "variant", "source", "outcome", "weight")


def _registry() -> CollectorRegistry:
    """A registry with what every Prometheus exporter of a Python process has: the
    interpreter (``python_info``) and its garbage collector (``python_gc_*``); CPU, memory,
    descriptors and start time (``process_*``, read from /proc) are added by
    ``Metrics.exposition``. All read at scrape time, nothing per run."""
    registry = CollectorRegistry()
    for collector in (PLATFORM_COLLECTOR, GC_COLLECTOR):
        registry.register(collector)
    return registry


class _Settled(Collector):
    """Registered before the service's own metrics: a scrape first applies the run ends
    that wait (``Metrics.before_collect``), so it counts every run that has ended."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterable[Metric]:
        self._metrics.before_collect()
        return ()


class Metrics:
    def __init__(self) -> None:
        self.registry = _registry()
        self.before_collect: Callable[[], None] = lambda: None
        """Called before the metrics are read (the service's ``RunEnds.settle``)."""
        self.registry.register(_Settled(self))
        labels = ("agent", "variant")
        self.requests = Tallies(
            "dynagent_requests",
            "Agent runs by outcome: ok, error (the run failed), or unavailable (a store or "
            "the config center was out: no version's error rate).",
            [*labels, "endpoint", "outcome"],
            registry=self.registry,
        )
        self.errors = Tallies(
            "dynagent_errors",
            "Failed agent runs by error type.",
            [*labels, "type"],
            registry=self.registry,
        )
        self.latency = Spreads(
            "dynagent_request_duration_seconds",
            "Agent run latency.",
            labels,
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.tokens = Tallies(
            "dynagent_tokens", "Model tokens used.", [*labels, "kind"], registry=self.registry
        )
        self._agent_metrics()
        self._rollout_metrics(labels)
        self._eval_metrics()
        self._online_metrics()
        self._evidence_metrics()
        self._spend_metrics()
        self._runs: dict[tuple[str, str, str, str], _RunSeries] = {}
        """The series one kind of run adds to, found once: looking a child up by its
        labels costs a lock and a tuple of strings per call, four calls per run."""
        self._evidence: dict[tuple[str, str, str, str, bool, str], tuple[Tally, Spread]] = {}
        """Likewise the evidence series of each (agent, revision, variant, source, ok)."""
        self._per_agent: tuple[tuple[_PerAgent, tuple[str, ...]], ...] = (
            (self.requests, (*labels, "endpoint", "outcome")),
            (self.errors, (*labels, "type")),
            (self.latency, labels),
            (self.tokens, (*labels, "kind")),
            (self.reloads, ("agent", "result")),
            (self.feedback, labels),
            (self.feedback_score, labels),
            (self.eval_cases, ("agent", "revision", "verdict", "trigger")),
            (self.judge_score, ("agent", "revision", "variant", "source")),
            (self.eval_gate, ("agent", "state")),
            (self.online_judged, (*labels, "outcome")),
            (self.evidence, EVIDENCE_LABELS),
            (self.evidence_latency, EVIDENCE_LABELS[:4]),
            (self.cost, EVIDENCE_LABELS[:3]),
            (self.revision_tokens, EVIDENCE_LABELS[:3]),
        )

    def _agent_metrics(self) -> None:
        """Agents served, and their definitions' changes."""
        self.reloads = Counter(
            "dynagent_reloads",
            "Agent definition changes applied or refused.",
            ["agent", "result"],
            registry=self.registry,
        )
        self.agents = Gauge("dynagent_agents", "Agents served.", registry=self.registry)

    def _eval_metrics(self) -> None:
        """Evaluation cases by verdict, the judges' scores, and where each gate stands."""
        self.eval_cases = Counter(
            "dynagent_eval_cases",
            "Evaluation cases run, by verdict: pass, fail, or error (the run or its judge "
            "failed); trigger: api, cli or gate.",
            ["agent", "revision", "verdict", "trigger"],
            registry=self.registry,
        )
        self.judge_score = Histogram(
            "dynagent_judge_score",
            "Scores (0-1) judge agents gave: source suite (evaluation runs) or online "
            "(sampled live runs).",
            ["agent", "revision", "variant", "source"],
            buckets=SCORE_BUCKETS,
            registry=self.registry,
        )
        self.eval_gate = Gauge(
            "dynagent_eval_gate",
            "1 for the state each canary's evaluation gate is in.",
            ["agent", "state"],
            registry=self.registry,
        )

    def _rollout_metrics(self, labels: tuple[str, str]) -> None:
        """Feedback per variant, and where each canary stands."""
        self.feedback = Counter(
            "dynagent_feedback",
            "Feedback ratings of runs.",
            labels,
            registry=self.registry,
        )
        self.feedback_score = Counter(
            "dynagent_feedback_score",
            "Sum of the feedback scores (0-1) of runs: divide by dynagent_feedback_total.",
            labels,
            registry=self.registry,
        )
        self.canary_step = Gauge(
            "dynagent_canary_step",
            "The current step (from 0) of each progressive rollout.",
            ["agent"],
            registry=self.registry,
        )
        self.webhooks = Counter(
            "dynagent_webhook_deliveries",
            "Webhook notices: delivered, retried (an attempt failed), failed (gave up), "
            "dropped (the queue was full).",
            ["result"],
            registry=self.registry,
        )

    def _evidence_metrics(self) -> None:
        """What the rollout analysis reads, fleet-wide, from Prometheus: the runs that are
        evidence about a version (``registry.canary.guard_evidence``), by revision."""
        self.evidence = Tallies(
            "dynagent_rollout_requests",
            "Runs that count for or against a version: routed (the weight chose the "
            "variant), unmatched (rollout.match kept it from the canary) or shadow copies, "
            "by outcome (ok or error) and the canary weight that chose the variant.",
            EVIDENCE_LABELS,
            registry=self.registry,
        )
        self.evidence_latency = Spreads(
            "dynagent_rollout_latency_seconds",
            "Latency of the runs that count for or against a version.",
            EVIDENCE_LABELS[:4],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )

    def _spend_metrics(self) -> None:
        """What each revision's runs spent, fleet-wide in Prometheus for ``rollout.budget``:
        by agent, revision and variant, like the rollout's other figures (a removed agent's
        series go with it)."""
        self._spend: dict[tuple[str, str, str], _SpendSeries] = {}
        self.cost = Tallies(
            "dynagent_cost_usd",
            "US dollars runs spent on model calls (models.prices; runs of a model without "
            "a price add nothing).",
            EVIDENCE_LABELS[:3],
            registry=self.registry,
        )
        self.revision_tokens = Tallies(
            "dynagent_revision_tokens",
            "Model tokens runs used, by revision (dynagent_tokens_total has them by kind).",
            EVIDENCE_LABELS[:3],
            registry=self.registry,
        )

    def observe_spend(
        self, agent: str, revision: str, variant: str, usd: float | None, tokens: int
    ) -> None:
        key = (agent, revision, variant)
        series = self._spend.get(key)
        if series is None:
            series = self._spend[key] = _SpendSeries(self.revision_tokens.labels(*key))
        if usd is not None:  # an unpriced agent has no cost series at all
            if series.cost is None:
                series.cost = self.cost.labels(*key)
            series.cost.inc(usd)
        series.tokens.inc(tokens)

    def observe_evidence(  # noqa: PLR0917
        self,
        agent: str,
        revision: str,
        variant: str,
        source: str,
        ok: bool,
        seconds: float,
        weight: str = "",
    ) -> None:
        """One run that counts for or against ``revision``; ``weight``: the canary weight
        that chose its variant (``""`` when none did: shadow copies, pins, no canary)."""
        key = (agent, revision, variant, source, ok, weight)
        children = self._evidence.get(key)
        if children is None:
            outcome = "ok" if ok else "error"
            children = self._evidence[key] = (
                self.evidence.labels(agent, revision, variant, source, outcome, weight),
                self.evidence_latency.labels(agent, revision, variant, source),
            )
        children[0].inc()
        children[1].observe(seconds)

    def _online_metrics(self) -> None:
        """What became of the live runs sampled for an online score (``rollout.judge``)."""
        self.online_judged = Counter(
            "dynagent_online_judged",
            "Live runs sampled for an online score (rollout.judge), by outcome: scored, "
            "error (the judge gave no score) or skipped (the judge's queue was full).",
            ["agent", "variant", "outcome"],
            registry=self.registry,
        )

    def forget(self, agent: str) -> None:
        """Drop every series of ``agent``, which the service no longer serves: series of
        agents long gone would otherwise pile up for as long as the process lives."""
        self._runs = {key: series for key, series in self._runs.items() if key[0] != agent}
        self._evidence = {key: pair for key, pair in self._evidence.items() if key[0] != agent}
        self._spend = {key: s for key, s in self._spend.items() if key[0] != agent}
        for metric, names in self._per_agent:
            for family in metric.collect():
                for sample in family.samples:
                    if sample.labels.get("agent") == agent:
                        metric.remove(*(sample.labels[name] for name in names))

    def observe_run(  # noqa: PLR0917
        self,
        agent: str,
        variant: str,
        endpoint: str,
        seconds: float,
        usage: Usage | None,
        error: str | None = None,
    ) -> None:
        key = (agent, variant, endpoint, _outcome(error))
        series = self._runs.get(key)
        if series is None:
            series = self._runs[key] = _RunSeries(
                self.requests.labels(*key), self.latency.labels(agent, variant)
            )
        series.requests.inc()
        series.latency.observe(seconds)
        if error:
            self.errors.labels(agent, variant, error).inc()
        if usage is not None:
            if series.tokens is None:  # no token series for runs that never report usage
                series.tokens = (
                    self.tokens.labels(agent, variant, "input"),
                    self.tokens.labels(agent, variant, "output"),
                )
            series.tokens[0].inc(usage.input_tokens)
            series.tokens[1].inc(usage.output_tokens)

    def observe_feedback(self, agent: str, variant: str, score: float) -> None:
        self.feedback.labels(agent, variant).inc()
        self.feedback_score.labels(agent, variant).inc(score)

    def set_canaries(self, canaries: Iterable[tuple[str, float, int | None]]) -> None:
        """``(agent, weight now, step or None)`` of every canary: the step gauge, afresh
        (the weight is ``gauges.py``'s ``dynagent_canary_weight``)."""
        self.canary_step.clear()
        for agent, _, step in canaries:
            if step is not None:
                self.canary_step.labels(agent).set(step)

    def exposition(
        self, agents: frozenset[str] | None = None, process: Sequence[Metric] = ()
    ) -> bytes:
        """The text format; with ``agents``, only their series (no totals over all, no
        ``process``: the families of ``process_families``, read beforehand)."""
        if agents is None:
            return generate_latest(self.registry) + generate_latest(_Families(process))
        only = CollectorRegistry(auto_describe=False)
        only.register(_AgentsOnly(self.registry, agents))
        return generate_latest(only)


@dataclass(slots=True)
class _RunSeries:
    """The children of one (agent, variant, endpoint, outcome)."""

    requests: Tally
    latency: Spread
    tokens: tuple[Tally, Tally] | None = None
    """Input and output tokens, once a run reported its usage."""


def _outcome(error: str | None) -> str:
    """An outage is not a failure of the version that was asked to run: it gets its own
    outcome, out of every ``outcome="error"`` rate per variant."""
    if error is None:
        return "ok"
    return "unavailable" if error == "unavailable" else "error"


def process_families() -> list[Metric]:
    """The process's CPU seconds, memory, open and most descriptors and start time: files
    of /proc read, so a scrape reads them on a worker thread, off the event loop."""
    return list(PROCESS_COLLECTOR.collect())


class _Families(Collector):
    """Families collected beforehand."""

    def __init__(self, families: Sequence[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


class _AgentsOnly(Collector):
    """The samples of some agents' series, for a key limited to them."""

    def __init__(self, source: CollectorRegistry, agents: frozenset[str]) -> None:
        self._source, self._agents = source, agents

    def collect(self) -> Iterator[Metric]:
        for family in self._source.collect():
            samples = [s for s in family.samples if s.labels.get("agent") in self._agents]
            if samples:
                kept = Metric(family.name, family.documentation, family.type, family.unit)
                kept.samples = samples
                yield kept


@dataclass(slots=True)
class _SpendSeries:
    """The children of one (agent, revision, variant) that runs' spend adds to."""

    tokens: Tally
    cost: Tally | None = None
    """Made by the first run with a known cost."""
