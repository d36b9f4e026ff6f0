"""Hot reload from files: agent file saved → new revision served, in milliseconds.

Runs the local default factory (watchdog ``FileSource`` + ``DocumentApplier``)
and the ``AgentRegistry`` in-process on a temporary folder, with the offline
``test`` model: no HTTP, so only the reload path is measured. Each edit changes
the agent's prompt; the clock runs from just before the file is written until
the registry serves the edit's revision (awaited on the registry's change
event, never polled). The bar: median ≤ 200 ms.

    .venv/bin/python -m bench.reload_files              # 20 edits, plain writes
    .venv/bin/python -m bench.reload_files --atomic     # write a temp file, then rename
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import yaml
from loguru import logger

from dynagent import AgentBuilder, load_spec
from dynagent.factories import DefaultAgentBuilderFactory
from dynagent.registry.events import AgentRefused, RegistryEvent
from dynagent.registry.facade import AgentRegistry

BAR_MS = 200.0
RESULTS = Path(__file__).parent / "results" / "reload_files.json"


def document(edit: int) -> dict[str, Any]:
    return {
        "name": "reloaded",
        "model": {"provider": "test"},
        "prompt": {"system": f"You are edit number {edit}. Answer briefly."},
        "tools": ["calculator"],
        "limits": {"max_steps": 4},
    }


def save(path: Path, data: dict[str, Any], *, atomic: bool) -> None:
    text = yaml.safe_dump(data, sort_keys=False)
    if atomic:
        temporary = path.with_name(f".{path.name}.tmp")
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, path)
    else:
        path.write_text(text, encoding="utf-8")


def serving(registry: AgentRegistry, name: str) -> str | None:
    if name not in registry:
        return None
    agent = registry.entry(name).stable
    return agent.revision if agent else None


def served(revision: str) -> Callable[[AgentRegistry], bool]:
    return lambda registry: serving(registry, "reloaded") == revision


async def measure(edits: int, *, atomic: bool, within: float) -> tuple[list[float], int]:
    """Latency of each edit in ms, and how many definitions the registry refused."""
    refused = 0

    def count(event: RegistryEvent) -> None:
        nonlocal refused
        refused += isinstance(event, AgentRefused)

    with tempfile.TemporaryDirectory(prefix="dynagent-reload-") as folder:
        path = Path(folder) / "reloaded.yaml"
        save(path, document(0), atomic=atomic)
        registry = AgentRegistry()
        registry.listeners.append(count)
        factory = DefaultAgentBuilderFactory(AgentBuilder(environ={}), directory=Path(folder))
        await factory.start(registry)
        latencies = []
        try:
            assert serving(registry, "reloaded") == load_spec(document(0)).revision
            for edit in range(1, edits + 1):
                expected = load_spec(document(edit)).revision
                started = time.perf_counter()
                save(path, document(edit), atomic=atomic)
                await registry.wait_for(served(expected), within=within)
                latencies.append((time.perf_counter() - started) * 1000)
                prompt = registry.get("reloaded").system_prompt or ""
                assert prompt.startswith(f"You are edit number {edit}."), prompt
        finally:
            await factory.stop()
    return latencies, refused


def report(latencies: list[float], refused: int, *, atomic: bool) -> dict[str, Any]:
    ordered = sorted(latencies)
    median = statistics.median(ordered)
    return {
        "scenario": "agent file saved -> new revision served (in-process default factory)",
        "save": "temp file + os.replace" if atomic else "plain write",
        "edits": len(ordered),
        "median_ms": round(median, 3),
        "p95_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))], 3),
        "max_ms": round(ordered[-1], 3),
        "min_ms": round(ordered[0], 3),
        "mean_ms": round(statistics.fmean(ordered), 3),
        "refused_while_saving": refused,
        "bar_median_ms": BAR_MS,
        "within_bar": median <= BAR_MS,
        "python": platform.python_version(),
        "watchdog": version("watchdog"),
        "machine": platform.platform(),
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def table(data: dict[str, Any]) -> str:
    lines = [
        f"{data['scenario']}; {data['edits']} edits, {data['save']}",
        f"{'median ms':>12}{'p95 ms':>12}{'max ms':>12}{'min ms':>12}{'mean ms':>12}",
        f"{data['median_ms']:>12.1f}{data['p95_ms']:>12.1f}{data['max_ms']:>12.1f}"
        f"{data['min_ms']:>12.1f}{data['mean_ms']:>12.1f}",
        f"bar: median <= {BAR_MS:.0f} ms: {'met' if data['within_bar'] else 'NOT met'}"
        f"; definitions refused while saving: {data['refused_while_saving']}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.reload_files", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--edits", type=int, default=20, help="edits to time (default 20)")
    parser.add_argument("--atomic", action="store_true", help="save via temp file + rename")
    parser.add_argument("--within", type=float, default=5.0, help="seconds before an edit fails")
    parser.add_argument("--output", type=Path, default=RESULTS, help="where to write the JSON")
    parser.add_argument("--check", action="store_true", help="exit 1 when the bar is not met")
    args = parser.parse_args(argv)
    if args.edits < 1:
        parser.error("--edits must be at least 1")

    logger.remove()  # one line per reload would drown the table
    logger.add(sys.stderr, level="WARNING")
    latencies, refused = asyncio.run(measure(args.edits, atomic=args.atomic, within=args.within))
    data = report(latencies, refused, atomic=args.atomic)

    print(table(data))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(data, indent=2) + "\n")
    print(f"written to {args.output}")
    return 1 if args.check and not data["within_bar"] else 0


if __name__ == "__main__":
    sys.exit(main())
