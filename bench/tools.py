"""Real tools: an MCP round trip and an agent-as-tool call, each against its baseline.

MCP: the same ``tools/call`` of a real MCP server (the official SDK's ``MCPServer``,
``tests/mcp/server.py``, in its own process on loopback, streamable HTTP) made
through Dynagent's tool (pooled session, argument validation, result mapping, the
run loop's timeout) and directly with the SDK's ``Client`` on one open session.
Agent as tool: an agent (one call to the bench's scripted model server, through the
real ``openai`` client) run through another agent's ``type: agent`` tool, called as the
parent's run loop calls it (argument check, ``asyncio.timeout``) within a parent's call
scope (registry routing, key scope, depth, nested trace record), against the same agent's
``Agent.run`` on the same scripted model.

Calls are made in rounds of ``ROUND`` per side, interleaved within a round (A B B A); each
round's ratio is its median of A over its median of B, and the figure is the median of the
rounds' ratios. On a shared machine a burst of other work hits a few rounds, not the
figure, where one median over every call moved with it. Bars: MCP <= 1.2x wall; agent as
tool <= 1.1x.

    .venv/bin/python -m bench.tools            # 800 calls each (20 rounds)
    .venv/bin/python -m bench.tools --quick    # 200 (5 rounds)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp.client import Client

from bench._process import Child, free_port
from bench._service import agent_document
from bench._stats import summary
from dynagent import AgentBuilder, Resources, load_spec
from dynagent.mcp.tools import McpServers
from dynagent.registry.facade import AgentRegistry
from dynagent.tools.agent import CALL_SCOPE, CallScope

ROOT = Path(__file__).parents[1]
MCP_BAR, AGENT_BAR = 1.2, 1.1
ROUND = 40
"""Calls per side in one round."""
WARM = 50
"""Calls per side before measuring: connections opened, pools and caches filled."""


@dataclass
class Samples:
    """Wall and CPU (this process) seconds per call, by round."""

    wall: list[list[float]] = field(default_factory=list)
    cpu: list[list[float]] = field(default_factory=list)

    def everything(self) -> list[float]:
        return [s for part in self.wall for s in part]


async def _alternate(
    ours: Callable[[], Awaitable[Any]], theirs: Callable[[], Awaitable[Any]], calls: int
) -> tuple[Samples, Samples]:
    """Seconds per call of each, ``calls`` each in rounds of ``ROUND``, interleaved
    A B B A within a round (drift and order hit both alike)."""
    a, b = Samples(), Samples()
    pairs = ((ours, a), (theirs, b))
    for _ in range(max(1, calls // ROUND)):
        for side in (a, b):
            side.wall.append([])
            side.cpu.append([])
        for number in range(ROUND):
            for call, side in pairs if number % 2 == 0 else reversed(pairs):
                started, used = time.perf_counter(), time.process_time()
                await call()
                side.wall[-1].append(time.perf_counter() - started)
                side.cpu[-1].append(time.process_time() - used)
    return a, b


async def _listening(port: int, within: float = 20) -> None:
    async with asyncio.timeout(within):
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.05)
                continue
            writer.close()
            return


async def mcp_round_trip(calls: int) -> dict[str, Any]:
    port = free_port()
    server = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "tests.mcp.server", "--transport", "streamable_http"],
        *["--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    servers = McpServers()
    try:
        await _listening(port)
        spec = load_spec(
            {
                "name": "bench",
                "model": {"provider": "test"},
                "prompt": {"system": "x"},
                # allow_private: the bench's MCP server listens on loopback.
                "tools": [
                    {
                        "type": "mcp",
                        "name": "b",
                        "url": url,
                        "allow": ["echo"],
                        "allow_private": True,
                    }
                ],
            }
        )
        builder = AgentBuilder(mcp=servers)
        await builder.prepare(spec)
        tool = builder.build(spec).tools["b_echo"]
        arguments = {"text": "hello"}

        async def ours() -> str:
            assert tool.argument_errors(arguments) is None
            async with asyncio.timeout(tool.timeout):  # as the run loop calls one tool
                return await tool.function(arguments)

        async with Client(url, mode="legacy", cache=None) as direct:

            async def theirs() -> Any:
                return await direct.call_tool("echo", arguments)

            await _alternate(ours, theirs, WARM)
            a, b = await _alternate(ours, theirs, calls)
    finally:
        await servers.aclose()
        server.kill()
        await server.wait()
    return _figures(a, b, MCP_BAR)


async def agent_as_tool(model_url: str, calls: int) -> dict[str, Any]:
    registry = AgentRegistry()
    resources = Resources()
    builder = AgentBuilder(agents=registry, resources=resources)
    callee = builder.build(load_spec(agent_document(model_url, name="callee")))
    registry.table.put(callee)
    caller = builder.build(
        load_spec(
            {
                "name": "caller",
                "model": {"provider": "test"},
                "prompt": {"system": "x"},
                "tools": [{"type": "agent", "name": "callee"}],
            }
        )
    )
    tool = caller.tools["callee"]
    arguments = {"input": "hello"}

    async def ours() -> str:
        token = CALL_SCOPE.set(CallScope(trace_id="t", nested=[]))
        try:
            assert tool.argument_errors(arguments) is None
            async with asyncio.timeout(tool.timeout):  # as the run loop calls one tool
                return await tool.function(arguments)
        finally:
            CALL_SCOPE.reset(token)

    async def theirs() -> Any:
        return await callee.run("hello", trace_id="t")

    try:
        await _alternate(ours, theirs, WARM)
        a, b = await _alternate(ours, theirs, calls)
    finally:
        await resources.aclose()
    return _figures(a, b, AGENT_BAR)


def _figures(ours: Samples, theirs: Samples, bar: float) -> dict[str, Any]:
    """The median over rounds of each round's median ratio, and the spread of the rounds."""
    rounds = [
        statistics.median(mine) / statistics.median(base)
        for mine, base in zip(ours.wall, theirs.wall, strict=True)
    ]
    cpu_rounds = [sum(mine) / sum(base) for mine, base in zip(ours.cpu, theirs.cpu, strict=True)]
    value = round(statistics.median(rounds), 3)
    cpu_mine = statistics.fmean(s for part in ours.cpu for s in part) * 1000
    cpu_base = statistics.fmean(s for part in theirs.cpu for s in part) * 1000
    return {
        "dynagent_ms": summary([s * 1000 for s in ours.everything()]),
        "baseline_ms": summary([s * 1000 for s in theirs.everything()]),
        "ratio": value,
        "rounds": {"n": len(rounds), "min": round(min(rounds), 3), "max": round(max(rounds), 3)},
        "bar": bar,
        "met": value <= bar,
        "cpu_ms": {"dynagent": round(cpu_mine, 3), "baseline": round(cpu_base, 3)},
        "cpu_ratio": round(statistics.median(cpu_rounds), 3),
    }


