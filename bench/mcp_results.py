"""An oversized MCP tool result: what reading it costs the service, per transport.

A real MCP server (``tests/mcp/server.py``, the official SDK) answers the tool ``big``
with a text of ``--mb`` megabytes; this process calls it through ``McpServers`` as the
service does and reports the growth of its resident memory and the wall time of the
call, beside those of a 1 kB result on the same session (the floor), as ratios. The
model reads 32,000 characters of any result; before reading was bounded, a 30 MB answer
over plain JSON grew this process by 61 MB, and over stdio took 15 s of its loop.

    .venv/bin/python -m bench.mcp_results            # 30 MB, every transport
    .venv/bin/python -m bench.mcp_results --mb 200
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from dynagent.mcp._transport import McpTarget, Transport
from dynagent.mcp.tools import McpServers
from tests.mcp.conftest import mcp_process

ROOT = Path(__file__).parents[1]
TRANSPORTS = ("streamable_http", "streamable_http_json", "sse", "stdio")


def _resident() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096


async def _call(servers: McpServers, target: McpTarget, chars: int) -> tuple[float, int, str]:
    before, started = _resident(), time.perf_counter()
    try:
        outcome = f"{len(await servers.call(target, 'big', {'chars': chars}, 120))} chars"
    except Exception as exc:  # the bounded outcome: a tool error naming the bound
        outcome = f"{type(exc).__name__}"
    return time.perf_counter() - started, _resident() - before, outcome


async def _measure(transport: str, chars: int) -> str:
    servers = McpServers()
    try:
        if transport == "stdio":
            args = ("-m", "tests.mcp.server", "--transport", "stdio")
            target = McpTarget("stdio", "stdio", command=sys.executable, args=args, cwd=str(ROOT))
            return await _row(servers, target, transport, chars)
        async with mcp_process(transport) as server:
            kind: Transport = "sse" if transport == "sse" else "streamable_http"
            target = McpTarget(kind, server.url, url=server.url)
            return await _row(servers, target, transport, chars)
    finally:
        await servers.aclose()


async def _row(servers: McpServers, target: McpTarget, transport: str, chars: int) -> str:
    await servers.prepare("bench", [target])
    floor, _, _ = await _call(servers, target, 1000)
    seconds, grown, outcome = await _call(servers, target, chars)
    return (
        f"| {transport} | {outcome} | {grown / 2**20:.1f} MB | {seconds:.2f} s | "
        f"{seconds / max(floor, 1e-6):.0f}x |"
    )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=30)
    arguments = parser.parse_args()
    print("| transport | outcome | resident growth | wall | ÷ 1 kB result |")
    print("|---|---|---|---|---|")
    for transport in TRANSPORTS:
        print(await _measure(transport, arguments.mb * 1_000_000), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
