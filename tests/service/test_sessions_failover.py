"""Sessions on a replicated Redis watched by Sentinels (``redis+sentinel://``): the primary
is killed (SIGKILL) while two replicas of the service carry on conversations. Every turn
answered 200 is in its session after the failover, in order; a run that held a session's
lock before the failover and wakes up after another run took it over is fenced off and
never writes over the newer turn; with no replica to hold a write, none is reported
saved; the time from the kill until sessions are writable
again is measured (printed; figures over many kills are in ``bench.redis_failover``)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from dynagent.exceptions import SessionStoreUnavailable
from dynagent.sessions.redis import RedisSessionStore
from dynagent.sessions.scope import ANONYMOUS as ANONYMOUS_PRINCIPAL
from dynagent.sessions.scope import session_key
from tests.support import Reply, ScriptedModelServer
from tests.support.redis import RedisSentinelSet, redis_sentinel
from tests.support.service import (
    RunningService,
    agent_document,
    running_service,
    service_config,
    write_agent,
)

__all__ = ["redis_sentinel"]

pytestmark = pytest.mark.slow

SESSIONS = 4
BEFORE = 2
"""Turns each conversation has answered before the primary is killed."""
AFTER = 3
"""Turns each conversation has answered after it."""


async def _turn(service: RunningService, session: str, text: str) -> tuple[int, Any, str | None]:
    response = await service.client.post(
        "/v1/agents/bot/invoke", json={"input": text, "session_id": session}
    )
    return response.status, await response.json(), response.headers.get("Retry-After")


async def _user_turns(url: str, session: str) -> list[str]:
    store = RedisSessionStore(url, timeout=10.0)
    try:
        key = session_key(ANONYMOUS_PRINCIPAL, "bot", session)
        return [m["content"] for m in await store.load(key) if m["role"] == "user"]
    finally:
        await store.aclose()


async def test_a_primary_killed_under_session_load_loses_no_answered_turn(
    model_server: ScriptedModelServer,
    redis_sentinel: RedisSentinelSet,
    agents_dir: Path,
    tmp_path: Path,
) -> None:
    write_agent(agents_dir, agent_document("bot", model_server))
    model_server.script("gpt-main", [Reply("ok")], cycle=True)
    sessions = {"store": "redis", "url": redis_sentinel.url}
    answered: dict[str, list[str]] = {f"conv-{i}": [] for i in range(SESSIONS)}
    refusals: list[tuple[int, str, str | None]] = []
    ready = asyncio.Barrier(SESSIONS + 1)
    killed: list[float] = []
    writable: list[float] = []

    async def converse(session: str, replicas: tuple[RunningService, ...]) -> None:
        turn = after = 0
        waited = False
        while after < AFTER:
            if turn == BEFORE and not waited:
                await ready.wait()  # every conversation has answered turns before the kill
                waited = True
            began = time.monotonic()
            text = f"{session} turn {turn}"
            status, body, retry = await _turn(replicas[turn % 2], session, text)
            if status != 200:  # the store is out for a moment: the caller retries the turn
                refusals.append((status, body["error"]["type"], retry))
                await asyncio.sleep(float(retry or 1))
                continue
            answered[session].append(text)
            turn += 1
            if killed and began >= killed[0]:
                writable.append(time.monotonic())
                after += 1

    one = service_config(agents_dir, tmp_path / "one", sessions=sessions)
    two = service_config(agents_dir, tmp_path / "two", sessions=sessions)
    async with (
        running_service(one) as first,
        running_service(two) as second,
        asyncio.timeout(120),
        asyncio.TaskGroup() as load,
    ):
        for session in answered:
            load.create_task(converse(session, (first, second)))
        await ready.wait()
        old = await asyncio.to_thread(redis_sentinel.kill_primary)
        killed.append(time.monotonic())

    assert await asyncio.to_thread(redis_sentinel.primary) != old
    for session, texts in answered.items():
        kept = await _user_turns(redis_sentinel.url, session)
        assert _in_order(texts, kept), (session, texts, kept)
        assert len(texts) >= BEFORE + AFTER
    assert {(status, kind, retry) for status, kind, retry in refusals} <= {
        (503, "unavailable", "1")
    }
    print(f"failover: sessions writable again {min(writable) - killed[0]:.2f} s after the kill")


def _in_order(answered: list[str], kept: list[str]) -> bool:
    """Every answered turn is kept, in the order answered (a turn refused with 503 after its
    write may be kept too: it was never reported saved)."""
    rest = iter(kept)
    return all(any(text == seen for seen in rest) for text in answered)


_HOLDER = """
import asyncio, sys
from dynagent.sessions.redis import RedisSessionStore

