"""``python -m bench._scale_worker ADDR COUNT SNAPSHOT_DIR``: the Nacos full-agent factory
loading COUNT agents, in a fresh process so that its memory is its own.

Prints one JSON line: the time from ``factory.start`` to every agent served, the
resident memory it added, and the time from one agent's change published
(through the Nacos admin HTTP API, as an operator's edit) to its new revision
served, with which agents were rebuilt meanwhile.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from loguru import logger

from bench._process import rss_bytes
from bench._scale_docs import GROUP, agent_name, document
from dynagent import AgentBuilder, load_spec
from dynagent.config import NacosConfig
from dynagent.nacos.factory import NacosAgentBuilderFactory, agent_data_id
from dynagent.registry.facade import AgentRegistry
from tests.support.nacos import NacosAdmin

POLL_SECONDS = 2.0


def revisions(registry: AgentRegistry) -> dict[str, str | None]:
    return {e.name: e.stable.revision if e.stable else None for e in registry}


async def measure(addr: str, count: int, snapshot: Path, model_url: str) -> dict[str, Any]:
    settings = NacosConfig(
        server_addr=addr, group=GROUP, snapshot_dir=snapshot, poll_seconds=POLL_SECONDS
    )
    registry = AgentRegistry()
    events: Counter[tuple[str, str]] = Counter()
    registry.listeners.append(lambda event: events.update([(event.name, event.kind)]))
    factory = NacosAgentBuilderFactory(AgentBuilder(environ={}), settings)
    gc.collect()
    rss_before = rss_bytes()
    started = time.perf_counter()
    await factory.start(registry)
    await registry.wait_for(lambda r: len(revisions(r)) >= count, within=120)
    loaded = time.perf_counter() - started
    served = revisions(registry)
    gc.collect()
    rss_after = rss_bytes()
    try:
        rebuild = await _change_one(addr, registry, events, count, model_url)
    finally:
        await factory.stop()
    return {
        "agents": count,
        "served": sum(1 for revision in served.values() if revision),
        "load_seconds": round(loaded, 3),
        "rss_before_mb": round(rss_before / 2**20, 1),
        "rss_after_mb": round(rss_after / 2**20, 1),
        "rss_delta_mb": round((rss_after - rss_before) / 2**20, 1),
        "rss_per_agent_kb": round((rss_after - rss_before) / 1024 / count, 1),
        **rebuild,
    }


async def _change_one(
    addr: str,
    registry: AgentRegistry,
    events: Counter[tuple[str, str]],
    count: int,
    model_url: str,
) -> dict[str, Any]:
    """Publish a new version of one agent; only that agent may be rebuilt."""
    target = agent_name(count // 2)
    before = revisions(registry)
    events.clear()
    changes_before = registry.changes
    text = document(count // 2, model_url, version=time.time_ns())
    expected = load_spec(text, fmt="yaml").revision
    async with NacosAdmin(f"http://{addr}/nacos") as admin:
        started = time.perf_counter()
        await admin.publish(agent_data_id(target), GROUP, text)
        await registry.wait_for(lambda r: revisions(r).get(target) == expected, within=30)
        rebuilt_in = time.perf_counter() - started
    # A reconcile poll later, nothing else may have changed either.
    await asyncio.sleep(POLL_SECONDS + 0.5)
    after = revisions(registry)
    changed = sorted(name for name in after if after[name] != before.get(name))
    return {
        "rebuild_one_seconds": round(rebuilt_in, 3),
        "rebuilt": changed,
        "registry_changes": registry.changes - changes_before,
        "events": sorted(f"{name}: {what} x{n}" for (name, what), n in events.items()),
        "only_one_rebuilt": changed == [target] and set(events) == {(target, "swapped")},
    }


def main() -> None:
    addr, count, snapshot, model_url = sys.argv[1:5]
    logger.remove()
    logger.add(sys.stderr, level="INFO")  # as the service logs
    result = asyncio.run(measure(addr, int(count), Path(snapshot), model_url))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
