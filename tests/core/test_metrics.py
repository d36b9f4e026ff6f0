"""Run metrics: the series a kind of run adds to are found once, and an agent that is
forgotten (removed) and served again starts its series afresh."""

from __future__ import annotations

from dynagent.core.metrics import Metrics
from dynagent.events import Usage


def _runs(metrics: Metrics) -> dict[tuple[str, ...], float]:
    """Every run series: (name, agent, variant, endpoint or kind, outcome) → value."""
    found: dict[tuple[str, ...], float] = {}
    for family in metrics.registry.collect():
        for sample in family.samples:
            if sample.name in (
                "dynagent_requests_total",
                "dynagent_tokens_total",
                "dynagent_request_duration_seconds_count",
            ):
                labels = sample.labels
                key: tuple[str, ...] = (sample.name, labels["agent"], labels["variant"])
                key += tuple(labels[n] for n in ("endpoint", "outcome", "kind") if n in labels)
                found[key] = sample.value
    return found


def test_runs_add_to_their_series_and_a_forgotten_agent_starts_afresh() -> None:
    metrics = Metrics()
    for _ in range(3):
        metrics.observe_run("a", "stable", "invoke", 0.01, Usage(2, 1))
    metrics.observe_run("a", "stable", "invoke", 0.01, Usage(2, 1), error="model_error")
    metrics.observe_run("b", "canary", "chat", 0.01, None)

    metrics.forget("a")
    metrics.observe_run("a", "stable", "invoke", 0.01, Usage(5, 4))

    assert _runs(metrics) == {
        ("dynagent_requests_total", "a", "stable", "invoke", "ok"): 1.0,
        ("dynagent_request_duration_seconds_count", "a", "stable"): 1.0,
        ("dynagent_tokens_total", "a", "stable", "input"): 5.0,
        ("dynagent_tokens_total", "a", "stable", "output"): 4.0,
        ("dynagent_requests_total", "b", "canary", "chat", "ok"): 1.0,
        ("dynagent_request_duration_seconds_count", "b", "canary"): 1.0,
    }
