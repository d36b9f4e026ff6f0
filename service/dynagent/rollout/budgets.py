"""``rollout.budget`` at work: every ``interval`` seconds each serving canary with a
budget has its revision's spend — US dollars of its model calls (``models.prices``) or
tokens, since the canary started or since 00:00 UTC — compared with its budget, and a
canary past it is paused fleet-wide (``by: budget``, written back like every decision,
so it lands in ``rollout.history`` and the webhooks hear of it).

The spend is the fleet's, from the Prometheus of the canary's ``rollout.analysis``, when
it has one; else from the Redis the fleet's sessions share (``FleetSpend``: every replica
adds its canary runs' spend there about once a second); else (or while neither answers)
this replica's own, which is a part of the fleet's: the status says which. Every replica
looks; the write-back's compare-and-set makes one pause of them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from loguru import logger

from dynagent.exceptions import DynagentError, SessionStoreUnavailable
from dynagent.models.fallback import priced_names
from dynagent.registry.analysis_policy import BudgetPolicy
from dynagent.registry.entry import Canary
from dynagent.registry.facade import AgentRegistry
from dynagent.registry.spend import NOTHING, FleetSpend, Spend, utc_day
from dynagent.rollout._figures import SourceError, prometheus_spend
from dynagent.rollout._ticking import Ticking
from dynagent.rollout.decisions import RolloutDecisions

SEND_EVERY = 1.0
"""Seconds between two additions of this replica's canary spend to the fleet's sum."""

_NO_PROMETHEUS = "no Prometheus in rollout.analysis"

KIND = "budget"
"""The attachment's kind: the agent's status shows it as ``canary.budget``."""


@dataclass(slots=True)
class BudgetState:
    """One canary revision's budget on this replica, as its status shows it."""

    revision: str
    policy: BudgetPolicy
    since: float = 0.0
    spent: Spend = NOTHING
    source: str = "replica"
    note: str | None = None
    exceeded: bool = False
    checked_at: float | None = None
    due: float = 0.0

    def status(self) -> dict[str, Any]:
        policy = self.policy
        limit = {"usd": policy.usd} if policy.usd is not None else {"tokens": policy.tokens}
        return {
            **limit,
            "per": policy.per,
            "spent_usd": None if self.spent.usd is None else round(self.spent.usd, 8),
            "spent_tokens": self.spent.tokens,
            "source": self.source,
            "exceeded": self.exceeded,
            "since": self.since,
            "checked_at": self.checked_at,
            "note": self.note,
        }

    def over(self) -> str | None:
        """Why the spend is past the budget, with the figures; None while within it."""
        policy, spent = self.policy, self.spent
        if policy.usd is not None and spent.usd is not None and spent.usd > policy.usd:
            figure = f"${spent.usd:.6f} of its ${policy.usd:g} budget"
        elif policy.tokens is not None and spent.tokens > policy.tokens:
            figure = f"{spent.tokens} tokens of its {policy.tokens} token budget"
        else:
            return None
        since = datetime.fromtimestamp(self.since, UTC).isoformat(timespec="seconds")
        return (
            f"budget: canary revision {self.revision} spent {figure} per {policy.per} "
            f"(since {since}, {self.source} figures)"
        )


