"""What canary revisions have spent on this replica, and what it has yet to add to the
fleet's sum (``FleetSpend``, in the Redis a fleet's sessions share): the figures
``rollout.budget`` reads when the fleet's are not in Prometheus."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, Protocol

BudgetPeriod = Literal["rollout", "day"]


@dataclass(frozen=True, slots=True)
class Spend:
    usd: float | None
    """None once a run had no known cost (its model has no price)."""
    tokens: int

    def plus(self, usd: float | None, tokens: int) -> Spend:
        total = None if self.usd is None or usd is None else self.usd + usd
        return Spend(total, self.tokens + tokens)


NOTHING = Spend(0.0, 0)


def utc_day(at: float) -> str:
    """The UTC date of a Unix time: where ``per: day`` budgets start again."""
    return datetime.fromtimestamp(at, UTC).date().isoformat()


Unsent = dict[tuple[str, str, str], Spend]
"""Spend not yet added to the fleet's, by agent, revision and UTC day."""


class FleetSpend(Protocol):
    """The fleet's sum of what canary revisions spent, which every replica adds to."""

    async def add_spend(self, spent: Mapping[tuple[str, str, str], Spend]) -> None:
        """Add each (agent, revision, UTC day)'s spend to the revision's total and day."""
        ...

    async def spend(self, agent: str, revision: str, day: str | None) -> Spend:
        """A revision's spend on ``day``, or in all (None)."""
        ...


class SpendBook:
    """Per agent and revision: everything its canary runs here spent, and what they spent
    on the current UTC day. Holds only the revisions a caller still keeps. Once ``share``
    is called, it also keeps what the fleet's sum still lacks until it is taken."""

    def __init__(self) -> None:
        self._total: dict[tuple[str, str], Spend] = {}
        self._day: dict[tuple[str, str], tuple[str, Spend]] = {}
        self._unsent: Unsent | None = None

    def share(self) -> None:
        """Keep what is spent here for the fleet's sum too (``take_unsent``)."""
        if self._unsent is None:
            self._unsent = {}

    def add(self, agent: str, revision: str, usd: float | None, tokens: int) -> None:
        key = (agent, revision)
        self._total[key] = self._total.get(key, NOTHING).plus(usd, tokens)
        today = utc_day(time.time())
        day, spent = self._day.get(key, (today, NOTHING))
        self._day[key] = (today, (spent if day == today else NOTHING).plus(usd, tokens))
        if self._unsent is not None:
            unsent = (agent, revision, today)
            self._unsent[unsent] = self._unsent.get(unsent, NOTHING).plus(usd, tokens)

    def take_unsent(self) -> Unsent:
        """What the fleet's sum lacks, handed over (and forgotten here)."""
        if self._unsent is None:
            return {}
        taken, self._unsent = self._unsent, {}
        return taken

    def unsend(self, taken: Unsent) -> None:
        """``taken`` back, its sending failed: it goes with the next."""
        if self._unsent is not None:
            for key, spent in taken.items():
                self._unsent[key] = self._unsent.get(key, NOTHING).plus(spent.usd, spent.tokens)

    def spent(self, agent: str, revision: str, per: BudgetPeriod) -> Spend:
        key = (agent, revision)
        if per == "rollout":
            return self._total.get(key, NOTHING)
        day, spent = self._day.get(key, ("", NOTHING))
        return spent if day == utc_day(time.time()) else NOTHING

    def keep(self, kept: Iterable[tuple[str, str]]) -> None:
        """Forget every (agent, revision) but ``kept``: the canaries still served."""
        wanted = set(kept)
        for book in (self._total, self._day):
            for key in [k for k in book if k not in wanted]:
                del book[key]
