"""``python -m bench.watch_streams``: what a crowd of open ``GET /v1/watch/agents`` streams
costs everyone else.

A real ``dynagent serve`` process with 50 agents (offline model) and auth off, one client
invoking them in turn all along (so every stream has traffic to send each second);
``/healthz`` latency (median and p95 of sequential requests) with no stream open, then
with 1,200 streams asked for at once — of which the service keeps ``listen.max_watch_streams``
(default 128) and answers the rest 429. Reported: how many streams were open and refused,
and the medians as a ratio to the no-stream floor measured in the same run. Before the
limit, 1,200 open streams took ``/healthz`` to a median of 278 ms.

    .venv/bin/python -m bench.watch_streams            # 1,200 streams, 200 probes
    .venv/bin/python -m bench.watch_streams --quick    # 400 streams, 50 probes
    .venv/bin/python -m bench.watch_streams --max-streams 2000   # as if there were no limit
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from bench._process import free_port
from bench._service import Service, write_config

AGENTS = 50


async def _probe(session: aiohttp.ClientSession, url: str, count: int) -> list[float]:
    times = []
    for _ in range(count):
        started = time.perf_counter()
        async with session.get(f"{url}/healthz") as response:
            await response.read()
        times.append((time.perf_counter() - started) * 1000)
    return times


async def _open(session: aiohttp.ClientSession, url: str) -> aiohttp.ClientResponse | int:
    response = await session.get(f"{url}/v1/watch/agents?max_seconds=3600")
    if response.status != 200:
        response.release()
        return response.status
    await response.content.readuntil(b"\n\n")  # the snapshot: the stream is open
    return response


async def _traffic(session: aiohttp.ClientSession, url: str, stop: asyncio.Event) -> int:
    runs = 0
    while not stop.is_set():
        name = f"agent-{runs % AGENTS:02d}"
        async with session.post(f"{url}/v1/agents/{name}/invoke", json={"input": "hi"}) as r:
            await r.read()
        runs += 1
    return runs


async def _drain(response: aiohttp.ClientResponse) -> None:
    """Read a stream as the page does, so the server's writes never back up."""
    with contextlib.suppress(aiohttp.ClientError, asyncio.CancelledError):
        async for _ in response.content.iter_any():
            pass


def _figures(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {
        "median_ms": round(statistics.median(ordered), 2),
        "p95_ms": round(ordered[int(len(ordered) * 0.95) - 1], 2),
    }


async def measure(streams: int, probes: int, limit: int | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="dynagent-bench-watch-") as tmp:
        folder = Path(tmp)
        agents = folder / "agents"
        agents.mkdir()
        for i in range(AGENTS):
            document = {"name": f"agent-{i:02d}", "model": {"provider": "test"}}
            document["prompt"] = {"system": "You are a bench agent."}
            (agents / f"agent-{i:02d}.yaml").write_text(yaml.safe_dump(document))
        extra: dict[str, Any] = {"logging": {"level": "WARNING"}}
        if limit is not None:
            extra["listen"] = {"max_watch_streams": limit}
        config = write_config(folder, agents, extra=extra)
        connector = aiohttp.TCPConnector(limit=0)
        async with (
            Service(config, free_port(), folder / "service.log", {}) as service,
            aiohttp.ClientSession(connector=connector) as session,
        ):
            stop = asyncio.Event()
            traffic = asyncio.create_task(_traffic(session, service.url, stop))
            await _probe(session, service.url, 20)  # warm-up
            floor = await _probe(session, service.url, probes)
            opened = await asyncio.gather(*(_open(session, service.url) for _ in range(streams)))
            kept = [r for r in opened if isinstance(r, aiohttp.ClientResponse)]
            refused = [r for r in opened if isinstance(r, int)]
            readers = [asyncio.create_task(_drain(r)) for r in kept]
            loaded = await _probe(session, service.url, probes)
            stop.set()
            runs = await traffic
            for response in kept:
                response.close()
            for reader in readers:
                reader.cancel()
            await asyncio.gather(*readers, return_exceptions=True)
    base, crowd = _figures(floor), _figures(loaded)
    return {
        "streams_asked": streams,
        "streams_open": len(kept),
        "streams_refused": {str(s): refused.count(s) for s in sorted(set(refused))},
        "healthz_no_stream": base,
        "healthz_with_streams": crowd,
        "median_ratio": round(crowd["median_ms"] / base["median_ms"], 2),
        "runs_meanwhile": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--max-streams", type=int, help="listen.max_watch_streams to serve with")
    args = parser.parse_args()
    streams, probes = (400, 50) if args.quick else (1200, 200)
    with contextlib.suppress(KeyboardInterrupt):
        print(json.dumps(asyncio.run(measure(streams, probes, args.max_streams)), indent=2))


if __name__ == "__main__":
    main()
