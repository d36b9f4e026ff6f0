"""Prometheus gauges of the registry's state, read at scrape time only: what the
Grafana dashboard and the alerts in ``deploy/`` watch beside the counters of
``metrics.py`` (canary weight and pull, refused definitions, degraded sources,
circuit breakers). Nothing is computed between scrapes."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from dynagent.models.breaker import BreakerPolicy, CircuitBreaker
from dynagent.models.fallback import FallbackModel
from dynagent.models.openai import OpenAIModel
from dynagent.registry.facade import AgentRegistry
from dynagent.runtime.agent import Agent

CIRCUIT_STATES = {"closed": 0, "half_open": 1, "open": 2}


class RegistryGauges(Collector):
    def __init__(self, registry: AgentRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        weight = GaugeMetricFamily(
            "dynagent_canary_weight", "Percent of traffic the canary is set to.", labels=["agent"]
        )
        pulled = GaugeMetricFamily(
            "dynagent_canary_pulled",
            "1 while the guard keeps the agent's canary out of traffic.",
            labels=["agent"],
        )
        refused = GaugeMetricFamily(
            "dynagent_config_refused",
            "1 while the agent's newest definition is refused (last_error set).",
            labels=["agent"],
        )
        circuit = GaugeMetricFamily(
            "dynagent_circuit_state",
            "Circuit breaker of each agent's model endpoint: 0 closed, 1 half-open, 2 open.",
            labels=["agent", "variant", "endpoint"],
        )
        gate = GaugeMetricFamily(
            "dynagent_eval_gate",
            "1 for the state of the gate of the agent's canary (rollout.gate).",
            labels=["agent", "state"],
        )
        for entry in self._registry:
            if entry.canary is not None and entry.canary.gate is not None:
                gate.add_metric([entry.name, entry.canary.gate.state], 1.0)
            refused.add_metric([entry.name], 1.0 if entry.last_error else 0.0)
            if entry.canary is not None:
                weight.add_metric([entry.name], entry.canary.policy.weight)
                pulled.add_metric([entry.name], 0.0 if entry.canary.serving else 1.0)
                _circuits(circuit, entry.canary.agent, "canary")
            if entry.stable is not None:
                _circuits(circuit, entry.stable, "stable")
        degraded = GaugeMetricFamily(
            "dynagent_source_degraded",
            "1 while a config source serves from a fallback (its snapshot) or the session store "
            "(source=sessions) is out.",
            labels=["source"],
        )
        for source in self._registry.degraded:
            degraded.add_metric([source], 1.0)
        stale = CounterMetricFamily(
            "dynagent_source_stale_refused",
            "Versions a config source refused as older than the one it serves (a Nacos "
            "cluster node behind the raft log answering).",
            labels=["source"],
        )
        for source, count in self._registry.readiness.stale_refused.items():
            stale.add_metric([source], float(count))
        yield from (weight, pulled, refused, circuit, degraded, gate, stale)


def _circuits(family: GaugeMetricFamily, agent: Agent, variant: str) -> None:
    for breaker, policy in _breakers(agent.model):
        state = CIRCUIT_STATES[breaker.state(policy)]
        family.add_metric([agent.name, variant, breaker.endpoint], float(state))


def _breakers(model: object) -> Iterator[tuple[CircuitBreaker, BreakerPolicy]]:
    if isinstance(model, FallbackModel):
        yield from _breakers(model.primary)
        yield from _breakers(model.fallback)
    elif isinstance(model, OpenAIModel) and model.breaker is not None:
        yield model.breaker, model.breaker_policy
