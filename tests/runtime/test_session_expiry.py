"""Sessions expire: every store deletes a conversation ``sessions.ttl`` after its last
use, and every use (a read or a write) renews it. Redis keys carry a TTL (a real
redis-server); SQLite and memory sweep on use, with the clock given to them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from dynagent.sessions.memory import MemorySessionStore
from dynagent.sessions.redis import RedisSessionStore
from dynagent.sessions.sqlite import SqliteSessionStore
from tests.support.redis import RedisServer, redis_server

__all__ = ["redis_server"]

TTL = 3600.0
PREFIX = "dynagent:session:"
TURN: list[Any] = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=["sqlite", "memory"])
async def store(
    request: pytest.FixtureRequest, clock: Clock, tmp_path: Path
) -> AsyncIterator[SqliteSessionStore | MemorySessionStore]:
    if request.param == "sqlite":
        # Opening the file is file I/O: off the loop, as the service does it.
        made: SqliteSessionStore | MemorySessionStore = await asyncio.to_thread(
            lambda: SqliteSessionStore(tmp_path / "sessions.db", ttl=TTL, clock=clock)
        )
    else:
        made = MemorySessionStore(ttl=TTL, clock=clock)
    yield made
    await made.aclose()


async def test_an_unused_session_is_gone_after_the_ttl_and_a_used_one_stays(
    store: SqliteSessionStore | MemorySessionStore, clock: Clock
) -> None:
    await store.append("old", TURN)
    await store.append("kept", TURN)
    clock.now += TTL * 0.75
    assert await store.load("kept") == TURN  # a read renews it
    clock.now += TTL * 0.5  # "old": 1.25 ttl unused; "kept": 0.5 ttl since the read

    await store.append("other", TURN)  # any use sweeps

    assert (await store.load("old"), await store.load("kept")) == ([], TURN)


async def test_a_session_used_just_inside_the_ttl_is_kept(
    store: SqliteSessionStore | MemorySessionStore, clock: Clock
) -> None:
    await store.append("s", TURN)
    clock.now += TTL - 1
    await store.append("other", TURN)
    assert await store.load("s") == TURN


async def test_sqlite_sessions_written_before_expiry_existed_expire_from_their_last_message(
    tmp_path: Path, clock: Clock
) -> None:
    path = tmp_path / "sessions.db"
    first = await asyncio.to_thread(lambda: SqliteSessionStore(path, ttl=TTL, clock=clock))
    await first.append("s", TURN)
    # As a database from before sessions expired:
    await asyncio.to_thread(first._db.execute, "DROP TABLE sessions")
    await first.aclose()

    clock.now += TTL + 1
    again = await asyncio.to_thread(lambda: SqliteSessionStore(path, ttl=TTL, clock=clock))
    try:
        assert await again.load("s") == []
        count = await asyncio.to_thread(
            lambda: again._db.execute("SELECT COUNT(*) FROM messages").fetchone()
        )
        assert count == (0,)
    finally:
        await again.aclose()


async def test_every_redis_key_of_a_session_expires_and_a_read_renews_it(
    redis_server: RedisServer,
) -> None:
    store = RedisSessionStore(redis_server.url, ttl=TTL)
    raw = Redis.from_url(redis_server.url)
    try:
        async with store.lock("s"):
            await store.append("s", TURN)
        keys = sorted(
            k.decode() if isinstance(k, bytes) else k for k in await raw.keys(f"{PREFIX}{{s}}:*")
        )
        assert keys == [f"{PREFIX}{{s}}:{what}" for what in ("bytes", "fence", "turns", "written")]
        ttls = [await raw.pttl(key) for key in keys]
        assert all(TTL * 1000 - 60_000 < t <= TTL * 1000 for t in ttls), ttls

        for key in keys:  # as if almost all of the time had passed
            await raw.pexpire(key, 5_000)
        assert await store.load("s") == TURN
        renewed = [await raw.pttl(key) for key in keys]
        assert all(t > TTL * 1000 - 60_000 for t in renewed), renewed
    finally:
        await raw.flushdb()
        await raw.aclose()
        await store.aclose()
