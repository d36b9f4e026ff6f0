"""What a run's model calls cost, as it goes (``models.prices``), and the ceilings on it
(``limits.max_cost_usd``): the run's own, and those of the runs that called it as a tool.

An agent called as a tool (``type: agent``) runs on its own, with its own cost, counted
on its own agent. Its calls are still money its caller's run spent: they count toward
the caller's ceiling as they happen (``CEILINGS``), at any depth, so that handing the
work to another agent does not take it out of the caller's ceiling.
"""

from __future__ import annotations

from contextvars import ContextVar, Token
from dataclasses import dataclass

from dynagent.exceptions import CostLimitExceeded
from dynagent.interceptors.base import RunContext
from dynagent.models.base import ModelResponse
from dynagent.models.prices import Prices

_HINT = "raise the limit or shorten the run"


@dataclass(slots=True, eq=False)
class Ceiling:
    """One run's ``limits.max_cost_usd`` and what was spent against it: the run's own
    model calls and those of the agents it called as tools."""

    agent: str
    limit: float
    spent: float | None = 0.0
    """None once one of the run's own calls had no price: the ceiling no longer acts
    (the build refuses a ceiling on a model without a price)."""
    called: float = 0.0
    """The part of ``spent`` the agents it called spent."""


CEILINGS: ContextVar[tuple[Ceiling, ...]] = ContextVar("dynagent_cost_ceilings", default=())
"""The ceilings of the runs in progress in this context, outermost first: what the
model calls of an agent called as a tool count toward."""


class CostMeter:
    """Adds each model call's cost to ``RunContext.cost_usd`` and holds the run to its
    ``limits.max_cost_usd`` and to the ceilings of the runs that called it. A run that
    used a model without a price has no known cost (None); under a caller's ceiling such
    a model is refused before the call, since its spend could not be counted."""

    __slots__ = ("above", "model", "own", "prices")

    def __init__(self, prices: Prices, model: str, limit: float | None, agent: str = "") -> None:
        self.prices = prices
        self.model = model
        """The agent's own ``model.name``: what a call is priced as unless it says."""
        self.own = Ceiling(agent, limit) if limit is not None else None
        """The run's own ``limits.max_cost_usd``, if it has one."""
        self.above = CEILINGS.get()
        """The ceilings of the runs that called this one as a tool, outermost first."""

    def calling(self) -> _Calling:
        """The block in which the agents this run calls as tools count toward its ceiling."""
        return _Calling(self)

    def before_call(self, ctx: RunContext) -> None:
        """Refuse a model call once a ceiling is spent: any call costs more."""
        when = "before another model call"
        own = self.own
        if own is not None and own.spent is not None and own.spent >= own.limit:
            raise _over(own, own.spent, when)
        for ceiling in self.above:
            if ceiling.spent is not None and ceiling.spent >= ceiling.limit:
                raise _over_caller(ceiling, ceiling.spent, when)
        if self.above and self.model not in self.prices:
            raise _unpriced(self.model, self.above[-1])

    def cost(self, response: ModelResponse) -> float | None:
        """What one call cost, priced by the model that answered (None: it has no price)."""
        return self.prices.cost(response.priced_as or self.model, response.usage)

    def after_call(self, ctx: RunContext, cost: float | None) -> None:
        """Count the call's ``cost``; end the run when it went past a ceiling."""
        ctx.cost_usd = None if cost is None or ctx.cost_usd is None else ctx.cost_usd + cost
        when = f"after model call {ctx.model_calls}"
        own = self.own
        if own is not None:
            own.spent = None if cost is None or own.spent is None else own.spent + cost
            if own.spent is not None and own.spent > own.limit:
                raise _over(own, own.spent, when)
        if not self.above:
            return
        if cost is None:
            raise _unpriced(self.model, self.above[-1])
        for ceiling in self.above:
            if ceiling.spent is not None:
                ceiling.spent += cost
                ceiling.called += cost
        for ceiling in self.above:
            if ceiling.spent is not None and ceiling.spent > ceiling.limit:
                raise _over_caller(ceiling, ceiling.spent, when)


def _over(own: Ceiling, spent: float, when: str) -> CostLimitExceeded:
    who = "the run and the agents it called" if own.called else "the run"
    return CostLimitExceeded(
        f"{who} spent ${spent:.6f} of limits.max_cost_usd = ${own.limit:g} {when}; {_HINT}",
        spent=spent,
        limit=own.limit,
    )


def _over_caller(ceiling: Ceiling, spent: float, when: str) -> CostLimitExceeded:
    return CostLimitExceeded(
        f"the run of agent {ceiling.agent!r} that called this one, with the agents it "
        f"called, spent ${spent:.6f} of its limits.max_cost_usd = ${ceiling.limit:g} "
        f"{when}; {_HINT}",
        spent=spent,
        limit=ceiling.limit,
    )


def _unpriced(model: str, ceiling: Ceiling) -> CostLimitExceeded:
    return CostLimitExceeded(
        f"model {model!r} has no price in the service config's models.prices, so its "
        f"calls cannot count toward the limits.max_cost_usd of agent {ceiling.agent!r}, "
        "which called this one; give it a price",
        spent=ceiling.spent or 0.0,
        limit=ceiling.limit,
    )


class _Calling:
    """``CEILINGS`` with the run's own ceiling added, for a block (a class, not a
    generator: every step that runs tools enters it; without a ceiling it changes
    nothing)."""

    __slots__ = ("_meter", "_token")

    def __init__(self, meter: CostMeter) -> None:
        self._meter = meter
        self._token: Token[tuple[Ceiling, ...]] | None = None

    def __enter__(self) -> None:
        own = self._meter.own
        if own is not None:
            self._token = CEILINGS.set((*self._meter.above, own))

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            CEILINGS.reset(self._token)
