"""What a finished run spent, counted where budgets read it: the metrics (fleet-wide,
through Prometheus) and, for a canary, this replica's own book."""

from __future__ import annotations

from dynagent.core.metrics import Metrics
from dynagent.events import Usage
from dynagent.registry.spend import SpendBook
from dynagent.runtime.agent import Variant


def count_spend(
    metrics: Metrics,
    book: SpendBook,
    agent: str,
    revision: str,
    variant: Variant,
    *,
    usage: Usage,
    cost_usd: float | None,
) -> None:
    """What one run of ``agent``'s ``revision`` used and cost (``events.spent``: a run cut
    off counts the calls that answered); ``cost_usd`` None when a model it used has no
    price."""
    tokens = usage.total_tokens
    metrics.observe_spend(agent, revision, variant, cost_usd, tokens)
    if variant == "canary":
        book.add(agent, revision, cost_usd, tokens)
