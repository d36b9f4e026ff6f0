"""The fleet: ``scripts/fleet.sh`` (Nacos, Redis, three ``dynagent serve`` replicas, nginx).

1. Requests/s and server CPU per request through nginx with 3, 2 and 1 replicas serving
   (the others stopped). On two cores the point is that CPU per request stays flat.
2. Session turn latency, in-process on one agent: no session, SQLite, Redis (the fleet's).
3. A guard's pull on replica 1 → the moment the last replica stops routing to the canary
   (bar: p99 ≤ 2 s), each round a new canary revision pointed at a model that refuses.

    .venv/bin/python -m bench.fleet --quick
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from bench._load import LoadResult, load
from bench._process import Child, cpu_seconds, free_port
from bench._service import AGENT, agent_document
from bench._stats import ratio, summary
from dynagent import AgentBuilder, load_spec
from dynagent.sessions import SqliteSessionStore
from dynagent.sessions.base import SessionStore
from dynagent.sessions.redis import RedisSessionStore
from tests.support.fleet import Fleet
from tests.support.nacos import NacosAdmin

RESULTS = Path(__file__).parent / "results" / "fleet.json"
GUARDED = "guarded"
POLL = 0.01


async def measure(model_url: str, *, quick: bool) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="dynagent-fleet-") as home,
        Fleet.on_free_ports(Path(home), replicas=3) as fleet,
    ):
        await asyncio.to_thread(fleet.up)
        async with NacosAdmin(fleet.nacos_url) as nacos:
            await nacos.publish(
                f"{AGENT}.agent.yaml", fleet.group, yaml.safe_dump(agent_document(model_url))
            )
            await _serving(fleet, AGENT)
            guard = await _guard_spread(fleet, nacos, model_url, 5 if quick else 20)
        sessions = await _session_turns(model_url, fleet.redis_port, 50 if quick else 300)
        scaling = await _scaling(fleet, seconds=1.5 if quick else 5.0)
    return {
        "what": "nginx round robin over dynagent serve replicas on one Nacos and one Redis; "
        "CPU from /proc of the replicas (and nginx, apart)",
        "scaling": scaling,
        "session_turn": sessions,
        "guard_pull_to_last_replica": guard,
    }


async def _serving(fleet: Fleet, name: str, within: float = 30) -> None:
    deadline = time.monotonic() + within
    async with aiohttp.ClientSession() as http:
        for n in range(1, fleet.replicas + 1):
            while True:
                async with http.get(f"{fleet.replica_url(n)}/v1/agents/{name}") as response:
                    if response.status == 200:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name} not served by replica {n}")
                await asyncio.sleep(0.05)


# -- 1. replicas behind nginx --------------------------------------------------------


async def _scaling(fleet: Fleet, *, seconds: float) -> dict[str, Any]:
    url = f"{fleet.url}/v1/agents/{AGENT}/invoke"
    body = {"input": "ping"}
    await load(url, body, concurrency=8, seconds=0.5)  # warm-up
    figures: dict[str, Any] = {}
    for serving in (3, 2, 1):
        if serving < fleet.replicas:
            await asyncio.to_thread(fleet.stop_replica, serving + 1)
        await load(url, body, concurrency=8, seconds=0.3)  # nginx learns who is gone
        pids = [fleet.replica_pid(n) for n in range(1, serving + 1)]
        nginx = fleet.nginx_pids()
        before = sum(cpu_seconds(p) for p in pids), sum(cpu_seconds(p) for p in nginx)
        result = await load(url, body, concurrency=16, seconds=seconds)
        after = sum(cpu_seconds(p) for p in pids), sum(cpu_seconds(p) for p in nginx)
        figures[str(serving)] = _level(result, after[0] - before[0], after[1] - before[1])
    one = figures["1"]["replica_cpu_ms_per_request"]
    for figure in figures.values():
        figure["cpu_ratio_to_one_replica"] = ratio(figure["replica_cpu_ms_per_request"], one)
    for n in range(2, fleet.replicas + 1):
        await asyncio.to_thread(fleet.start_replica, n)
    return {"concurrency": 16, "seconds": seconds, "replicas": figures}


def _level(result: LoadResult, replica_cpu: float, nginx_cpu: float) -> dict[str, Any]:
    latency = summary(result.latencies_ms)
    requests = max(result.requests, 1)
    return {
        "rps": round(result.ok / result.seconds, 1),
        "p50_ms": latency.get("median"),
        "p99_ms": latency.get("p99"),
        "replica_cpu_ms_per_request": round(replica_cpu * 1000 / requests, 3),
        "nginx_cpu_ms_per_request": round(nginx_cpu * 1000 / requests, 3),
        "requests": result.requests,
        "failed": sum(result.failures.values()),
    }


# -- 2. a session turn: SQLite vs Redis ----------------------------------------------


async def _session_turns(model_url: str, redis_port: int, turns: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="dynagent-sessions-") as folder:
        stores: dict[str, SessionStore | None] = {
            "none": None,
            "sqlite": SqliteSessionStore(Path(folder) / "sessions.db"),
            "redis": RedisSessionStore(f"redis://127.0.0.1:{redis_port}/0", history_bytes=20_000),
        }
        figures: dict[str, Any] = {}
        try:
            for _ in range(2):  # two rounds, alternating, so that noise hits all alike
                for kind, store in stores.items():
                    latencies = await _turns(model_url, store, turns, f"bench-{kind}-{time.time()}")
                    figures.setdefault(kind, []).extend(latencies)
        finally:
            for store in stores.values():
                if store is not None:
                    await store.aclose()
    result: dict[str, Any] = {kind: summary(values) for kind, values in figures.items()}
    base = result["none"]["median"]
    for kind in ("sqlite", "redis"):
        result[kind]["median_ratio_to_none"] = ratio(result[kind]["median"], base)
    result["turns_per_store"] = turns * 2
    return result


async def _turns(
    model_url: str, store: SessionStore | None, turns: int, session: str
) -> list[float]:
    agent = AgentBuilder(sessions=store).build(load_spec(agent_document(model_url)))
    latencies = []
    for turn in range(turns):
        # a fresh session every 10 turns: the history stays the size of a short conversation
        session_id = f"{session}-{turn // 10}" if store is not None else None
        started = time.perf_counter()
        await agent.run("ping", session_id=session_id)
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies


# -- 3. guard pull on one replica → the last replica stops the canary ---------------


def _canary(model_url: str, round_: int, dead_url: str) -> dict[str, Any]:
    document = agent_document(model_url, name=GUARDED, system=f"Canary round {round_}.")
    document["model"] = {**document["model"], "base_url": dead_url}
    return {**document, "rollout": {"weight": 50, "guard": {"min_requests": 5}}}


async def _guard_spread(
    fleet: Fleet, nacos: NacosAdmin, model_url: str, rounds: int
) -> dict[str, Any]:
    dead_url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens: every call fails fast
    stable = agent_document(model_url, name=GUARDED)
    await nacos.publish(f"{GUARDED}.agent.yaml", fleet.group, yaml.safe_dump(stable))
    await _serving(fleet, GUARDED)
    spreads: list[float] = []
    async with aiohttp.ClientSession() as http:
        for round_ in range(rounds):
            canary = _canary(model_url, round_, dead_url)
            await nacos.publish(f"{GUARDED}.canary.yaml", fleet.group, yaml.safe_dump(canary))
            await _until_all(http, fleet, lambda c: c is not None and c["state"] == "serving")
            for _ in range(5):
                async with http.post(
                    f"{fleet.replica_url(1)}/v1/agents/{GUARDED}/invoke",
                    json={"input": "ping"},
                    headers={"X-Agent-Variant": "canary"},
                ) as response:
                    await response.read()
            pulled = time.perf_counter()  # replica 1's guard pulled on the 5th failure
            await _until_all(http, fleet, lambda c: c is not None and c["state"] == "pulled")
            spreads.append((time.perf_counter() - pulled) * 1000)
    return {"rounds": rounds, "ms": summary(spreads), "bar_p99_ms": 2000}


async def _until_all(
    http: aiohttp.ClientSession, fleet: Fleet, check: Any, within: float = 10
) -> None:
    deadline = time.monotonic() + within
    pending = set(range(1, fleet.replicas + 1))
    while pending:
        for n in list(pending):
            async with http.get(f"{fleet.replica_url(n)}/v1/agents/{GUARDED}") as response:
                status = await response.json()
            if check(status.get("canary")):
                pending.discard(n)
        if pending and time.monotonic() > deadline:
            raise RuntimeError(f"replicas {sorted(pending)} did not follow within {within} s")
        await asyncio.sleep(POLL)


def table(data: dict[str, Any]) -> str:
    lines = [
        f"{'replicas':10}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'replica CPU ms/req':>20}"
        f"{'vs 1':>7}{'nginx CPU ms/req':>18}"
    ]
    for n, figure in data["scaling"]["replicas"].items():
        lines.append(
            f"{n:10}{figure['rps']:>9}{figure['p50_ms']!s:>9}{figure['p99_ms']!s:>9}"
            f"{figure['replica_cpu_ms_per_request']:>20}{figure['cpu_ratio_to_one_replica']!s:>7}"
            f"{figure['nginx_cpu_ms_per_request']:>18}"
        )
    turns = data["session_turn"]
    lines.append(
        "session turn p50 ms: "
        + ", ".join(f"{k} {turns[k].get('median')}" for k in ("none", "sqlite", "redis"))
        + "; p99: "
        + ", ".join(f"{k} {turns[k].get('p99')}" for k in ("none", "sqlite", "redis"))
    )
    guard = data["guard_pull_to_last_replica"]["ms"]
    lines.append(
        f"guard pull on replica 1 -> last of 3 stops the canary: p50 {guard.get('median')} ms, "
        f"p99 {guard.get('p99')} ms, max {guard.get('max')} ms (bar p99 <= 2000 ms)"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fleet", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)

    async def run() -> dict[str, Any]:
        async with Child("bench._model_server") as model:
            return await measure(model.ready["base_url"], quick=args.quick)

    data = asyncio.run(run())
    print(table(data))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(data, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
