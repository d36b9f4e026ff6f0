"""Hot reload of the Spring AI Alibaba layout: pieces published → new revision served.

Runs ``SpringAiAlibabaAgentBuilderFactory`` in-process against a real Nacos (its
own, or ``--nacos``) with the offline ``test`` model. Two figures:
- release → served: ``model.json`` and the prompt published together (two v3
  admin requests); the clock runs until the registry serves the revision holding
  both. It includes the 300 ms assembly window that makes them one revision.
- new agent → served: a new group ``ai-agent-*`` with its pieces and prompt.

    .venv/bin/python -m bench.reload_saa --quick
    .venv/bin/python -m bench.reload_saa --nacos 127.0.0.1:8848
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from loguru import logger

from dynagent import AgentBuilder
from dynagent.config import NacosConfig
from dynagent.nacos.saa_factory import ASSEMBLY_WINDOW, SpringAiAlibabaAgentBuilderFactory
from dynagent.registry.facade import AgentRegistry
from tests.support.nacos import NacosAdmin

from .reload_nacos import nacos_server, summary

RESULTS = Path(__file__).parent / "results" / "reload_saa.json"
META = "nacos-ai-meta"


async def publish_agent(admin: NacosAdmin, name: str, edit: int) -> None:
    """The pieces of agent ``name`` at edit ``edit``: model.json and the prompt change."""
    group = f"ai-agent-{name}"
    base = {"promptKey": f"{name}-p", "description": "bench", "maxIterations": 4}
    model = {"model": "m", "temperature": f"{edit % 10 / 10}", "maxTokens": "64"}
    prompt = {"promptKey": f"{name}-p", "version": "1", "template": f"You are edit {edit}."}
    if edit == 0:
        await admin.publish("agent-base.json", group, json.dumps(base), kind="json")
    await admin.publish("model.json", group, json.dumps({**model, "baseUrl": ""}), kind="json")
    await admin.publish(f"prompt-{name}-p.json", META, json.dumps(prompt), kind="json")


def serves(registry: AgentRegistry, name: str, edit: int) -> bool:
    if name not in registry or registry.entry(name).stable is None:
        return False
    agent = registry.get(name)
    temperature = agent.spec.model.settings.temperature
    return agent.system_prompt == f"You are edit {edit}." and temperature == edit % 10 / 10


async def timed(admin: NacosAdmin, registry: AgentRegistry, name: str, edit: int) -> float:
    started = time.perf_counter()
    await publish_agent(admin, name, edit)
    await registry.wait_for(lambda r: serves(r, name, edit), within=10)
    return (time.perf_counter() - started) * 1000


async def measure(server_addr: str, base_url: str, changes: int, agents: int) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:6]
    with tempfile.TemporaryDirectory(prefix="dynagent-bench-saa-") as folder:
        settings = NacosConfig(server_addr=server_addr, snapshot_dir=Path(folder) / "snapshot")
        registry = AgentRegistry()
        swaps: list[str] = []
        registry.listeners.append(lambda event: swaps.append(event.kind))
        factory = SpringAiAlibabaAgentBuilderFactory(AgentBuilder(environ={}), settings)
        async with NacosAdmin(base_url) as admin:
            await factory.start(registry)
            try:
                fresh = [await timed(admin, registry, f"b{tag}-{i}", 0) for i in range(agents)]
                swaps.clear()
                edits = [
                    await timed(admin, registry, f"b{tag}-0", e) for e in range(1, changes + 1)
                ]
                releases_swapped = swaps.count("swapped")
            finally:
                await factory.stop()
                for i in range(agents):
                    for data_id in ("agent-base.json", "model.json"):
                        await admin.delete(data_id, f"ai-agent-b{tag}-{i}")
                    await admin.delete(f"prompt-b{tag}-{i}-p.json", META)
    return {
        "release": summary(edits),
        "new_agent": summary(fresh),
        "swaps_per_release": releases_swapped / changes,
        "assembly_window_ms": ASSEMBLY_WINDOW * 1000,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    async with nacos_server(args.nacos) as (server_addr, base_url, what):
        figures = await measure(server_addr, base_url, args.changes, args.agents)
    return {
        "scenario": "Spring AI Alibaba layout: model.json + prompt published together -> "
        "one new revision served (in-process SpringAiAlibabaAgentBuilderFactory)",
        "nacos": what,
        **figures,
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.reload_saa", description=__doc__)
    parser.add_argument("--changes", type=int, default=30, help="releases (30)")
    parser.add_argument("--agents", type=int, default=10, help="new agents (10)")
    parser.add_argument("--quick", action="store_true", help="10 releases, 3 new agents")
    parser.add_argument("--nacos", metavar="HOST:PORT", help="use a running server")
    parser.add_argument("--output", type=Path, default=RESULTS, help="where to write the JSON")
    args = parser.parse_args(argv)
    if args.quick:
        args.changes, args.agents = 10, 3
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    data = asyncio.run(run(args))
    keys = ("p50_ms", "p95_ms", "p99_ms", "max_ms", "min_ms")
    print(data["scenario"] + f"; Nacos {data['nacos']}")
    print(f"{'':>22}{'n':>6}" + "".join(f"{k[:-3] + ' ms':>10}" for k in keys))
    for label, key in (("release -> served", "release"), ("new agent -> served", "new_agent")):
        row = data[key]
        print(f"{label:>22}{row['count']:>6}" + "".join(f"{row[k]:>10.1f}" for k in keys))
    print(f"swaps per release: {data['swaps_per_release']:g} (1 = never half-applied)")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(data, indent=2) + "\n")
    print(f"written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
