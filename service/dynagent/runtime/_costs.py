"""What a run's model calls cost, as it goes (``models.prices``), and the run's own
ceiling on it (``limits.max_cost_usd``)."""

from __future__ import annotations

from dynagent.exceptions import CostLimitExceeded
from dynagent.interceptors.base import RunContext
from dynagent.models.base import ModelResponse
from dynagent.models.prices import Prices


class CostMeter:
    """Adds each model call's cost to ``RunContext.cost_usd`` and holds the run to its
    ``limits.max_cost_usd``. A run that used a model without a price has no known cost
    (None), and the build refuses a ceiling on such a model, so the ceiling always acts."""

    __slots__ = ("limit", "model", "prices")

    def __init__(self, prices: Prices, model: str, limit: float | None) -> None:
        self.prices = prices
        self.model = model
        """The agent's own ``model.name``: what a call is priced as unless it says."""
        self.limit = limit

    def before_call(self, ctx: RunContext) -> None:
        """Refuse a model call once the run has spent its ceiling: any call costs more."""
        spent = ctx.cost_usd
        if self.limit is not None and spent is not None and spent >= self.limit:
            raise self._over(spent, "before another model call")

    def cost(self, response: ModelResponse) -> float | None:
        """What one call cost, priced by the model that answered (None: it has no price)."""
        return self.prices.cost(response.priced_as or self.model, response.usage)

    def after_call(self, ctx: RunContext, cost: float | None) -> None:
        """Count the call's ``cost``; end the run when it went past its ceiling."""
        spent = None if cost is None or ctx.cost_usd is None else ctx.cost_usd + cost
        ctx.cost_usd = spent
        if self.limit is not None and spent is not None and spent > self.limit:
            raise self._over(spent, f"after model call {ctx.model_calls}")

    def _over(self, spent: float, when: str) -> CostLimitExceeded:
        return CostLimitExceeded(
            f"the run spent ${spent:.6f} of limits.max_cost_usd = ${self.limit:g} {when}; "
            "raise the limit or shorten the run",
            spent=spent,
            limit=self.limit or 0.0,
        )
