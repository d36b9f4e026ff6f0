"""``rollout.budget`` on the fleet's spend without Prometheus: when the fleet's sessions
share a Redis, every replica adds its canary runs' spend there, and the budget reads the
sum, so a canary that no replica alone takes past its budget is paused all the same."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dynagent.core.shared_runs import SharedRuns
from dynagent.registry.spend import Spend, SpendBook
from tests.analysis.test_budgets import (
    NO_GUARD,
    PRICES,
    budget_shows,
    on_canary,
    paused_by_budget,
    paused_on_this_replicas_spend,
    start_canary,
)
from tests.support import Reply, ScriptedModelServer
from tests.support.canary import canary_document, canary_filename
from tests.support.redis import RedisServer, redis_server
from tests.support.service import running_service, service_config

__all__ = ["redis_server"]


async def test_what_the_replicas_spent_together_pauses_a_canary_none_took_past_its_budget(
    model_server: ScriptedModelServer,
    redis_server: RedisServer,
    agents_dir: Path,
    tmp_path: Path,
) -> None:
    model_server.script("m-canary", [Reply("from the canary")] * 3)
    sessions = {"store": "redis", "url": redis_server.url}

    def config(name: str) -> Any:
        return service_config(
            agents_dir, tmp_path / name, models={"prices": PRICES}, sessions=sessions
        )

    async with (
        running_service(config("one"), environ={}) as one,
        running_service(config("two"), environ={}) as two,
    ):
        # What one run spends is known once one has run: the budget is written after it.
        huge = {"tokens": 10**12, "interval": 0.2}
        candidate = await start_canary(one, model_server, budget=huge)
        first = await on_canary(one)
        tokens = first["usage"]["total_tokens"]
        await one.registry.wait_for(budget_shows(tokens), within=60)
        budget = {"tokens": int(2.5 * tokens), "interval": 0.2}
        one.write_agent(
            canary_document(candidate, 10, guard=NO_GUARD, budget=budget),
            filename=canary_filename("bot"),
        )
        for replica in (one, two):
            await replica.registry.wait_for(
                lambda r: (
                    (c := r.entry("bot").canary) is not None
                    and c.policy.budget is not None
                    and c.policy.budget.tokens == budget["tokens"]
                )
            )
        await on_canary(one)  # this replica's own: 2 runs, within the budget
        await two.registry.wait_for(budget_shows(2 * tokens), within=60)
        assert not paused_by_budget(two.registry)
        await on_canary(two)  # the third run of the fleet, on the other replica
        for replica in (one, two):
            await replica.registry.wait_for(paused_by_budget, within=60)
            await replica.registry.wait_for(budget_shows(3 * tokens), within=60)
        status = one.registry.status("bot")["canary"]["budget"]
        paused = one.registry.entry("bot").canary
        assert paused is not None
        own = one.registry.rollouts.spend.spent("bot", paused.agent.revision, "rollout")

    assert own.tokens == 2 * tokens  # this replica alone never went past the budget
    assert (status["source"], status["note"], status["spent_tokens"]) == ("redis", None, 3 * tokens)
    assert paused is not None and paused.policy.paused is not None
    assert paused.policy.paused.reason.endswith("redis figures)")


async def test_the_fleets_spend_adds_up_in_all_and_per_day(redis_server: RedisServer) -> None:
    shared = SharedRuns(
        redis_server.url, key_prefix="t:", timeout=2, traces=(10, 1 << 20), responses=(10, 1 << 20)
    )
    try:
        await shared.add_spend({("bot", "r1", "2026-12-04"): Spend(0.25, 100)})
        await shared.add_spend(
            {("bot", "r1", "2026-12-05"): Spend(0.5, 40), ("bot", "r2", "2026-12-05"): Spend(1, 1)}
        )
        total = await shared.spend("bot", "r1", None)
        day = await shared.spend("bot", "r1", "2026-12-05")
        await shared.add_spend({("bot", "r1", "2026-12-05"): Spend(None, 5)})  # no price
        unpriced = await shared.spend("bot", "r1", None)
        unknown = await shared.spend("other", "r1", None)
    finally:
        await shared.aclose()
    assert (total, day) == (Spend(0.75, 140), Spend(0.5, 40))
    assert unpriced == Spend(None, 145)
    assert unknown == Spend(0.0, 0)


def test_spend_the_fleet_did_not_take_goes_with_the_next_addition() -> None:
    book = SpendBook()
    book.add("bot", "r1", 0.5, 10)  # before sharing: this replica's only
    assert book.take_unsent() == {}
    book.share()
    book.add("bot", "r1", 0.25, 4)
    taken = book.take_unsent()
    [(key, spent)] = taken.items()
    assert (key[:2], spent) == (("bot", "r1"), Spend(0.25, 4))
    assert book.take_unsent() == {}
    book.unsend(taken)  # Redis did not take it
    book.add("bot", "r1", 0.25, 4)
    assert book.take_unsent() == {key: Spend(0.5, 8)}
    assert book.spent("bot", "r1", "rollout") == Spend(1.0, 18)  # this replica's own, whole


async def test_with_redis_out_the_budget_reads_this_replicas_spend_meanwhile(
    model_server: ScriptedModelServer,
    redis_server: RedisServer,
    agents_dir: Path,
    tmp_path: Path,
) -> None:
    model_server.script("m-canary", [Reply("from the canary")])
    sessions = {"store": "redis", "url": redis_server.url, "timeout": 1}
    config = service_config(agents_dir, tmp_path, models={"prices": PRICES}, sessions=sessions)
    async with running_service(config, environ={}) as service:
        await start_canary(service, model_server, budget={"tokens": 1, "interval": 0.2})
        redis_server.stop()
        note = await paused_on_this_replicas_spend(service)

    assert note.startswith("no Prometheus in rollout.analysis; ")
    assert "Redis is unavailable" in note
    assert note.endswith(": this replica's spend meanwhile")
