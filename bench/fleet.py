"""The fleet: ``scripts/fleet.sh`` (Nacos, Redis, three ``dynagent serve`` replicas, nginx).

1. Requests/s and server CPU per request (replicas + nginx) through nginx with 1, 2 and 3
   replicas serving, interleaved round after round, beside the floor: as many minimal
   aiohttp proxies making the same model call, behind the same nginx rules. On two cores
   the point is that CPU per request stays flat, not that throughput triples; what more
   processes cost on the same two cores shows in the floor's own ratio.
2. Session turn latency, in-process on one agent: no session, SQLite, Redis (the fleet's).
3. A guard's pull on replica 1 → the moment the last replica stops routing to the canary
   (bar: p99 ≤ 2 s), each round a new canary revision pointed at a model that refuses.

    .venv/bin/python -m bench.fleet --quick
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from bench._balancer import Balancer, balancers
from bench._load import LoadResult, load
from bench._process import Child, cpu_seconds, free_port
from bench._service import AGENT, agent_document
from bench._stats import ratio, summary
from dynagent import AgentBuilder, Resources, load_spec
from dynagent.registry.canary import picks_canary
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
        # the poll of fleet.sh's own fleet (tests list every 0.5 s, for speed)
        Fleet.on_free_ports(Path(home), replicas=3, poll_seconds=2.0) as fleet,
    ):
        await asyncio.to_thread(fleet.up)
        async with NacosAdmin(fleet.nacos_url) as nacos:
            await nacos.publish(
                f"{AGENT}.agent.yaml", fleet.group, yaml.safe_dump(agent_document(model_url))
            )
            await _serving(fleet, AGENT)
            guard = await _guard_spread(fleet, nacos, model_url, 5 if quick else 20)
        sessions = await _session_turns(model_url, fleet.redis_port, 50 if quick else 300)
        scaling = await _scaling(
            fleet,
            model_url,
            # short windows, many rounds: a burst of other work lands on every level alike
            seconds=0.5,
            rounds=10 if quick else 30,
            idle_seconds=5.0 if quick else 15.0,  # CPU time comes in 10 ms ticks
        )
    return {
        "what": "nginx round robin over dynagent serve replicas on one Nacos and one Redis; "
        "CPU per request from /proc: the serving replicas and nginx, over requests served",
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

CONCURRENCY = 16


@dataclass
class _Level:
    """What one side with one replica count served, summed over its windows."""

    url: str
    servers: list[int]
    """The pids of the serving processes."""
    balancer: Balancer
    load: LoadResult = field(default_factory=LoadResult)
    server_cpu: float = 0.0
    nginx_cpu: float = 0.0

    async def window(self, seconds: float) -> None:
        nginx = self.balancer.pids()
        before = _cpu(self.servers), _cpu(nginx)
        result = await load(self.url, {"input": "ping"}, concurrency=CONCURRENCY, seconds=seconds)
        self.load.merge(result)
        self.server_cpu += _cpu(self.servers) - before[0]
        self.nginx_cpu += _cpu(nginx) - before[1]


async def _scaling(
    fleet: Fleet, model_url: str, *, seconds: float, rounds: int, idle_seconds: float
) -> dict[str, Any]:
    """Every replica runs throughout; a second nginx (``bench._balancer``) has a port per
    replica count, and another one the same over the floor's proxies. Rounds alternate the
    order of the levels and each level's windows are summed, so drift of a shared machine
    does not land on one level. CPU per request is everything the request path burnt — the
    serving processes and nginx — over the requests served; a replica left out of a level
    is not counted (a smaller deployment would not have it), and what a replica burns idle
    is reported apart. The floor shows what more processes on the same cores cost any
    Python server: ``vs_floor`` is our ratio to one replica over the floor's."""
    idle = await _idle(fleet, seconds=idle_seconds)
    async with contextlib.AsyncExitStack() as stack:
        floors = [
            await stack.enter_async_context(Child("bench._floor", model_url))
            for _ in range(fleet.replicas)
        ]
        levels = _levels(fleet, floors, stack)
        order = list(levels)
        for level in order:  # warm-up: every process through every port
            await load(levels[level].url, {"input": "ping"}, concurrency=CONCURRENCY, seconds=0.5)
        for round_ in range(rounds):
            for key in order if round_ % 2 == 0 else reversed(order):
                await levels[key].window(seconds)
    return {
        "concurrency": CONCURRENCY,
        "seconds_per_window": seconds,
        "rounds": rounds,
        "idle_replica_cpu_ms_per_s": idle,
        **_sides(levels),
    }


def _levels(
    fleet: Fleet, floors: list[Child], stack: contextlib.AsyncExitStack
) -> dict[tuple[str, int], _Level]:
    """Both sides at every replica count, each behind its own nginx (closed with ``stack``)."""
    ports = [fleet.replica_port + n for n in range(fleet.replicas)]
    ours = stack.enter_context(balancers(fleet, "replicas", ports))
    floor_ports = [int(f.ready["url"].rsplit(":", 1)[1]) for f in floors]
    theirs = stack.enter_context(balancers(fleet, "floor", floor_ports))
    replicas = [fleet.replica_pid(n) for n in range(1, fleet.replicas + 1)]
    levels: dict[tuple[str, int], _Level] = {}
    for k in ours.ports:
        path = f"/v1/agents/{AGENT}/invoke"
        levels["dynagent", k] = _Level(f"{ours.url(k)}{path}", replicas[:k], ours)
    for k in theirs.ports:
        servers = [f.pid for f in floors[:k]]
        levels["floor", k] = _Level(f"{theirs.url(k)}/invoke", servers, theirs)
    return levels


