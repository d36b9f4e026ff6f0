"""The bench's own Nacos: ``scripts/nacos.sh`` on a dedicated port, home in a temp dir."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path

from tests.support.nacos import NacosAdmin, NacosServer

PORT = 28848
"""HTTP; gRPC on +1000/+1001, JRaft on -1000. Away from 8848 and the tests' 18848."""


@asynccontextmanager
async def nacos(port: int = PORT) -> AsyncIterator[NacosServer]:
    """A fresh standalone Nacos for the block; stopped (all its ports closed) after it."""
    with tempfile.TemporaryDirectory(prefix="dynagent-bench-nacos-") as home:
        server = NacosServer(port, Path(home) / "home")
        if server.listening():
            raise RuntimeError(f"ports of {server.addr} are taken; pass another --nacos-port")
        await asyncio.to_thread(server.start, clean=True)
        try:
            yield server
        finally:
            await asyncio.to_thread(server.stop)


async def publish_all(
    server: NacosServer, group: str, documents: Iterable[tuple[str, str]], concurrency: int = 16
) -> None:
    """Publish ``(dataId, yaml)`` pairs through the admin API (setup, not measured)."""
    gate = asyncio.Semaphore(concurrency)
    async with NacosAdmin(server.base_url) as admin:

        async def one(data_id: str, text: str) -> None:
            async with gate:
                await admin.publish(data_id, group, text)

        await asyncio.gather(*(one(data_id, text) for data_id, text in documents))
