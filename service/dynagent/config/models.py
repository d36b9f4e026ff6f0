"""``models``: what the service knows about the models its agents use — their prices."""

from __future__ import annotations

from types import MappingProxyType

from pydantic import Field

from dynagent.config._sections import Section
from dynagent.models.prices import Price as ModelPrice
from dynagent.models.prices import Prices


class Price(Section):
    """US dollars per million tokens, as the vendor lists them."""

    input: float = Field(ge=0, allow_inf_nan=False)
    output: float = Field(ge=0, allow_inf_nan=False)
    cached_input: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    """Input tokens the endpoint read from its prompt cache (``cached_tokens``); unset,
    they cost ``input``."""


class ModelsConfig(Section):
    prices: dict[str, Price] = Field(default_factory=dict, max_length=10_000)
    """By model name, as a definition's ``model.name`` (or its fallback's) gives it: every
    run of such a model gets a cost (traces, metrics, the ``usage`` of our API), and
    ``rollout.budget.usd`` and ``limits.max_cost_usd`` can act on it."""

    def price_list(self) -> Prices:
        """The prices as the runtime reads them."""
        return Prices(
            MappingProxyType(
                {
                    name: ModelPrice(price.input, price.output, price.cached_input)
                    for name, price in self.prices.items()
                }
            )
        )
