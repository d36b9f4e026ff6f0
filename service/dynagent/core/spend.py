"""What a finished run spent, counted where budgets read it: the metrics (fleet-wide,
through Prometheus) and, for a canary, this replica's own book."""

from __future__ import annotations

from collections.abc import Sequence

from dynagent.core.metrics import Metrics
from dynagent.events import Event, RunFinished
from dynagent.registry.spend import SpendBook
from dynagent.runtime.agent import Agent, Variant


def run_cost(events: Sequence[Event]) -> RunFinished | None:
    """The run's last event, which carries its usage and cost; None if it never ended."""
    return next((e for e in reversed(events) if isinstance(e, RunFinished)), None)


def count_spend(
    metrics: Metrics, book: SpendBook, agent: Agent, variant: Variant, events: Sequence[Event]
) -> None:
    finished = run_cost(events)
    if finished is None:
        return
    tokens = finished.usage.total_tokens
    metrics.observe_spend(agent.name, agent.revision, variant, finished.cost_usd, tokens)
    if variant == "canary":
        book.add(agent.name, agent.revision, finished.cost_usd, tokens)
