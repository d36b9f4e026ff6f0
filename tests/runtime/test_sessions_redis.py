"""The Redis session store as several replicas see it: one real redis-server, one store per
replica, a replica killed with SIGKILL while it holds a session, a lock that expired under
a run, the history budget, Redis restarted under a run, and a release lost to an outage."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from redis.asyncio import Redis

from dynagent.exceptions import SessionConflict
from dynagent.sessions.redis import RedisSessionStore
from tests.support import SYSTEM_PROMPT, AgentFactory, Reply, ScriptedModelServer, Slow
from tests.support.redis import RedisServer, redis_server

__all__ = ["redis_server"]

SYSTEM = {"role": "system", "content": SYSTEM_PROMPT}
PREFIX = "dynagent:session:"


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


@pytest.fixture
async def replicas(redis_server: RedisServer) -> AsyncIterator[Callable[..., RedisSessionStore]]:
    """Makes one store per 'replica' on the same server; all closed after the test."""
    made: list[RedisSessionStore] = []

    def make(**options: Any) -> RedisSessionStore:
        made.append(RedisSessionStore(redis_server.url, **options))
        return made[-1]

    yield make
    for store in made:
        await store.aclose()


async def test_a_conversation_alternating_replicas_continues(
    make_agent: AgentFactory,
    model_server: ScriptedModelServer,
    replicas: Callable[..., RedisSessionStore],
) -> None:
    model_server.script("gpt-main", [Reply("Hello Ada."), Reply("You are Ada."), Reply("Yes.")])
    one, two = make_agent(sessions=replicas()), make_agent(sessions=replicas())

    await one.run("I am Ada.", session_id="s")
    await two.run("Who am I?", session_id="s")
    await one.run("Sure?", session_id="s")

    assert [body["messages"] for body in model_server.requests] == [
        [SYSTEM, user("I am Ada.")],
        [SYSTEM, user("I am Ada."), assistant("Hello Ada."), user("Who am I?")],
        [
            SYSTEM,
            user("I am Ada."),
            assistant("Hello Ada."),
            user("Who am I?"),
            assistant("You are Ada."),
            user("Sure?"),
        ],
    ]


async def test_two_replicas_never_run_one_session_at_once(
    make_agent: AgentFactory,
    model_server: ScriptedModelServer,
    replicas: Callable[..., RedisSessionStore],
) -> None:
    model_server.script("gpt-main", [Slow(0.3, Reply("first")), Reply("second")])
    one, two = make_agent(sessions=replicas()), make_agent(sessions=replicas())

    first = asyncio.create_task(one.run("one", session_id="s"))
    while not model_server.requests:  # the first run holds the session and is in its model call
        await asyncio.sleep(0.005)
    await two.run("two", session_id="s")
    await first

    # the second replica's run waited and saw the first run's whole turn
    assert model_server.requests[1]["messages"] == [
        SYSTEM,
        user("one"),
        assistant("first"),
        user("two"),
    ]


HOLDER = """
import asyncio, sys
from dynagent.sessions.redis import RedisSessionStore

async def main():
    store = RedisSessionStore(sys.argv[1], lock_ttl=float(sys.argv[2]))
    async with store.lock("s"):
        print("held", flush=True)
        await asyncio.Event().wait()