async def measure(model_url: str, calls: int) -> dict[str, Any]:
    return {
        "mcp": await mcp_round_trip(calls),
        "agent_tool": await agent_as_tool(model_url, calls),
    }


def table(data: dict[str, Any]) -> str:
    rows = []
    for key, label in (
        ("mcp", "MCP tool round trip vs SDK client"),
        ("agent_tool", "agent as tool vs Agent.run"),
    ):
        part = data[key]
        rows.append(
            f"{label:<36} median {part['dynagent_ms']['median']:.3f} ms vs "
            f"{part['baseline_ms']['median']:.3f} ms: {part['ratio']:.3f}x "
            f"(bar <= {part['bar']}) {'met' if part['met'] else 'MISSED'}, "
            f"{part['rounds']['n']} rounds {part['rounds']['min']:.3f}-"
            f"{part['rounds']['max']:.3f}x; client CPU {part['cpu_ratio']:.3f}x"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    data = asyncio.run(_standalone(200 if args.quick else 800))
    print(table(data))
    print(json.dumps(data, indent=2))


async def _standalone(calls: int) -> dict[str, Any]:
    async with Child("bench._model_server") as model:
        data = await measure(model.ready["base_url"], calls)
        await model.stop()
    return data


if __name__ == "__main__":
    main()