async def main():
    store = RedisSessionStore(sys.argv[1], lock_ttl=1.0, timeout=10.0)
    async with store.lock("fenced"):
        print("locked", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        try:
            await store.append("fenced", [{"role": "user", "content": "before the failover"}])
        except Exception as exc:
            print(type(exc).__name__, flush=True)
        else:
            print("saved", flush=True)
    await store.aclose()

asyncio.run(main())
"""
"""A run holding a session's lock: it stops (SIGSTOP: a long pause, as a stalled process
has), and writes its turn once it is continued."""


async def test_a_lock_held_across_a_failover_is_fenced_off_after_a_takeover(
    redis_sentinel: RedisSentinelSet,
) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    holder = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _HOLDER,
        redis_sentinel.url,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env=env,
    )
    assert holder.stdin is not None and holder.stdout is not None
    try:
        assert await asyncio.wait_for(holder.stdout.readline(), 30) == b"locked\n"
        holder.send_signal(signal.SIGSTOP)
        await asyncio.to_thread(redis_sentinel.kill_primary)

        newer = RedisSessionStore(redis_sentinel.url, lock_ttl=1.0, timeout=2.0)
        try:
            async with asyncio.timeout(60):
                await _write_when_writable(newer, "fenced", "after the failover")
        finally:
            await newer.aclose()

        holder.send_signal(signal.SIGCONT)
        holder.stdin.write(b"go\n")
        await holder.stdin.drain()
        verdict = await asyncio.wait_for(holder.stdout.readline(), 60)
    finally:
        if holder.returncode is None:
            holder.send_signal(signal.SIGCONT)
        await asyncio.wait_for(holder.wait(), 60)

    assert verdict == b"SessionConflict\n"
    store = RedisSessionStore(redis_sentinel.url, timeout=10.0)
    try:
        assert await store.load("fenced") == [{"role": "user", "content": "after the failover"}]
    finally:
        await store.aclose()


async def _write_when_writable(store: RedisSessionStore, session: str, text: str) -> None:
    """Take the session's lock (it is free once the stopped holder's lock expires) and
    write a turn, retrying while the failover makes the store unavailable."""
    while True:
        try:
            async with store.lock(session):
                await store.append(session, [{"role": "user", "content": text}])
        except SessionStoreUnavailable as exc:
            await asyncio.sleep(exc.retry_after)
        else:
            return


async def test_a_turn_no_replica_holds_is_never_reported_saved(
    redis_sentinel: RedisSentinelSet,
) -> None:
    """With every replica stalled, the primary alone takes writes that a failover now would
    lose: neither a lock token nor a turn counts as written (503 ``unavailable``)."""
    store = RedisSessionStore(redis_sentinel.url, timeout=1.0)
    try:
        async with store.lock("s"):
            await store.append("s", [{"role": "user", "content": "kept"}])
        await asyncio.to_thread(redis_sentinel.pause_replicas, signal.SIGSTOP)
        try:
            with pytest.raises(SessionStoreUnavailable, match=r"no replica .* \(WAIT 1\)"):
                async with store.lock("s"):
                    await store.append("s", [{"role": "user", "content": "unreplicated"}])
        finally:
            await asyncio.to_thread(redis_sentinel.pause_replicas, signal.SIGCONT)
        await store.ping()
        async with store.lock("s"):  # the refused token was given back: the lock is free
            await store.append("s", [{"role": "user", "content": "replicated again"}])
        assert [m["content"] for m in await store.load("s")] == ["kept", "replicated again"]
    finally:
        await store.aclose()
