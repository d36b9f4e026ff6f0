"""What canary revisions have spent on this replica: the figures ``rollout.budget`` reads
when the fleet's are not in Prometheus."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

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


class SpendBook:
    """Per agent and revision: everything its canary runs here spent, and what they spent
    on the current UTC day. Holds only the revisions a caller still keeps."""

    def __init__(self) -> None:
        self._total: dict[tuple[str, str], Spend] = {}
        self._day: dict[tuple[str, str], tuple[str, Spend]] = {}

    def add(self, agent: str, revision: str, usd: float | None, tokens: int) -> None:
        key = (agent, revision)
        self._total[key] = self._total.get(key, NOTHING).plus(usd, tokens)
        today = utc_day(time.time())
        day, spent = self._day.get(key, (today, NOTHING))
        self._day[key] = (today, (spent if day == today else NOTHING).plus(usd, tokens))

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
