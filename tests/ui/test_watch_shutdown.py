"""An open live feed of the operations page does not hold a stopping service back: on
SIGTERM the stream ends and the process exits 0 long before ``listen.drain_seconds``: sooner
than it took to start."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import aiohttp

from tests.support.process import free_port, serve_process, write_config
from tests.support.service import agent_document, write_agent

DRAIN = 30.0


async def test_sigterm_ends_the_watch_feed_and_the_process_promptly(tmp_path: Path) -> None:
    agents = tmp_path / "agents"
    agents.mkdir()
    write_agent(agents, agent_document("bot"))
    config = write_config(
        tmp_path,
        {
            "listen": {"drain_seconds": DRAIN},
            "factories": {"default": {"directory": str(agents)}},
            "sessions": {"store": "memory"},
        },
    )
    async with (
        serve_process(config, free_port()) as served,
        aiohttp.ClientSession() as http,
        http.get(f"{served.url}/v1/watch/agents") as feed,
    ):
        first = await feed.content.readuntil(b"\n\n")
        assert first.startswith(b"event: snapshot\n")
        stopped = time.monotonic()
        served.process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(DRAIN / 3):
            rest = await feed.content.read()  # the stream ends: EOF, no error
        assert b"event: snapshot" not in rest
        assert await served.exit_code(within=DRAIN / 3) == 0
        # Stopping takes less than starting did, not the drain time.
        assert time.monotonic() - stopped < served.started_in
