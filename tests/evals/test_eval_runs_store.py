"""The replica's evaluation runs: bounded per agent and in all, newest first, an evicted
run's task cancelled, and a follower that joins late still sees every event."""

from __future__ import annotations

import asyncio

from dynagent.core.eval_runs import EvalHandle, EvalRuns
from dynagent.evals.runner import SuiteRun


def handle(agent: str) -> EvalHandle:
    return EvalHandle(SuiteRun(agent, "r1", "stable", "s1", 0), "api", "ops")


async def test_the_store_keeps_the_newest_runs_per_agent_and_in_all() -> None:
    runs = EvalRuns(per_agent=2, total=3)
    a1, a2, a3, b1, b2 = (handle(n) for n in ("a", "a", "a", "b", "b"))
    held = asyncio.Event()

    async def running() -> SuiteRun:
        await held.wait()
        return a1.run

    a1.task = asyncio.get_running_loop().create_task(running())
    for name, each in (("a", a1), ("a", a2), ("a", a3), ("b", b1), ("b", b2)):
        runs.add(name, each)
    assert runs.list("a") == [a3]  # a1 went past 2 of "a", a2 past 3 in all
    assert runs.list("b") == [b2, b1]
    assert runs.get("a", a1.id) is None and runs.get("b", a3.id) is None
    await asyncio.sleep(0)
    assert a1.task.cancelled()


async def test_a_late_follower_sees_every_event_and_the_end() -> None:
    each = handle("a")
    each.finish()
    seen = [name async for name, _ in each.follow()]
    assert seen == ["done"]
