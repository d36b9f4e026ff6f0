"""``python -m bench.soak --minutes 30``: one ``dynagent serve`` under a steady mixed load for
a long time, sampled for leaks.

The load (``bench._soak_load``): session turns (conversations of a few turns, then a new
session), runs with a tool call (the built-in ``calculator``), streamed answers (our SSE and
chat completions' chunks), an edit of an agent file every few seconds (hot reload) and a
canary taking half of one agent's callers. Every ``--interval`` seconds: the service's
resident memory and open file descriptors (``/proc``), the latency of ``GET /healthz`` on a
connection of its own (the event loop's lag, plus a constant) and the p99 of the requests
answered since the last sample.

After the warm-up (the first third of the run, at most five minutes) each series is
reported as a slope per minute (least squares) and as its level over the second half of
the samples against the first (medians). The bar: no growth beyond noise, as the levels
say. A leak grows without end, so over the two halves of a steady run its level moves
by its rate times half the run; noise moves both medians alike.

    .venv/bin/python -m bench.soak --minutes 30
    .venv/bin/python -m bench.soak --minutes 2 --interval 2     # what ``make test`` runs
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp

from bench import _soak_load as soak_load
from bench._process import Child, free_port, rss_bytes
from bench._service import Service
from bench._stats import percentile

RESULTS = Path(__file__).parent / "results" / "soak.json"
WARMUP_FRACTION = 1 / 3
WARMUP_MAX = 300.0
RSS_BAR = 1.05
"""Resident memory over the second half at most 5 % above the first. Once warm, the
service's memory (~145 MB) moves by tenths of a percent between the halves (allocator
arenas, the collector's generations, SQLite's page cache). 5 % is ~7 MB: in the two-minute
run, whose half medians are ~40 s apart, a leak of ~10 MB a minute (a few kB per request at
its ~50 requests a second) crosses it; in the 30-minute run (medians ~12 minutes apart)
one of ~0.6 MB a minute. The leak test's tool keeps 64 kB per call and crosses it."""
FD_SLACK = 8
"""Open descriptors over the second half at most this many above the first: pooled
connections to the model server and the callers come and go with the load (a few either
way); a descriptor left open per request adds one per request, hundreds a minute."""


@dataclass(frozen=True, slots=True)
class Sample:
    at: float
    """Seconds since the load began."""
    rss_mb: float
    fds: int
    probe_ms: float
    """``GET /healthz`` on a connection of its own: the event loop's lag, plus a constant."""
    p99_ms: float
    requests: int
    failures: int


