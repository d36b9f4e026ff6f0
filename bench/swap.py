"""Swapping versions under load: 200 definition changes while clients keep calling.

The service (``dynagent serve``, file source) runs in its own process; this
process keeps ``POST /v1/agents/{name}/invoke`` busy from several workers while
it rewrites the agent's file 200 times (temp file + rename, as editors save).
One change in ten is broken (an unknown tool) and must be refused. Every
response's ``X-Agent-Revision`` is checked against the revisions that were
valid. Bars: zero failed requests, zero responses from a revision
that was never valid.

    .venv/bin/python -m bench.swap            # 200 changes, one every 50 ms, 16 workers
    .venv/bin/python -m bench.swap --quick    # one every 20 ms
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from bench._load import load
from bench._process import Child, free_port
from bench._service import AGENT, Service, agent_document, write_config
from dynagent import load_spec

RESULTS = Path(__file__).parent / "results" / "swap.json"
BROKEN_EVERY = 10


def change(base_url: str, number: int) -> tuple[dict[str, Any], bool]:
    """The document of change ``number``, and whether it is valid."""
    document = agent_document(base_url, system=f"You are version {number}.")
    broken = number % BROKEN_EVERY == 0
    if broken:
        document["tools"] = ["no_such_tool"]
    return document, not broken


def save(path: Path, document: dict[str, Any]) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    os.replace(temporary, path)


async def serving(session: aiohttp.ClientSession, url: str) -> str | None:
    async with session.get(f"{url}/v1/agents/{AGENT}") as response:
        revision: str | None = (await response.json())["revision"]
        return revision


async def measure(
    model_url: str, *, changes: int, interval: float, concurrency: int
) -> dict[str, Any]:
    served: Counter[str] = Counter()

    def record(response: aiohttp.ClientResponse) -> None:
        if response.status == 200:
            served[response.headers.get("X-Agent-Revision", "?")] += 1

    with tempfile.TemporaryDirectory(prefix="dynagent-bench-") as temporary:
        folder = Path(temporary)
        agents = folder / "agents"
        agents.mkdir()
        path = agents / f"{AGENT}.yaml"
        first, _ = change(model_url, 1)
        save(path, first)
        valid = {load_spec(first).revision}
        invalid: set[str] = set()
        service = Service(write_config(folder, agents), free_port(), folder / "service.log", {})
        async with service, aiohttp.ClientSession() as session:
            stop = asyncio.Event()
            body = {"input": "ping"}
            url = f"{service.url}/v1/agents/{AGENT}/invoke"
            traffic = asyncio.create_task(
                load(
                    url, body, concurrency=concurrency, seconds=600, on_response=record, until=stop
                )
            )
            await asyncio.sleep(0.5)
            started = time.perf_counter()
            last_valid = first
            for number in range(2, changes + 2):
                document, ok = change(model_url, number)
                (valid if ok else invalid).add(_revision(document))
                if ok:
                    last_valid = document
                save(path, document)
                await asyncio.sleep(interval)
            final = load_spec(last_valid).revision
            async with asyncio.timeout(10):
                while True:  # the service is another process: ask it
                    if await serving(session, service.url) == final:
                        break
                    await asyncio.sleep(0.02)
            await asyncio.sleep(0.3)  # a little traffic on the final revision too
            changing = time.perf_counter() - started
            stop.set()
            result = await traffic
    per_revision = list(served.values())
    never_valid = sorted(set(served) - valid)
    return {
        "changes": changes,
        "broken_changes": len(invalid),
        "interval_ms": interval * 1000,
        "concurrency": concurrency,
        "seconds": round(changing, 2),
        "requests": result.requests,
        "failed": sum(result.failures.values()),
        "failures": dict(result.failures),
        "revisions_served": len(served),
        "requests_per_revision": {
            "min": min(per_revision),
            "median": statistics.median(per_revision),
            "max": max(per_revision),
        },
        "served_never_valid": never_valid,
        "served_broken": sorted(set(served) & invalid),
        "ok": not result.failures and not never_valid,
    }


def _revision(document: dict[str, Any]) -> str:
    """The revision a document would serve as; broken ones do not load, so hash the
    document with its broken tool left out of validation."""
    try:
        return load_spec(document).revision
    except Exception:  # a document that does not even parse has no revision
        return json.dumps(document, sort_keys=True)


def table(data: dict[str, Any]) -> str:
    per = data["requests_per_revision"]
    return "\n".join(
        [
            f"{data['changes']} changes ({data['broken_changes']} broken), one every "
            f"{data['interval_ms']:.0f} ms, {data['concurrency']} workers, {data['seconds']} s",
            f"  requests {data['requests']}, failed {data['failed']} {data['failures'] or ''}",
            f"  revisions served {data['revisions_served']}; requests per revision "
            f"min {per['min']} median {per['median']} max {per['max']}",
            f"  served a never-valid revision: {len(data['served_never_valid'])}; "
            f"served a broken one: {len(data['served_broken'])}",
            f"  bar (0 failed, 0 never-valid): {'met' if data['ok'] else 'NOT met'}",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.swap", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--changes", type=int, default=200)
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between changes")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--quick", action="store_true", help="a change every 20 ms")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    interval = 0.02 if args.quick else args.interval

    async def main_async() -> dict[str, Any]:
        async with Child("bench._model_server") as model:
            return await measure(
                model.ready["base_url"],
                changes=args.changes,
                interval=interval,
                concurrency=args.concurrency,
            )

    data = asyncio.run(main_async())
    print(table(data))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(data, indent=2) + "\n")
    return 0 if data["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
