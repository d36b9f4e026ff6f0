"""Nacos leader loss -> edits flowing again: how long after the raft leader of the config
group dies an edit published to the cluster is served.

Three Nacos nodes (``scripts/nacos.sh cluster``, embedded storage) on ports and a home of
the bench's own; one service (in process, on loopback) follows a group on all three. Each
round kills the leader with ``SIGKILL``, then publishes the next version of an agent at once,
sending it again to the next node while the cluster has no leader to take it, and times the
kill until the service serves that version. Meanwhile a caller keeps invoking the agent;
every answer that is not a 200 is counted. The killed node is started again before the
next round (a node takes about half a minute to start on two cores, which is most of the
bench's time).

    .venv/bin/python -m bench.nacos_cluster              # 10 kills
    .venv/bin/python -m bench.nacos_cluster --kills 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
from loguru import logger

from bench._stats import percentile
from dynagent.config import NacosConfig
from tests.support.nacos import nacos_service_config, yaml_text
from tests.support.nacos_cluster import NODES, NacosCluster, claimed_cluster_ports
from tests.support.service import (
    RunningService,
    agent_document,
    revision_of,
    running_service,
)

PORTS_FROM = 24848
"""Away from the script's own cluster (8858…), the tests' (21848…) and the bench's single
Nacos (28848), and below the kernel's ephemeral ports (32768 and up), which any outgoing
connection may take."""
GROUP = "BENCH_CLUSTER"
KILLS = 10
WRITE_TIMEOUT = 3.0


async def publish(session: aiohttp.ClientSession, cluster: NacosCluster, text: str) -> int:
    """Publish ``flow.agent.yaml`` through whichever node takes it; the failed attempts."""
    form = {"dataId": "flow.agent.yaml", "groupName": GROUP, "content": text, "type": "yaml"}
    failed = 0
    while True:
        url = cluster.base_url(failed % NODES + 1) + "/v3/admin/cs/config"
        try:
            async with session.post(url, data=form) as response:
                body = await response.json(content_type=None)
            if response.status == 200 and body.get("code") == 0:
                return failed
        except (aiohttp.ClientError, TimeoutError, ValueError):
            pass
        failed += 1
        await asyncio.sleep(0.05)


async def measure(kills: int = KILLS) -> dict[str, Any]:
    with (
        claimed_cluster_ports(PORTS_FROM) as ports,
        tempfile.TemporaryDirectory(prefix="dynagent-bench-cluster-") as home,
    ):
        cluster = NacosCluster(ports, Path(home) / "cluster")
        started = await asyncio.to_thread(cluster.start, clean=True)
        try:
            figures = await _rounds(cluster, Path(home), kills)
        finally:
            await asyncio.to_thread(cluster.stop)
    return {"cluster_start_s": round(started, 1), **figures}


async def _rounds(cluster: NacosCluster, home: Path, kills: int) -> dict[str, Any]:
    settings = NacosConfig(
        server_addr=cluster.addr, group=GROUP, snapshot_dir=home / "snapshot", poll_seconds=0.5
    )
    (home / "agents").mkdir()
    (home / "state").mkdir()
    config = nacos_service_config(settings, home / "agents", home / "state")
    timeout = aiohttp.ClientTimeout(total=WRITE_TIMEOUT)
    recoveries: list[float] = []
    retries: list[int] = []
    answers: list[int] = []
    async with aiohttp.ClientSession(timeout=timeout) as session:
        await publish(session, cluster, yaml_text(_version(0)))
        async with running_service(config) as service:
            await service.wait_serving("flow", revision_of(_version(0)))
            stop = asyncio.Event()
            asking = asyncio.create_task(_keep_asking(service.client, stop, answers))
            for number in range(1, kills + 1):
                leader = await cluster.aleader()
                await cluster.akill(leader)
                killed_at = time.perf_counter()
                retries.append(await publish(session, cluster, yaml_text(_version(number))))
                await service.registry.wait_for(_serves(service, number), within=60)
                recoveries.append(time.perf_counter() - killed_at)
                await cluster.astart(leader)
            stop.set()
            await asking
    ordered = sorted(recoveries)
    return {
        "kills": kills,
        "recovery_s": {
            "p50": round(percentile(ordered, 0.5), 2),
            "p99": round(percentile(ordered, 0.99), 2),
            "max": round(ordered[-1], 2),
            "each": [round(seconds, 2) for seconds in recoveries],
        },
        "publish_retries": retries,
        "answers": len(answers),
        "failed_answers": sum(code != 200 for code in answers),
    }


def _serves(service: RunningService, number: int) -> Callable[[Any], bool]:
    revision = revision_of(_version(number))
    return lambda _: service.serving("flow") == revision


def _version(number: int) -> dict[str, Any]:
    return agent_document("flow", system=f"flow version {number}")


async def _keep_asking(client: Any, stop: asyncio.Event, codes: list[int]) -> None:
    while not stop.is_set():
        response = await client.post("/v1/agents/flow/invoke", json={"input": "hi"})
        await response.read()
        codes.append(response.status)
        await asyncio.sleep(0.02)  # a caller's pace


def table(data: dict[str, Any]) -> str:
    seconds = data["recovery_s"]
    note = "" if data["kills"] >= KILLS else f" (fewer than the full run's {KILLS})"
    return (
        f"Nacos leader loss -> edits flowing again, {data['kills']} kills{note}: p50 "
        f"{seconds['p50']:.2f} s, p99 {seconds['p99']:.2f} s, max {seconds['max']:.2f} s\n"
        f"  agents answered throughout: {data['answers']} answers, "
        f"{data['failed_answers']} failed; cluster started in {data['cluster_start_s']} s"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.nacos_cluster", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--kills", type=int, default=KILLS, help=f"default {KILLS}")
    args = parser.parse_args(argv)
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    data = asyncio.run(measure(args.kills))
    print(table(data))
    print(json.dumps(data, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