asyncio.run(main())
"""


async def test_a_replica_killed_holding_a_session_does_not_wedge_it(
    redis_server: RedisServer, replicas: Callable[..., RedisSessionStore]
) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, redis_server.url, "1.0"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert await asyncio.to_thread(holder.stdout.readline) == "held\n"
        survivor = replicas()
        with pytest.raises(TimeoutError):  # while the holder lives, renewing, it keeps it
            async with asyncio.timeout(1.5):
                await survivor.lock("s").__aenter__()
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        async with asyncio.timeout(3):  # within the TTL it set, the session is free again
            async with survivor.lock("s"):
                await survivor.append("s", [user("after the crash")])
        assert await survivor.load("s") == [user("after the crash")]
    finally:
        holder.kill()
        holder.wait()


async def test_a_run_whose_lock_expired_and_was_taken_over_cannot_save(
    redis_server: RedisServer, replicas: Callable[..., RedisSessionStore]
) -> None:
    late, taker = replicas(), replicas()
    raw: Redis = Redis.from_url(redis_server.url)
    try:
        async with late.lock("s"):
            await raw.delete(f"{PREFIX}{{s}}:lock")  # its TTL ran out while it was stalled
            async with taker.lock("s"):
                await taker.append("s", [user("taker")])
            with pytest.raises(SessionConflict, match="was taken over by another run"):
                await late.append("s", [user("late")])
        assert await late.load("s") == [user("taker")]
    finally:
        await raw.aclose()


async def test_the_history_budget_drops_whole_oldest_turns(
    replicas: Callable[..., RedisSessionStore],
) -> None:
    turns = [[user(f"question {i}"), assistant("x" * 40)] for i in range(5)]
    size = len(json.dumps(turns[0]))  # every turn has this size, stored as one element
    store = replicas(history_bytes=2 * size + size // 2)
    for turn in turns:
        await store.append("s", turn)

    # the two newest turns fit in the budget; a turn is never split
    assert await store.load("s") == [*turns[3], *turns[4]]
    big = [user("y" * 500)]
    await store.append("s", big)
    assert await store.load("s") == big  # the newest turn is kept even over the budget


async def test_redis_restarted_under_a_write_loses_nothing_and_doubles_nothing(
    redis_server: RedisServer, replicas: Callable[..., RedisSessionStore]
) -> None:
    store = replicas()
    await store.append("s", [user("before")])
    redis_server.stop()
    writing = asyncio.create_task(store.append("s", [user("during")]))
    await asyncio.sleep(0.2)  # the write is retrying against a stopped server
    assert not writing.done()
    await asyncio.to_thread(redis_server.start)
    await writing
    assert await store.load("s") == [user("before"), user("during")]
    await asyncio.to_thread(redis_server.restart)
    assert await store.load("s") == [user("before"), user("during")]


async def test_the_first_pin_of_a_key_wins_on_every_replica(
    replicas: Callable[..., RedisSessionStore],
) -> None:
    one, two = replicas(), replicas()
    first, second = await asyncio.gather(one.pin("k", "canary"), two.pin("k", "stable"))
    assert first == second and first in ("canary", "stable")
    assert await two.pin("other", "stable") == "stable"


async def test_a_lock_whose_release_met_an_outage_is_released_once_redis_answers(
    redis_server: RedisServer, replicas: Callable[..., RedisSessionStore]
) -> None:
    """A release lost to an outage (a restart, a failover) frees the session as soon as
    Redis answers again, not when the lock expires ``lock_ttl`` later (600 s here)."""
    one, two = replicas(lock_ttl=600, timeout=0.5), replicas(lock_ttl=600)
    async with one.lock("s"):
        await one.append("s", [user("mine")])
        await asyncio.to_thread(redis_server.stop)  # the release below fails
    await asyncio.to_thread(redis_server.start)  # the lock is still there (append-only file)
    async with asyncio.timeout(30), two.lock("s"):
        await two.append("s", [user("yours")])
    assert await two.load("s") == [user("mine"), user("yours")]


async def test_a_delete_fences_off_a_run_whose_lock_expired_before_it(
    redis_server: RedisServer, replicas: Callable[..., RedisSessionStore]
) -> None:
    late, deleter = replicas(), replicas()
    raw: Redis = Redis.from_url(redis_server.url)
    try:
        await deleter.append("s", [user("before")])
        async with late.lock("s"):
            await raw.delete(f"{PREFIX}{{s}}:lock")  # its TTL ran out while it was stalled
            assert await deleter.delete("s")
            with pytest.raises(SessionConflict, match="was taken over by another run"):
                await late.append("s", [user("late")])  # it must not refill the session
        assert await deleter.load("s") == []
        assert [key async for key in raw.scan_iter(f"{PREFIX}{{s}}:turns")] == []
    finally:
        await raw.aclose()


async def test_a_turn_cancelled_while_its_lock_is_let_go_stays_cancelled(
    redis_server: RedisServer,
) -> None:
    store = RedisSessionStore(redis_server.url, timeout=2.0)

    async def turn() -> None:
        async with store.lock("s"):
            this = asyncio.current_task()
            assert this is not None
            # Cancelled as the turn ends: while the lock's renewer is being stopped.
            asyncio.get_running_loop().call_soon(this.cancel)

    try:
        with pytest.raises(asyncio.CancelledError):
            await asyncio.create_task(turn())
        async with asyncio.timeout(5), store.lock("s"):  # the lock was let go all the same
            pass
    finally:
        await store.aclose()


async def test_a_turn_cancelled_at_any_moment_stays_cancelled_and_leaves_the_session_free(
    replicas: Callable[..., RedisSessionStore],
) -> None:
    """A client that leaves, a run's deadline or a stopping service cancels a run in the
    middle of its session's commands; the cancellation must end it whatever command it
    lands in, and the session must be free for the next turn at once, not when the lock
    expires (``lock_ttl``, 600 s here). (On Python 3.11 ``asyncio.wait_for``, which
    redis-py puts around each command's write when given a socket timeout, returned the
    write instead of the cancellation when the two met: one turn in ten went on writing.
    A cancellation that cut off taking or letting go of the lock left it held.)"""
    store, other = replicas(lock_ttl=600), replicas(lock_ttl=600)

    async def turns() -> None:
        while True:
            async with store.lock("s"):
                await store.append("s", [user("again")])

    for steps in range(1, 241):  # cancelled after 1 to 240 turns of the event loop
        running = asyncio.create_task(turns())
        for _ in range(steps):
            await asyncio.sleep(0)
        running.cancel()
        ended, _ = await asyncio.wait({running}, timeout=10)
        if running not in ended:
            running.cancel()
        assert running in ended, f"cancelled after {steps} steps, the turns went on"
        assert running.cancelled(), running.exception()
        async with asyncio.timeout(10), other.lock("s"):  # the next turn, on any replica
            pass
