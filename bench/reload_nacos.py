"""Hot reload from Nacos: config published → new revision served.

Runs the service's full-agent factory (``NacosAgentBuilderFactory``: SDK push
listener + md5 reconcile poll) and the ``AgentRegistry`` in-process against a
real Nacos server, with the offline ``test`` model. Each change edits one
agent's prompt through Nacos's v3 admin HTTP API, the way an operator's console
edit arrives; the clock runs from just before that request until the registry
serves the change's revision (awaited on the registry's change event).

Three figures, because they have different causes:
- new dataId → served: ``--new`` agents published one after another, each
  pushed by the Nacos 3 fuzzy watch (the list poll, ``nacos.poll_seconds``,
  default 30 s, is only a safety net). Bar: p99 ≤ 1 s.
- first change after discovery: the listener was only just added.
- steady state: ``--changes`` edits after a warm-up edit. Bars:
  p50 ≤ 500 ms, p99 ≤ 1500 ms.

    .venv/bin/python -m bench.reload_nacos                 # own Nacos, 50 changes
    .venv/bin/python -m bench.reload_nacos --quick         # 10 changes
    .venv/bin/python -m bench.reload_nacos --nacos 127.0.0.1:8848   # a running server
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from importlib.metadata import version
from pathlib import Path
from typing import Any

import yaml
from loguru import logger

from dynagent import AgentBuilder, load_spec
from dynagent.config import NacosConfig
from dynagent.nacos.factory import NacosAgentBuilderFactory, agent_data_id
from dynagent.registry.events import AgentRefused, AgentSwapped, RegistryEvent
from dynagent.registry.facade import AgentRegistry
from tests.support.nacos import NacosAdmin, NacosServer, claimed_port

BAR_P50_MS = 500.0
BAR_P99_MS = 1500.0
BAR_NEW_P99_MS = 1000.0
OWN_PORT = 28858
"""Where the bench's own server starts looking for free ports (away from 8848 and tests')."""
NAME = "reloaded"
RESULTS = Path(__file__).parent / "results" / "reload_nacos.json"


def document(edit: int, name: str = NAME) -> str:
    return yaml.safe_dump(
        {
            "name": name,
            "model": {"provider": "test"},
            "prompt": {"system": f"You are edit number {edit}. Answer briefly."},
            "tools": ["calculator"],
            "limits": {"max_steps": 4},
        },
        sort_keys=False,
    )


def revision(edit: int) -> str:
    return load_spec(document(edit), fmt="yaml").revision


def serving(registry: AgentRegistry) -> str | None:
    if NAME not in registry:
        return None
    agent = registry.entry(NAME).stable
    return agent.revision if agent else None


def served(expected: str) -> Callable[[AgentRegistry], bool]:
    return lambda registry: serving(registry) == expected


class Watch:
    """Counts what the registry did: refusals, and swaps back to an older edit."""

    def __init__(self, registry: AgentRegistry, edits: dict[str, int]) -> None:
        self.registry = registry
        self.edits = edits
        """revision → edit number"""
        self.newest = -1
        self.refused = 0
        self.stale_swaps = 0
        registry.listeners.append(self)

    def __call__(self, event: RegistryEvent) -> None:
        self.refused += isinstance(event, AgentRefused)
        if not isinstance(event, AgentSwapped):
            return
        edit = self.edits.get(serving(self.registry) or "", -1)
        if edit < self.newest:
            self.stale_swaps += 1
        self.newest = max(self.newest, edit)


async def timed_publish(
    admin: NacosAdmin, registry: AgentRegistry, group: str, edit: int, within: float
) -> float:
    """Publish edit ``edit``; milliseconds until the registry serves it."""
    started = time.perf_counter()
    await admin.publish(agent_data_id(NAME), group, document(edit))
    await registry.wait_for(served(revision(edit)), within=within)
    return (time.perf_counter() - started) * 1000


async def timed_new_agents(
    admin: NacosAdmin, registry: AgentRegistry, group: str, count: int, within: float
) -> list[float]:
    """Publish ``count`` new agents one by one; milliseconds from publish until each serves."""
    times = []
    for index in range(count):
        name = f"new-{index}"
        expected = load_spec(document(0, name), fmt="yaml").revision
        started = time.perf_counter()
        await admin.publish(agent_data_id(name), group, document(0, name))
        await registry.wait_for(
            lambda r, n=name, e=expected: n in r and r.get(n).revision == e,  # type: ignore[misc]
            within=within,
        )
        times.append((time.perf_counter() - started) * 1000)
    for index in range(count):
        await admin.delete(agent_data_id(f"new-{index}"), group)
    return times


async def measure(
    server_addr: str,
    base_url: str,
    changes: int,
    poll_seconds: float,
    within: float,
    new_agents: int = 20,
) -> dict[str, Any]:
    group = f"BENCH-RELOAD-{uuid.uuid4().hex[:8]}"
    edits = {revision(edit): edit for edit in range(changes + 3)}
    with tempfile.TemporaryDirectory(prefix="dynagent-bench-reload-") as folder:
        settings = NacosConfig(
            server_addr=server_addr,
            group=group,
            snapshot_dir=Path(folder) / "snapshot",
            poll_seconds=poll_seconds,
        )
        registry = AgentRegistry()
        watch = Watch(registry, edits)
        factory = NacosAgentBuilderFactory(AgentBuilder(environ={}), settings)
        async with NacosAdmin(base_url) as admin:
            await factory.start(registry)
            try:
                discovery = await timed_publish(admin, registry, group, 0, within)
                fresh = await timed_new_agents(admin, registry, group, new_agents, within)
                first = await timed_publish(admin, registry, group, 1, within)
                await timed_publish(admin, registry, group, 2, within)  # warm-up
                steady = [
                    await timed_publish(admin, registry, group, edit, within)
                    for edit in range(3, changes + 3)
                ]
                prompt = registry.get(NAME).system_prompt or ""
                assert prompt.startswith(f"You are edit number {changes + 2}."), prompt
            finally:
                await factory.stop()
                await admin.delete(agent_data_id(NAME), group)
    return {
        "discovery_ms": round(discovery, 1),
        "new_data_id": summary(fresh),
        "fuzzy_watch": bool(factory.source and factory.source.fuzzy_watching),
        "first_change_ms": round(first, 1),
        "steady": summary(steady),
        "refused": watch.refused,
        "stale_swaps": watch.stale_swaps,
    }


def percentile(ordered: list[float], p: float) -> float:
    """Nearest-rank percentile of sorted values."""
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def summary(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    return {
        "count": len(ordered),
        "p50_ms": round(percentile(ordered, 50), 1),
        "p95_ms": round(percentile(ordered, 95), 1),
        "p99_ms": round(percentile(ordered, 99), 1),
        "max_ms": round(ordered[-1], 1),
        "min_ms": round(ordered[0], 1),
        "mean_ms": round(statistics.fmean(ordered), 1),
    }


@asynccontextmanager
async def nacos_server(address: str | None) -> AsyncIterator[tuple[str, str, str]]:
    """``(server_addr, base_url, what)``: the given server, or one of our own for the block."""
    if address is not None:
        yield address, f"http://{address}/nacos", f"external {address}"
        return
    with (
        tempfile.TemporaryDirectory(prefix="dynagent-bench-nacos-") as home,
        claimed_port({}, start=OWN_PORT) as port,
    ):
        server = NacosServer(port, Path(home) / "home")
        try:
            seconds = await asyncio.to_thread(server.start, clean=True)
            print(f"Nacos started on {server.addr} in {seconds:.1f} s", file=sys.stderr)
            yield server.addr, server.base_url, f"own (scripts/nacos.sh) on {server.addr}"
        finally:
            await asyncio.to_thread(server.stop)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    async with nacos_server(args.nacos) as (server_addr, base_url, what):
        async with (
            NacosAdmin(base_url) as admin,
            admin.session.get(f"{base_url}/v3/admin/core/state") as response,
        ):
            nacos_version = (await response.json(content_type=None))["data"]["version"]
        figures = await measure(
            server_addr, base_url, args.changes, args.poll, args.within, args.new
        )
    steady = figures["steady"]
    return {
        "scenario": "Nacos config published (v3 admin API) -> new revision served "
        "(in-process NacosAgentBuilderFactory)",
        "changes": args.changes,
        **figures,
        "poll_seconds": args.poll,
        "bar_p50_ms": BAR_P50_MS,
        "bar_p99_ms": BAR_P99_MS,
        "bar_new_data_id_p99_ms": BAR_NEW_P99_MS,
        "within_bar": steady["p50_ms"] <= BAR_P50_MS
        and steady["p99_ms"] <= BAR_P99_MS
        and figures["new_data_id"]["p99_ms"] <= BAR_NEW_P99_MS,
        "nacos": f"{nacos_version}, {what}",
        "nacos_sdk": version("nacos-sdk-python"),
        "python": platform.python_version(),
        "machine": platform.platform(),
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def row(label: str, figures: dict[str, float], keys: tuple[str, ...]) -> str:
    return f"{label:>22}{figures['count']:>10}" + "".join(f"{figures[k]:>10.1f}" for k in keys)


def table(data: dict[str, Any]) -> str:
    steady, fresh = data["steady"], data["new_data_id"]
    keys = ("p50_ms", "p95_ms", "p99_ms", "max_ms", "min_ms", "mean_ms")
    lines = [
        f"{data['scenario']}; Nacos {data['nacos']}; poll {data['poll_seconds']} s; "
        f"fuzzy watch {'on' if data['fuzzy_watch'] else 'OFF'}",
        f"{'':>22}" + "".join(f"{k:>10}" for k in ("n", *(k[:-3] + " ms" for k in keys))),
        row("edit -> served", steady, keys),
        row("new dataId -> served", fresh, keys),
        f"first new dataId (service just started): {data['discovery_ms']:.1f} ms",
        f"first change after discovery: {data['first_change_ms']:.1f} ms",
        f"bars: edit p50 <= {BAR_P50_MS:.0f} ms, p99 <= {BAR_P99_MS:.0f} ms; "
        f"new dataId p99 <= {BAR_NEW_P99_MS:.0f} ms: "
        f"{'met' if data['within_bar'] else 'NOT met'}; refused: {data['refused']}; "
        f"swaps back to an older edit: {data['stale_swaps']}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.reload_nacos", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--changes", type=int, default=50, help="steady-state changes (50)")
    parser.add_argument("--new", type=int, default=20, help="new dataIds published (20)")
    parser.add_argument("--quick", action="store_true", help="10 changes, 5 new dataIds")
    parser.add_argument("--nacos", metavar="HOST:PORT", help="use a running server")
    parser.add_argument(
        "--poll", type=float, default=NacosConfig().poll_seconds, help="reconcile period, s"
    )
    parser.add_argument("--within", type=float, default=10.0, help="seconds before a change fails")
    parser.add_argument("--output", type=Path, default=RESULTS, help="where to write the JSON")
    parser.add_argument("--check", action="store_true", help="exit 1 when a bar is not met")
    args = parser.parse_args(argv)
    if args.quick:
        args.changes = 10
        args.new = min(args.new, 5)
    if args.changes < 1:
        parser.error("--changes must be at least 1")

    logger.remove()  # one line per reload would drown the table
    logger.add(sys.stderr, level="WARNING")
    data = asyncio.run(run(args))

    print(table(data))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(data, indent=2) + "\n")
    print(f"written to {args.output}")
    return 1 if args.check and not data["within_bar"] else 0


if __name__ == "__main__":
    sys.exit(main())
