"""``python -m bench.ui``: the operations page with 1,000 agents, and what it costs the
service when nobody has it open.

1. **First paint**: a real ``dynagent serve`` process with 1,000 agents (offline model);
   Debian's Chromium (headless, through Playwright) opens ``/ui/`` in a fresh context
   each round. Reported: milliseconds from navigation start until the frame after the
   agents table is filled (the page's own ``agents-painted`` mark), and first
   contentful paint. The bar: ≤ 1,000 ms.
2. **Idle cost**: the same process's CPU over a few idle seconds, with nobody watching
   and then with one page's live feed open — the page runs nothing while it is closed.
3. **Per-run cost**: the only work the page adds to a run is one ``RecentSeries.record``
   (the 15-minute sparkline ring): its cost per call against the time of one in-process
   run; and runs per CPU second of the in-process service (client and server in one
   process) with it and with it replaced by a no-op, in A B B A rounds: the ratio should
   be ~1.00.

    .venv/bin/python -m bench.ui            # 10 paint rounds, 5 x 2,000 runs per side
    .venv/bin/python -m bench.ui --quick    # 3 paint rounds, 3 x 500 runs per side
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from bench._process import cpu_seconds, free_port
from dynagent.config import ServiceConfig
from dynagent.core.series import RecentSeries
from dynagent.http.app import create_app
from dynagent.http.state import SERVICE

AGENTS = 1000
DYNAGENT = Path(sys.executable).parent / "dynagent"
CHROMIUM = os.environ.get("DYNAGENT_CHROMIUM", "/usr/bin/chromium")


def write_agents(folder: Path, count: int) -> None:
    for i in range(count):
        document = {
            "name": f"agent-{i:04d}",
            "description": f"Bench agent number {i}",
            "model": {"provider": "test"},
            "prompt": {"system": "You are bench agent {{n}}.", "variables": {"n": str(i)}},
        }
        (folder / f"agent-{i:04d}.yaml").write_text(yaml.safe_dump(document))
    canary = {**yaml.safe_load((folder / "agent-0000.yaml").read_text()), "rollout": {"weight": 10}}
    canary["description"] = "candidate"
    (folder / "agent-0000.canary.yaml").write_text(yaml.safe_dump(canary))


@contextlib.contextmanager
def served(folder: Path) -> Iterator[tuple[str, int]]:
    port = free_port()
    state = folder.parent / "state"
    state.mkdir(exist_ok=True)
    config = folder.parent / "service.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "factories": {"default": {"directory": str(folder)}},
                "sessions": {"store": "memory"},
                "logging": {"level": "WARNING"},
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "DYNAGENT_"))}
    process = subprocess.Popen(
        [str(DYNAGENT), "serve", "--config", str(config), "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                import urllib.request

                with urllib.request.urlopen(f"{url}/readyz", timeout=1) as answer:
                    if answer.status == 200:
                        break
            time.sleep(0.1)  # a starting process: polled, not a reload wait
        yield url, process.pid
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()


async def first_paint(url: str, rounds: int) -> dict[str, Any]:
    from playwright.async_api import async_playwright

    painted: list[float] = []
    contentful: list[float] = []
    complete: list[float] = []
    rows = 0
    async with async_playwright() as driver:
        browser = await driver.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            for _ in range(rounds + 1):  # the first round warms the browser's caches up
                context = await browser.new_context(viewport={"width": 1400, "height": 900})
                page = await context.new_page()
                await page.goto(f"{url}/ui/#/agents")
                await page.wait_for_selector(
                    "body[data-agents-painted]", state="attached", timeout=30_000
                )
                painted.append(float(await page.evaluate("document.body.dataset.agentsPainted")))
                await page.wait_for_selector(
                    "body[data-agents-complete]", state="attached", timeout=30_000
                )
                complete.append(float(await page.evaluate("document.body.dataset.agentsComplete")))
                fcp = await page.evaluate(
                    "(performance.getEntriesByName('first-contentful-paint')[0] || {}).startTime"
                )
                contentful.append(float(fcp or 0))
                rows = await page.locator("#agent-rows tr[data-agent]").count()
                await context.close()
        finally:
            await browser.close()
    painted, contentful, complete = painted[1:], contentful[1:], complete[1:]
    return {
        "agents_rendered": rows,
        "rounds": rounds,
        "agents_painted_ms_p50": round(statistics.median(painted), 1),
        "agents_painted_ms_max": round(max(painted), 1),
        "all_rows_in_page_ms_p50": round(statistics.median(complete), 1),
        "first_contentful_paint_ms_p50": round(statistics.median(contentful), 1),
        "bar_ms": 1000,
    }


async def idle_cpu(url: str, pid: int, seconds: float) -> dict[str, Any]:
    start = cpu_seconds(pid)
    await asyncio.sleep(seconds)  # measuring an idle process: nothing to wait for
    idle = cpu_seconds(pid) - start
    async with aiohttp.ClientSession() as session, session.get(f"{url}/v1/watch/agents") as feed:
        await feed.content.readuntil(b"\n\n")  # the snapshot of 1,000 agents
        start = cpu_seconds(pid)
        await asyncio.sleep(seconds)
        watched = cpu_seconds(pid) - start
    return {
        "seconds": seconds,
        "cpu_s_nobody_watching": round(idle, 3),
        "cpu_s_one_page_watching": round(watched, 3),
    }


def _no_record(agent: str, variant: str, seconds: float, failed: bool) -> None:
    return None


async def _runs(client: TestClient[Any, Any], runs: int) -> None:
    for i in range(runs):
        response = await client.post(f"/v1/agents/agent-{i % 50:04d}/invoke", json={"input": "hi"})
        assert response.status == 200, await response.text()
        await response.read()


@contextlib.asynccontextmanager
async def in_process(folder: Path) -> AsyncIterator[tuple[TestClient[Any, Any], web.Application]]:
    config = ServiceConfig.model_validate(
        {
            "factories": {"default": {"directory": str(folder)}},
            "sessions": {"store": "memory"},
            "logging": {"level": "WARNING"},
        }
    )
    app = create_app(config, environ={})
    async with TestClient(TestServer(app)) as client:
        yield client, app


async def per_run(folder: Path, rounds: int, runs: int) -> dict[str, Any]:
    from loguru import logger

    logger.remove()
    rates: dict[str, list[float]] = {"with_series": [], "without_series": []}
    async with in_process(folder) as (client, app):
        series = app[SERVICE].series
        record = series.record
        await _runs(client, runs)  # warm-up: connections, caches, first builds
        for turn in range(rounds * 2):
            # A B B A …: a drift of the machine's load hits both sides alike.
            order = ("with_series", "without_series")
            for label in order if turn % 2 == 0 else order[::-1]:
                series.record = record if label == "with_series" else _no_record  # type: ignore[method-assign]
                # CPU, not wall time: on a shared machine the wall clock measures the others.
                started = time.process_time()
                await _runs(client, runs)
                rates[label].append(runs / (time.process_time() - started))
        series.record = record  # type: ignore[method-assign]
    pairs = zip(rates["with_series"], rates["without_series"], strict=True)
    ratio = statistics.median(a / b for a, b in pairs)
    best = {label: statistics.median(values) for label, values in rates.items()}
    probe = RecentSeries()
    calls = 200_000
    started = time.perf_counter()
    for i in range(calls):
        probe.record("agent-0001", "stable", 0.01, failed=i % 7 == 0)
    record_us = (time.perf_counter() - started) / calls * 1e6
    return {
        "runs_per_round": runs,
        "rounds": rounds,
        "runs_per_cpu_s_with_series": round(best["with_series"], 1),
        "runs_per_cpu_s_without_series": round(best["without_series"], 1),
        "ratio_median_of_pairs": round(ratio, 3),
        "record_us_per_run": round(record_us, 3),
        "record_share_of_a_run": round(record_us / (1e6 / best["with_series"]), 5),
    }


async def main(quick: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-ui-") as temporary:
        folder = Path(temporary) / "agents"
        folder.mkdir()
        write_agents(folder, AGENTS)
        with served(folder) as (url, pid):
            paint = await first_paint(url, 3 if quick else 10)
            idle = await idle_cpu(url, pid, 3.0 if quick else 10.0)
        small = Path(temporary) / "small"
        small.mkdir()
        write_agents(small, 50)
        runs = await per_run(small, 3 if quick else 5, 500 if quick else 2000)
    return {"first_paint_1000_agents": paint, "idle": idle, "per_run": runs}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    figures = asyncio.run(main(parser.parse_args().quick))
    print(json.dumps(figures, indent=2))