def slope_per_minute(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of ``(seconds, value)`` points, per minute."""
    if len(points) < 2:
        return 0.0
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - mx) ** 2 for x in xs)
    if not spread:
        return 0.0
    return 60 * sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / spread


def verdict(samples: Sequence[Sample], warmup: float) -> dict[str, Any]:
    """Slopes and half-over-half levels of the samples after ``warmup`` seconds; ``leak``
    names the series past their bars (empty: none)."""
    warm = [s for s in samples if s.at >= warmup]
    half = len(warm) // 2
    first, second = warm[:half], warm[half:]
    report: dict[str, Any] = {"samples": len(warm), "warmup_seconds": warmup}
    for series in ("rss_mb", "fds", "probe_ms", "p99_ms"):
        values = [(s.at, float(getattr(s, series))) for s in warm]
        report[series] = {
            "slope_per_minute": round(slope_per_minute(values), 3),
            "first_half": _median(first, series),
            "second_half": _median(second, series),
        }
    rss, fds = report["rss_mb"], report["fds"]
    rss["ratio"] = round(rss["second_half"] / rss["first_half"], 4) if rss["first_half"] else 0
    leak = []
    if not first or not second:
        leak.append("too few samples after the warm-up")
    elif rss["ratio"] > RSS_BAR:
        leak.append(f"rss grew {rss['ratio']:.3f}x over the second half (bar {RSS_BAR})")
    if first and second and fds["second_half"] - fds["first_half"] > FD_SLACK:
        grew = fds["second_half"] - fds["first_half"]
        leak.append(f"open fds grew by {grew:g} over the second half (bar {FD_SLACK})")
    report["leak"] = leak
    report["requests"] = sum(s.requests for s in samples)
    report["failures"] = sum(s.failures for s in samples)
    return report


def _median(samples: Sequence[Sample], series: str) -> float:
    values = [float(getattr(s, series)) for s in samples]
    return round(statistics.median(values), 3) if values else 0.0


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def _probe(session: aiohttp.ClientSession, url: str) -> float:
    started = time.perf_counter()
    async with session.get(f"{url}/healthz") as response:
        await response.read()
    return (time.perf_counter() - started) * 1000


async def sample_every(
    interval: float, service: Service, load: soak_load.SoakLoad, until: asyncio.Event
) -> list[Sample]:
    """A sample each ``interval`` seconds until ``until`` is set."""
    samples: list[Sample] = []
    started = time.perf_counter()
    connector = aiohttp.TCPConnector(limit=1)
    async with aiohttp.ClientSession(connector=connector) as probe:
        while not until.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(until.wait(), interval)
            latencies, failures = load.take_window()
            ordered = sorted(latencies)
            samples.append(
                Sample(
                    at=round(time.perf_counter() - started, 3),
                    rss_mb=round(rss_bytes(service.pid) / 2**20, 2),
                    fds=open_fds(service.pid),
                    probe_ms=round(await _probe(probe, service.url), 3),
                    p99_ms=round(percentile(ordered, 0.99), 3) if ordered else 0.0,
                    requests=len(latencies),
                    failures=failures,
                )
            )
    return samples


async def run(
    minutes: float, *, interval: float = 10.0, workers: int = 4, serve_module: str = "dynagent"
) -> dict[str, Any]:
    """The soak: ``minutes`` of load on a fresh service (``python -m serve_module serve``)."""
    seconds = minutes * 60
    with tempfile.TemporaryDirectory(prefix="dynagent-soak-") as folder:
        home = Path(folder)
        async with Child("bench._model_server", stderr=home / "model.log") as model:
            agents = soak_load.write_agents(home, model.ready["base_url"])
            service = Service(
                soak_load.write_service_config(home, agents),
                free_port(),
                home / "service.log",
                {"OPENAI_API_KEY": "soak"},
            )
            service.argv[2] = serve_module
            async with service:
                stop = asyncio.Event()
                load = soak_load.SoakLoad(service.url, agents, model.ready["base_url"])
                sampling = asyncio.create_task(sample_every(interval, service, load, stop))
                async with load.running(workers):
                    await asyncio.sleep(seconds)
                    stop.set()
                    samples = await sampling
        warmup = min(WARMUP_MAX, seconds * WARMUP_FRACTION)
        report = verdict(samples, warmup)
        report["edits"] = load.edits
        report["by_kind"] = dict(load.by_kind)
    return {
        "minutes": minutes,
        "interval": interval,
        "workers": workers,
        "report": report,
        "samples": [asdict(s) for s in samples],
    }


def table(data: dict[str, Any]) -> str:
    report = data["report"]
    lines = [
        f"soak: {data['minutes']:g} min, {report['requests']} requests "
        f"({report['failures']} failed), {report['edits']} edits; after a "
        f"{report['warmup_seconds']:g} s warm-up, {report['samples']} samples:",
        f"{'series':<10}{'slope/min':>12}{'1st half':>12}{'2nd half':>12}",
    ]
    for series in ("rss_mb", "fds", "probe_ms", "p99_ms"):
        row = report[series]
        lines.append(
            f"{series:<10}{row['slope_per_minute']:>12.3f}"
            f"{row['first_half']:>12.3f}{row['second_half']:>12.3f}"
        )
    lines.append("leak: " + ("; ".join(report["leak"]) or "none beyond noise"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--workers", type=int, default=4, help="concurrent callers")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    data = asyncio.run(run(args.minutes, interval=args.interval, workers=args.workers))
    print(table(data))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(data, indent=2) + "\n")
    print(f"written to {args.output}")
    return 1 if data["report"]["leak"] or data["report"]["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
