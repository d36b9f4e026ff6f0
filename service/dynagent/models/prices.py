"""What model calls cost: a price per million tokens for each model name, and the cost
of the tokens a call used."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from dynagent.events import Usage
from dynagent.models.base import Model
from dynagent.models.test import TestModel

PER = 1_000_000
"""Prices are per this many tokens, as model vendors list them."""


def priced_name(model: Model) -> str:
    """The name a model is priced by: its ``model.name`` (the offline model's events call
    it ``test (offline, for NAME)``; it is priced as ``NAME``)."""
    return model.model_name if isinstance(model, TestModel) else model.name


@dataclass(frozen=True, slots=True)
class Price:
    """US dollars per million tokens of one model."""

    input: float
    output: float
    cached_input: float | None = None
    """For input tokens the endpoint reports as read from its prompt cache; None: as
    ``input``."""

    def cost(self, usage: Usage) -> float:
        cached = usage.cached_input_tokens if self.cached_input is not None else 0
        fresh = usage.input_tokens - cached
        total = fresh * self.input + cached * (self.cached_input or 0.0)
        return (total + usage.output_tokens * self.output) / PER


@dataclass(frozen=True, slots=True)
class Prices:
    """The service config's ``models.prices``, by the name a definition's ``model.name``
    (or its fallback's) gives."""

    by_model: Mapping[str, Price] = field(default_factory=lambda: MappingProxyType({}))

    def __contains__(self, model: str) -> bool:
        return model in self.by_model

    def cost(self, model: str, usage: Usage) -> float | None:
        """What ``usage`` of ``model`` cost; None when the model has no price."""
        price = self.by_model.get(model)
        return None if price is None else price.cost(usage)
