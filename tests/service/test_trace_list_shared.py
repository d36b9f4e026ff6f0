"""The traces list of a fleet on one Redis (``sessions.store: redis``): every replica lists
every replica's runs, each caller only theirs (an admin everyone's), after a restart too,
and captures them as a suite; what a replica kept alone while Redis was out is listed by
that replica beside the fleet's; with Redis out, a replica lists its own."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from dynagent.core import trace_list
from dynagent.core.auth import Caller
from dynagent.core.shared_runs import SharedRuns
from dynagent.core.trace_list import listing
from dynagent.core.traces import TraceStore
from tests.support import Reply, ScriptedModelServer
from tests.support.redis import RedisServer, redis_server
from tests.support.service import (
    FLEET_ADMIN,
    FLEET_KEY,
    FLEET_OTHER_KEY,
    Replica,
    RunningService,
    fleet_replicas,
)

__all__ = ["redis_server"]

KEY, OTHER_KEY, ADMIN = FLEET_KEY, FLEET_OTHER_KEY, FLEET_ADMIN


@pytest.fixture
def replica(
    model_server: ScriptedModelServer, redis_server: RedisServer, agents_dir: Path, tmp_path: Path
) -> Replica:
    return fleet_replicas(model_server, redis_server.url, agents_dir, tmp_path)


async def run(service: RunningService, text: str, key: str = KEY) -> str:
    status, answer = await service.call("POST", "/v1/agents/bot/invoke", key, {"input": text})
    assert status == 200, answer
    return str(answer["trace_id"])


async def listed(service: RunningService, key: str = KEY, query: str = "") -> list[str]:
    status, answer = await service.call("GET", f"/v1/traces{query}", key)
    assert status == 200, answer
    return [trace["trace_id"] for trace in answer["traces"]]


async def test_every_replica_lists_every_replicas_runs_each_caller_theirs(
    model_server: ScriptedModelServer, replica: Replica
) -> None:
    model_server.script("gpt-main", [Reply("ok")] * 3)
    async with replica("one") as one, replica("two") as two:
        first = await run(one, "first")
        theirs = await run(two, "theirs", OTHER_KEY)
        second = await run(two, "second")
        for service in (one, two):
            assert await listed(service) == [second, first]  # newest first
            assert await listed(service, OTHER_KEY) == [theirs]
            assert await listed(service, ADMIN) == [second, theirs, first]
        assert await listed(one, query="?limit=1") == [second]
        assert await listed(one, ADMIN, "?status=ok&agent=bot&limit=2") == [second, theirs]
        assert await listed(one, ADMIN, "?agent=other") == []
        status, answer = await one.call("GET", "/v1/traces?limit=1", KEY)
        newest = answer["traces"][0]
        assert status == 200 and newest["input"] == "second" and "principal" not in newest
        status, captured = await one.call("GET", "/v1/agents/bot/capture", ADMIN)
        assert status == 200, captured  # a backtest from production: every replica's runs
        assert [case["input"] for case in captured["suite"]["cases"]] == [
            "first",
            "theirs",
            "second",
        ]
    async with replica("three") as three:  # a restarted fleet lists what it had
        assert await listed(three, ADMIN) == [second, theirs, first]


async def test_runs_kept_alone_while_redis_was_out_are_listed_by_their_replica(
    model_server: ScriptedModelServer, replica: Replica, redis_server: RedisServer
) -> None:
    model_server.script("gpt-main", [Reply("ok")] * 2)
    async with replica("one") as one, replica("two") as two:
        shared = await run(one, "shared")
        await asyncio.to_thread(redis_server.stop)
        try:
            alone = await run(one, "alone")
            assert await listed(one) == [alone, shared]  # its own, while Redis is out
        finally:
            await asyncio.to_thread(redis_server.start)
        assert await listed(one) == [alone, shared]
        assert await listed(two) == [shared]


async def test_a_fleet_list_pages_through_every_line_newest_first(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = SharedRuns(
        redis_server.url,
        key_prefix="paging:",
        timeout=5.0,
        traces=(1000, 10_000_000),
        responses=(10, 10_000),
    )
    traces = TraceStore(1000, shared=shared)
    admin = Caller("admin", admin=True, principal="key:admin")
    me, them = Caller("me", principal="key:me"), Caller("them", principal="key:them")
    numbers = range(450)  # more than two pages of 200
    try:
        for n in numbers:
            line = {
                "trace_id": f"t{n:03d}",
                "agent": "bot" if n % 2 else "other",
                "started_at": float(n),
                "principal": "key:me" if n % 3 == 0 else "key:them",
            }
            assert await shared.keep("trace", f"t{n:03d}", {"n": n}, line)
        newest_first = [f"t{n:03d}" for n in reversed(numbers)]
        assert [line["trace_id"] for line in await listing(traces, admin, {}, 500)] == newest_first
        mine = await listing(traces, me, {"agent": "bot"}, 500)
        wanted = [f"t{n:03d}" for n in reversed(numbers) if n % 3 == 0 and n % 2]
        assert [line["trace_id"] for line in mine] == wanted
        assert len(await listing(traces, them, {}, 250)) == 250
        assert await listing(traces, them, {"agent": "nobody"}, 10) == []
        monkeypatch.setattr(trace_list, "MOST_READ", 400)  # a list reads so many lines at most
        assert [line["trace_id"] for line in await listing(traces, admin, {}, 500)] == (
            newest_first[:400]
        )
    finally:
        await shared.aclose()
