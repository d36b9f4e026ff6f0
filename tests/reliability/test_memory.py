"""Memory stays flat over 10,000 runs: after a warm-up, neither the process (RSS) nor
Python's allocations (tracemalloc) grow past a small bound, and every structure that
lives as long as the service stays bounded: the trace store, session locks, revision
history, per-variant figures, metric series and the drain's running set.
``DYNAGENT_SOAK=1`` runs 100,000."""

from __future__ import annotations

import asyncio
import gc
import itertools
import sys
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from dynagent import Agent, AgentBuilder, load_spec
from dynagent.http.state import SERVICE
from dynagent.registry.table import HISTORY
from dynagent.sessions.sqlite import SqliteSessionStore
from tests.support.service import RunningService, agent_document

from .conftest import SOAK, Serve

pytestmark = pytest.mark.timeout(900 if SOAK else 120)

RUNS = 100_000 if SOAK else 10_000
WARMUP = 1_000
CLIENTS = 8
MAX_TRACES = 200
RSS_BOUND = 5 * 1024 * 1024
BLOCKS_BOUND = 2_000


def rss() -> int:
    """Resident set size of this process, in bytes (Linux)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * 4096


def series(service: RunningService) -> int:
    """How many metric series (samples) the service exposes."""
    return sum(len(family.samples) for family in service.app[SERVICE].metrics.registry.collect())


def mib(size: float) -> str:
    return f"{size / 1024 / 1024:.2f} MiB"


async def run_all(count: int, call: Callable[[int], Awaitable[None]]) -> None:
    numbers = itertools.count()

    async def worker() -> None:
        while (n := next(numbers)) < count:
            await call(n)

    await asyncio.gather(*(worker() for _ in range(CLIENTS)))


def http_call(
    http: aiohttp.ClientSession, url: str, offset: int
) -> Callable[[int], Awaitable[None]]:
    """Round-robin over the ways to run an agent: JSON with a new session, a stream,
    the OpenAI-compatible endpoint, JSON without a session."""

    async def call(n: int) -> None:
        n += offset
        kind = n % 4
        path = "/v1/chat/completions" if kind == 2 else "/v1/agents/bot/invoke"
        body: dict[str, Any] = {"input": "what is 6 * 7?"}
        if kind == 0:
            body["session_id"] = f"s-{n}"
        elif kind == 1:
            body["stream"] = True
        elif kind == 2:
            body = {"model": "bot", "messages": [_USER]}
        async with http.post(url + path, json=body) as response:
            await response.read()
            assert response.status == 200, await response.text()

    return call


_USER = {"role": "user", "content": "what is 6 * 7?"}


@pytest.mark.slow  # 10,000 runs
async def test_memory_stays_flat_over_10000_runs_through_http(serve: Serve) -> None:
    bot = agent_document("bot", tools=["calculator"])
    async with (
        serve(bot, traces={"max_traces": MAX_TRACES}) as service,
        aiohttp.ClientSession() as http,  # not the test client: it keeps every response
    ):
        # The latency guard compares p95s of a few dozen requests: on a busy machine one
        # stall can pull the canary, and a pulled canary's figures stop growing. What this
        # test measures is memory, so the guard only watches errors here.
        rollout = {"weight": 50, "guard": {"max_latency_ratio": 1_000_000}}
        service.write_agent(
            {**bot, "description": "canary", "rollout": rollout}, filename="bot.canary.yaml"
        )
        await service.registry.wait_for(lambda r: r.entry("bot").canary is not None)
        await run_all(WARMUP, http_call(http, service.url, 0))
        gc.collect()
        rss_before, series_before, blocks = rss(), series(service), sys.getallocatedblocks()
        await run_all(RUNS, http_call(http, service.url, WARMUP))
        gc.collect()
        rss_after, series_after = rss(), series(service)
        grown = sys.getallocatedblocks() - blocks

        app = service.app
        agent = app[SERVICE].registry.get("bot")
        assert isinstance(agent.sessions, SqliteSessionStore)
        locks = len(agent.sessions._locks._locks)  # held or awaited session locks
        traces = len(app[SERVICE].traces._traces)
        stats = {key: len(s.recent) for key, s in app[SERVICE].registry.rollouts._stats.items()}
        canary = app[SERVICE].registry.entry("bot").canary
        pulled = canary.pulled if canary else "no canary"
        history = len(app[SERVICE].registry.history("bot"))
        running = app[SERVICE].drain.running
        labels = {"agent": "bot", "variant": "stable", "endpoint": "invoke", "outcome": "ok"}
        requests = app[SERVICE].metrics.registry.get_sample_value("dynagent_requests_total", labels)

    print(
        f"\nHTTP: {RUNS} runs after {WARMUP} to warm up: RSS {mib(rss_before)} -> "
        f"{mib(rss_after)} ({mib(rss_after - rss_before)}); allocated blocks {grown:+d}; "
        f"metric series {series_before} -> {series_after}; traces kept {traces}; "
        f"stats windows {stats}"
    )
    assert rss_after - rss_before < RSS_BOUND
    assert grown < BLOCKS_BOUND
    assert series_after == series_before
    assert (locks, traces, running) == (0, MAX_TRACES, 0)
    assert pulled is None, pulled
    assert stats == {("bot", "stable"): 200, ("bot", "canary"): 200}
    assert history <= HISTORY
    assert requests is not None and requests > RUNS // 4


async def run_agent_many(agent: Agent, count: int, offset: int) -> None:
    async def call(n: int) -> None:
        n += offset
        if n % 2:
            await agent.run("what is 6 * 7?", session_id=f"s-{n}" if n % 4 == 1 else None)
        else:
            async for _ in agent.stream("what is 6 * 7?"):
                pass

    await run_all(count, call)


async def test_agent_runs_leave_no_allocations_behind(tmp_path: Path) -> None:
    """``sys.getallocatedblocks`` rather than tracemalloc, which would triple the time:
    one object kept per run would be 10,000 blocks. ``PYTHONTRACEMALLOC=1`` adds the
    allocation sites that grew, for a diagnosis."""
    spec = load_spec(agent_document("bot", tools=["calculator"]))
    store = await asyncio.to_thread(SqliteSessionStore, tmp_path / "sessions.db")
    agent = AgentBuilder(environ={}, sessions=store).build(spec)
    try:
        await run_agent_many(agent, WARMUP, 0)
        snapshot = tracemalloc.take_snapshot() if tracemalloc.is_tracing() else None
        gc.collect()
        blocks, rss_before = sys.getallocatedblocks(), rss()
        await run_agent_many(agent, RUNS, WARMUP)
        gc.collect()
        grown, rss_after = sys.getallocatedblocks() - blocks, rss()
        sites = "" if snapshot is None else _grown_sites(snapshot)
    finally:
        await store.aclose()

    print(
        f"\nAgent.run: {RUNS} runs after {WARMUP}: allocated blocks {grown:+d}; RSS "
        f"{mib(rss_before)} -> {mib(rss_after)} ({mib(rss_after - rss_before)}){sites}"
    )
    assert grown < BLOCKS_BOUND, sites
    assert rss_after - rss_before < RSS_BOUND
    assert len(store._locks._locks) == 0


def _grown_sites(before: tracemalloc.Snapshot) -> str:
    stats = tracemalloc.take_snapshot().compare_to(before, "lineno")[:10]
    return "".join(f"\n  {stat}" for stat in stats)