def _sides(levels: dict[tuple[str, int], _Level]) -> dict[str, Any]:
    """Figures per side and replica count, with each one's ratio to one replica."""
    sides: dict[str, dict[str, Any]] = {}
    for (side, count), level in levels.items():
        sides.setdefault(side, {})[str(count)] = _figures(level)
    for figures in sides.values():
        one = figures["1"]["cpu_ms_per_request"]
        for figure in figures.values():
            figure["cpu_ratio_to_one_replica"] = ratio(figure["cpu_ms_per_request"], one)
    for n, figure in sides["dynagent"].items():
        floor = sides["floor"][n]["cpu_ratio_to_one_replica"]
        figure["vs_floor"] = ratio(figure["cpu_ratio_to_one_replica"], floor)
    return {"replicas": sides["dynagent"], "floor": sides["floor"]}


def _cpu(pids: list[int]) -> float:
    return sum(cpu_seconds(pid) for pid in pids)


async def _idle(fleet: Fleet, *, seconds: float) -> float:
    """CPU a replica burns with no request (Nacos poll, fuzzy watch, timers), ms/s, the
    mean over the replicas."""
    pids = [fleet.replica_pid(n) for n in range(1, fleet.replicas + 1)]
    before = _cpu(pids)
    await asyncio.sleep(seconds)
    return round((_cpu(pids) - before) * 1000 / seconds / len(pids), 2)


def _figures(level: _Level) -> dict[str, Any]:
    result = level.load
    latency = summary(result.latencies_ms)
    requests = max(result.requests, 1)
    return {
        "rps": round(result.ok / result.seconds, 1),
        "p50_ms": latency.get("median"),
        "p99_ms": latency.get("p99"),
        "cpu_ms_per_request": round((level.server_cpu + level.nginx_cpu) * 1000 / requests, 3),
        "server_cpu_ms_per_request": round(level.server_cpu * 1000 / requests, 3),
        "nginx_cpu_ms_per_request": round(level.nginx_cpu * 1000 / requests, 3),
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
    resources = Resources()  # the agent's model client, closed at the end
    builder = AgentBuilder(resources=resources, sessions=store)
    agent = builder.build(load_spec(agent_document(model_url)))
    latencies = []
    try:
        for turn in range(turns):
            # a fresh session every 10 turns: the history stays the size of a short conversation
            session_id = f"{session}-{turn // 10}" if store is not None else None
            started = time.perf_counter()
            await agent.run("ping", session_id=session_id)
            latencies.append((time.perf_counter() - started) * 1000)
    finally:
        await resources.aclose()
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
            # Callers the router sends to the canary: the guard counts only routed traffic
            # (a caller pinning the canary picks what it judges).
            for key in _canary_callers(round_, 5, canary["rollout"]["weight"]):
                async with http.post(
                    f"{fleet.replica_url(1)}/v1/agents/{GUARDED}/invoke",
                    json={"input": "ping"},
                    headers={"X-Canary-Key": key},
                ) as response:
                    await response.read()
            pulled = time.perf_counter()  # replica 1's guard pulled on the 5th failure
            await _until_all(http, fleet, lambda c: c is not None and c["state"] == "pulled")
            spreads.append((time.perf_counter() - pulled) * 1000)
    return {"rounds": rounds, "ms": summary(spreads), "bar_p99_ms": 2000}


def _canary_callers(round_: int, count: int, weight: float) -> list[str]:
    keys = (f"caller-{round_}-{i}" for i in range(100_000))
    return [key for key in keys if picks_canary(GUARDED, key, weight)][:count]


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
    scaling = data["scaling"]
    lines = [
        f"{'replicas':10}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'CPU ms/req':>12}{'vs 1':>7}"
        f"{'replicas ms/req':>17}{'nginx ms/req':>14}{'floor vs 1':>12}{'vs floor':>10}"
    ]
    for n, figure in scaling["replicas"].items():
        floor = scaling["floor"][n]
        lines.append(
            f"{n:10}{figure['rps']:>9}{figure['p50_ms']!s:>9}{figure['p99_ms']!s:>9}"
            f"{figure['cpu_ms_per_request']:>12}{figure['cpu_ratio_to_one_replica']!s:>7}"
            f"{figure['server_cpu_ms_per_request']:>17}{figure['nginx_cpu_ms_per_request']:>14}"
            f"{floor['cpu_ratio_to_one_replica']!s:>12}{figure['vs_floor']!s:>10}"
        )
    lines.append(
        f"({scaling['rounds']} interleaved rounds of {scaling['seconds_per_window']:g} s per "
        f"level at concurrency {scaling['concurrency']}; floor: as many minimal aiohttp "
        f"proxies; a replica idle burns {scaling['idle_replica_cpu_ms_per_s']} ms CPU/s); "
        "bar: CPU per request vs 1 replica within 1.1x of the floor's"
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
