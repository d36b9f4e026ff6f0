"""Real MCP servers (the official SDK's ``MCPServer``, ``tests/mcp/server.py``) in their
own processes on loopback, started and stopped by the tests."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.process import free_port

ROOT = Path(__file__).parents[2]


@dataclass
class McpProcess:
    transport: str
    port: int
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        path = "/sse" if self.transport == "sse" else "/mcp"
        return f"http://127.0.0.1:{self.port}{path}"

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()

    def heal(self) -> None:
        """Make ``tools/list`` answer again after the tool ``flake`` broke it."""
        self.process.send_signal(signal.SIGUSR1)


async def _listening(port: int, process: subprocess.Popen[bytes], within: float = 20) -> None:
    async with asyncio.timeout(within):
        while True:
            assert process.poll() is None, "the MCP server exited before it listened"
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.05)  # polling a starting process, not a reload
                continue
            writer.close()
            await writer.wait_closed()
            return


@asynccontextmanager
async def mcp_process(transport: str, port: int | None = None) -> AsyncIterator[McpProcess]:
    port = port or free_port()
    command = [sys.executable, "-m", "tests.mcp.server", "--transport", transport]
    process = subprocess.Popen(
        [*command, "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        await _listening(port, process)
        yield McpProcess(transport, port, process)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.fixture
async def http_server() -> AsyncIterator[McpProcess]:
    async with mcp_process("streamable_http") as server:
        yield server


@pytest.fixture
async def sse_server() -> AsyncIterator[McpProcess]:
    async with mcp_process("sse") as server:
        yield server
