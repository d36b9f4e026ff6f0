"""Redis primary loss → sessions writable again: a Sentinel-watched set
(``scripts/redis.sh sentinel``: a primary, two replicas, three Sentinels on loopback, a
primary called down after 1 s of silence) carries session turns from a few writers
through the session store (``redis+sentinel://``); the primary is killed (SIGKILL), and
the time from the kill to the first turn written that began after it is one sample. The
killed node is started again (it rejoins as a replica) and the set is whole before the
next kill. At the end every turn the store reported saved is checked to be there.

    .venv/bin/python -m bench.redis_failover --kills 5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from bench._stats import summary
from dynagent.exceptions import SessionStoreUnavailable
from dynagent.sessions.redis import RedisSessionStore
from tests.support.redis import HOST, RedisSentinelSet, free_ports

RESULTS = Path(__file__).parent / "results" / "redis_failover.json"
WRITERS = 4
DOWN_AFTER_MS = 1000
WRITABLE_WITHIN = 60.0
"""Seconds a kill may leave the sessions unwritable before the bench fails instead."""
STOP_WITHIN = 10.0
"""Seconds the writers have to stop once cancelled."""


async def measure(kills: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="dynagent-sentinel-") as home:
        nodes = RedisSentinelSet(
            free_ports(3), free_ports(3), Path(home), down_after_ms=DOWN_AFTER_MS
        )
        try:
            await asyncio.to_thread(nodes.start, clean=True)
            return await _kills(nodes, kills)
        finally:
            await asyncio.to_thread(nodes.stop)


async def _kills(nodes: RedisSentinelSet, kills: int) -> dict[str, Any]:
    store = RedisSessionStore(nodes.url, timeout=2.0)
    saved: dict[str, list[str]] = {f"s{i}": [] for i in range(WRITERS)}
    written = _Writes()
    samples: list[float] = []
    writers = [asyncio.create_task(_write(store, s, saved[s], written)) for s in saved]
    try:
        for _ in range(kills):
            await _whole(nodes)
            await _first_write_after(written, time.monotonic())
            await asyncio.to_thread(nodes.kill_primary)
            killed = time.monotonic()
            samples.append(await _first_write_after(written, killed) - killed)
            await asyncio.to_thread(nodes.start)  # the killed node rejoins as a replica
        for writer in writers:
            writer.cancel()
        async with asyncio.timeout(STOP_WITHIN):  # a writer that does not stop is a fault
            await asyncio.gather(*writers, return_exceptions=True)
        lost = 0
        for session, texts in saved.items():
            kept = {m["content"] for m in await store.load(session)}
            lost += sum(1 for text in texts if text not in kept)
    finally:
        for writer in writers:
            writer.cancel()
        await store.aclose()
    return {
        "what": "SIGKILL of the Redis primary under session writes (lock, append with WAIT 1, "
        "release) → the first write begun after it that succeeds; Sentinel down-after "
        f"{DOWN_AFTER_MS} ms, {WRITERS} writers, sessions.timeout 2 s",
        "writable_again_s": summary(samples, digits=2),
        "turns_saved": sum(len(texts) for texts in saved.values()),
        "turns_lost": lost,
    }


class _Writes:
    """When each saved turn began, newest last; ``changed`` is set on each."""

    def __init__(self) -> None:
        self.began: list[float] = []
        self.changed = asyncio.Event()

    def add(self, began: float) -> None:
        self.began.append(began)
        self.changed.set()


async def _write(
    store: RedisSessionStore, session: str, saved: list[str], written: _Writes
) -> None:
    """Turns one after another; a refusal (the store is out) is retried after its pause."""
    turn = 0
    while True:
        began = time.monotonic()
        text = f"{session} turn {turn}"
        try:
            async with store.lock(session):
                await store.append(session, [{"role": "user", "content": text}])
        except SessionStoreUnavailable as exc:
            await asyncio.sleep(exc.retry_after)
            continue
        saved.append(text)
        written.add(began)
        turn += 1


async def _first_write_after(written: _Writes, moment: float) -> float:
    """When the first write that began after ``moment`` ended (``TimeoutError`` past
    ``WRITABLE_WITHIN``: the sessions never came back)."""
    async with asyncio.timeout(WRITABLE_WITHIN):
        while not (written.began and written.began[-1] > moment):
            written.changed.clear()
            await written.changed.wait()
    return time.monotonic()


async def _whole(nodes: RedisSentinelSet, within: float = 60) -> None:
    """Until the primary has every replica online (Redis pushes no such event: polled)."""
    async with asyncio.timeout(within):
        while True:
            if await asyncio.to_thread(_in_sync, nodes):
                return
            await asyncio.sleep(0.1)


def _in_sync(nodes: RedisSentinelSet) -> bool:
    with contextlib.suppress(redis.RedisError):
        primary = nodes.primary()
        with redis.Redis(host=HOST, port=primary, socket_timeout=2) as client:
            info = client.info("replication")
        online = [v for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)]
        return (
            info["role"] == "master"
            and sum(1 for v in online if v.get("state") == "online") == nodes.replicas
        )
    return False


def table(data: dict[str, Any]) -> str:
    again = data["writable_again_s"]
    return (
        f"Redis primary killed → sessions writable again: p50 {again.get('median')} s, "
        f"max {again.get('max')} s over {again.get('n')} kills; "
        f"{data['turns_saved']} turns saved, {data['turns_lost']} lost\n({data['what']})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=5)
    args = parser.parse_args()
    data = asyncio.run(measure(args.kills))
    print(table(data))
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
