"""Scale: 1,000 agents in Nacos, loaded by the full-agent factory.

Publishes the agents through the Nacos admin API first (setup, not measured),
then a fresh process (``bench._scale_worker``) times the factory's start until
every agent is served, its resident memory before and after, and one agent's
change published → rebuilt, checking that no other agent was rebuilt (registry
events and revisions). Bar: loaded in ≤ 10 s; one change rebuilds one agent.

    .venv/bin/python -m bench.scale              # 1,000 agents, Nacos on port 28848
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench._nacos import PORT, nacos, publish_all
from bench._process import Child
from bench._scale_docs import GROUP, agent_name, document
from dynagent.factories.nacos import agent_data_id
from tests.support.nacos import NacosServer

BAR_SECONDS = 10.0
RESULTS = Path(__file__).parent / "results" / "scale.json"


async def measure(server: NacosServer, model_url: str, count: int) -> dict[str, Any]:
    await publish_all(
        server,
        GROUP,
        ((agent_data_id(agent_name(i)), document(i, model_url)) for i in range(count)),
    )
    with tempfile.TemporaryDirectory(prefix="dynagent-bench-scale-") as folder:
        worker = Child(
            "bench._scale_worker",
            server.addr,
            str(count),
            str(Path(folder) / "snapshot"),
            model_url,
            stderr=Path(folder) / "worker.log",
        )
        try:
            result = await worker.start(within=180)
        except RuntimeError as exc:
            log = (Path(folder) / "worker.log").read_text()[-3000:]
            raise RuntimeError(f"{exc}\n{log}") from None
        await worker.stop()
    result["bar_load_seconds"] = BAR_SECONDS
    result["ok"] = result["load_seconds"] <= BAR_SECONDS and result["only_one_rebuilt"]
    return result


def table(data: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"{data['agents']} agents in Nacos: all {data['served']} served in "
            f"{data['load_seconds']:.2f} s (bar <= {data['bar_load_seconds']:.0f} s)",
            f"  RSS {data['rss_before_mb']} MB -> {data['rss_after_mb']} MB: "
            f"+{data['rss_delta_mb']} MB, {data['rss_per_agent_kb']} KB per agent",
            f"  one change published -> rebuilt in {data['rebuild_one_seconds'] * 1000:.0f} ms;"
            f" rebuilt {data['rebuilt']}; only that one: {data['only_one_rebuilt']}",
            f"  bar: {'met' if data['ok'] else 'NOT met'}",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.scale", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--nacos-port", type=int, default=PORT)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    async def main_async() -> dict[str, Any]:
        async with Child("bench._model_server") as model, nacos(args.nacos_port) as server:
            return await measure(server, model.ready["base_url"], args.agents)

    data = asyncio.run(main_async())
    print(table(data))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(data, indent=2) + "\n")
    return 0 if data["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
