"""What a finished run spent, counted where budgets read it: the metrics (fleet-wide,
through Prometheus) and, for a canary, this replica's own book."""

from __future__ import annotations

from dynagent.core.metrics import Metrics
from dynagent.events import RunFinished
from dynagent.registry.spend import SpendBook
from dynagent.runtime.agent import Agent, Variant


def count_spend(
    metrics: Metrics,
    book: SpendBook,
    agent: Agent,
    variant: Variant,
    finished: RunFinished | None,
) -> None:
    """``finished``: the run's closing event (``events.run_finished``), None if it never
    ended."""
    if finished is None:
        return
    tokens = finished.usage.total_tokens
    metrics.observe_spend(agent.name, agent.revision, variant, finished.cost_usd, tokens)
    if variant == "canary":
        book.add(agent.name, agent.revision, finished.cost_usd, tokens)