class CanaryBudgets(Ticking):
    def __init__(
        self,
        registry: AgentRegistry,
        decisions: RolloutDecisions,
        fleet: FleetSpend | None = None,
    ) -> None:
        """``fleet``: the fleet's sum of canary spend (its shared Redis), if it has one."""
        super().__init__()
        self.registry = registry
        self.decisions = decisions
        self.fleet = fleet
        if fleet is not None:
            registry.rollouts.spend.share()
        self._states: dict[str, BudgetState] = {}
        self._sent_at = 0.0
        self._send_failed = False

    async def aclose(self) -> None:
        await super().aclose()
        await self._send()  # what this replica spent since the last addition

    async def _send(self) -> None:
        """Add what this replica's canaries spent to the fleet's sum; kept for the next
        time when Redis does not take it."""
        book = self.registry.rollouts.spend
        unsent = book.take_unsent()
        if self.fleet is None or not unsent:
            return
        try:
            await self.fleet.add_spend(unsent)
        except SessionStoreUnavailable as exc:
            book.unsend(unsent)
            if not self._send_failed:  # once per outage
                logger.warning("canary spend not added to the fleet's: {}", exc)
            self._send_failed = True
        else:
            self._send_failed = False

    async def _look(self) -> None:
        if self.fleet is not None and time.monotonic() >= self._sent_at + SEND_EVERY:
            self._sent_at = time.monotonic()
            await self._send()
        canaries = [(e.name, e.canary) for e in list(self.registry) if e.canary is not None]
        # This replica's book keeps the canaries still served, whatever their budgets.
        self.registry.rollouts.spend.keep((n, c.agent.revision) for n, c in canaries)
        budgeted = {name: c for name, c in canaries if c.policy.budget is not None}
        for name in [n for n in self._states if n not in budgeted]:
            del self._states[name]
            self.registry.attachments.remove(name, KIND)
        now = time.monotonic()
        for name, canary in budgeted.items():
            state = self._state(name, canary)
            if now >= state.due:
                state.due = now + state.policy.interval
                try:
                    await self._check(name, canary, state)
                except Exception:  # one agent's budget failing must not stop the rest
                    logger.exception("budget of agent {} failed", name)

    def _state(self, name: str, canary: Canary) -> BudgetState:
        policy = canary.policy.budget
        assert policy is not None
        state = self._states.get(name)
        if state is None or state.revision != canary.agent.revision or state.policy != policy:
            state = self._states[name] = BudgetState(canary.agent.revision, policy)
            self.registry.attachments.put(name, KIND, state)
        return state

    async def _check(self, name: str, canary: Canary, state: BudgetState) -> None:
        policy = state.policy
        state.since = _since(policy, canary.loaded_at, time.time())
        before = (state.spent, state.source, state.note, state.exceeded)
        found = await self._spent(name, canary, policy, state.since)
        if found[2] != state.note and found[1] == "replica" and policy_reads_prometheus(canary):
            logger.warning("budget of agent {}: {}", name, found[2])  # once, not every look
        state.spent, state.source, state.note = found
        if policy.usd is not None and not _priced(canary):
            state.spent = Spend(None, state.spent.tokens)
            state.note = "a model of the canary has no price in models.prices: no cost to judge"
        state.checked_at = time.time()
        reason = state.over()
        state.exceeded = reason is not None
        if (state.spent, state.source, state.note, state.exceeded) != before:
            self.registry.attachments.put(name, KIND, state)  # the status moved: tell watchers
        if reason is not None and canary.serving:
            logger.warning("budget pauses the canary of agent {}: {}", name, reason)
            try:
                await self.decisions.pause(name, reason, "budget")
            except DynagentError as exc:
                logger.warning("agent {} canary: the pause could not be written: {}", name, exc)

    async def _spent(
        self, name: str, canary: Canary, policy: BudgetPolicy, since: float
    ) -> tuple[Spend, str, str | None]:
        """The spend since ``since``, where it was read, and what to say about it."""
        revision = canary.agent.revision
        own = self.registry.rollouts.spend.spent(name, revision, policy.per)
        analysis = canary.policy.analysis
        failed: str | None = None
        """Why the Prometheus named did not answer."""
        if analysis is not None and analysis.prometheus is not None:
            assert self._session is not None
            try:
                usd, tokens = await prometheus_spend(
                    self._session, analysis.prometheus, name, revision, since
                )
            except SourceError as exc:
                failed = str(exc)
            else:
                return Spend(usd, tokens), "prometheus", None
        if self.fleet is not None:
            day = utc_day(time.time()) if policy.per == "day" else None
            try:
                return await self.fleet.spend(name, revision, day), "redis", failed
            except SessionStoreUnavailable as exc:
                why = f"{failed or _NO_PROMETHEUS}; {exc}"
                return own, "replica", f"{why}: this replica's spend meanwhile"
        if failed is None:
            return own, "replica", f"{_NO_PROMETHEUS}: this replica's spend"
        return own, "replica", f"{failed}; this replica's spend meanwhile"


def _since(policy: BudgetPolicy, started: float, now: float) -> float:
    """Where the spend counts from: the canary's start on this replica, or for ``per:
    day`` the last 00:00 UTC when that is later."""
    if policy.per == "rollout":
        return started
    midnight = datetime.fromtimestamp(now, UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return max(started, midnight.timestamp())


def _priced(canary: Canary) -> bool:
    """Whether every model the canary may call has a price: else its dollars are unknown."""
    agent = canary.agent
    return all(name in agent.prices for name in priced_names(agent.model))


def policy_reads_prometheus(canary: Canary) -> bool:
    """Whether the canary's budget reads the fleet's spend from Prometheus."""
    analysis = canary.policy.analysis
    return analysis is not None and analysis.prometheus is not None
