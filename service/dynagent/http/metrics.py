"""Prometheus metrics, per agent and variant, on a registry owned by the app."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from ..events import Usage

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        labels = ("agent", "variant")
        self.requests = Counter(
            "dynagent_requests",
            "Agent runs by outcome.",
            [*labels, "endpoint", "outcome"],
            registry=self.registry,
        )
        self.errors = Counter(
            "dynagent_errors",
            "Failed agent runs by error type.",
            [*labels, "type"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "dynagent_request_duration_seconds",
            "Agent run latency.",
            labels,
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.tokens = Counter(
            "dynagent_tokens", "Model tokens used.", [*labels, "kind"], registry=self.registry
        )
        self.reloads = Counter(
            "dynagent_reloads",
            "Agent definition changes applied or refused.",
            ["agent", "result"],
            registry=self.registry,
        )
        self.agents = Gauge("dynagent_agents", "Agents served.", registry=self.registry)
        self._per_agent: tuple[tuple[MetricWrapperBase, tuple[str, ...]], ...] = (
            (self.requests, (*labels, "endpoint", "outcome")),
            (self.errors, (*labels, "type")),
            (self.latency, labels),
            (self.tokens, (*labels, "kind")),
            (self.reloads, ("agent", "result")),
        )

    def forget(self, agent: str) -> None:
        """Drop every series of ``agent``, which the service no longer serves: series of
        agents long gone would otherwise pile up for as long as the process lives."""
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
        self.requests.labels(agent, variant, endpoint, "error" if error else "ok").inc()
        self.latency.labels(agent, variant).observe(seconds)
        if error:
            self.errors.labels(agent, variant, error).inc()
        if usage is not None:
            self.tokens.labels(agent, variant, "input").inc(usage.input_tokens)
            self.tokens.labels(agent, variant, "output").inc(usage.output_tokens)

    def exposition(self, agents: frozenset[str] | None = None) -> bytes:
        """The text format; with ``agents``, only their series (no totals over all)."""
        if agents is None:
            return generate_latest(self.registry)
        only = CollectorRegistry(auto_describe=False)
        only.register(_AgentsOnly(self.registry, agents))
        return generate_latest(only)


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
