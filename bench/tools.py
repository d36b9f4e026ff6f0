"""Real tools: an MCP round trip and an agent-as-tool call, each against its baseline.

MCP: the same ``tools/call`` of a real MCP server (the official SDK's ``MCPServer``,
``tests/mcp/server.py``, in its own process on loopback, streamable HTTP) made
through Dynagent's tool (pooled session, argument validation, result mapping, the
run loop's timeout) and directly with the SDK's ``Client`` on one open session.
Agent as tool: an agent (one call to the bench's scripted model server, through the
real ``openai`` client) run through another agent's ``type: agent`` tool (registry
routing, key scope, nested trace) against the same agent's ``Agent.run``. Calls are
interleaved (A B B A); medians are compared. Bars: MCP <= 1.2x wall; agent as tool <= 1.1x.

    .venv/bin/python -m bench.tools            # 800 calls each
    .venv/bin/python -m bench.tools --quick    # 200
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
from pathlib import Path
from typing import Any

from mcp.client import Client

from bench._process import Child, free_port
from bench._service import agent_document
from bench._stats import ratio, summary
from dynagent import AgentBuilder, Resources, load_spec
from dynagent.registry import AgentRegistry
from dynagent.tools.agent import CALL_SCOPE, CallScope
from dynagent.tools.mcp import McpServers

ROOT = Path(__file__).parents[1]
MCP_BAR, AGENT_BAR = 1.2, 1.1


Samples = tuple[list[float], list[float]]
"""Wall and CPU (this process) seconds per call."""


async def _alternate(
    ours: Callable[[], Awaitable[Any]], theirs: Callable[[], Awaitable[Any]], calls: int
) -> tuple[Samples, Samples]:
    """Seconds per call of each, interleaved A B B A (drift and order hit both alike)."""
    a: Samples = ([], [])
    b: Samples = ([], [])
    pairs = ((ours, a), (theirs, b))
    for number in range(calls):
        for call, (wall, cpu) in pairs if number % 2 == 0 else reversed(pairs):
            started, used = time.perf_counter(), time.process_time()
            await call()
            wall.append(time.perf_counter() - started)
            cpu.append(time.process_time() - used)
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
                "tools": [{"type": "mcp", "name": "b", "url": url, "allow": ["echo"]}],
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

            await _alternate(ours, theirs, 20)  # warm both
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
    registry.put(callee)
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
        await _alternate(ours, theirs, 50)
        a, b = await _alternate(ours, theirs, calls)
    finally:
        await resources.aclose()
    return _figures(a, b, AGENT_BAR)


def _figures(ours: Samples, theirs: Samples, bar: float) -> dict[str, Any]:
    mine = summary([s * 1000 for s in ours[0]])
    base = summary([s * 1000 for s in theirs[0]])
    value = ratio(mine["median"], base["median"])
    cpu_mine, cpu_base = statistics.fmean(ours[1]) * 1000, statistics.fmean(theirs[1]) * 1000
    return {
        "dynagent_ms": mine,
        "baseline_ms": base,
        "ratio": value,
        "bar": bar,
        "met": value <= bar,
        "cpu_ms": {"dynagent": round(cpu_mine, 3), "baseline": round(cpu_base, 3)},
        "cpu_ratio": ratio(cpu_mine, cpu_base),
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
            f"(bar <= {part['bar']}) {'met' if part['met'] else 'MISSED'}; "
            f"client CPU {part['cpu_ratio']:.3f}x"
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
