"""``listen.event_loop``: ``dynagent serve`` runs on asyncio's loop, or on uvloop when asked;
asking for uvloop where it is missing is one clear error, before anything starts."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import aiohttp
import pytest
import uvloop

from dynagent.exceptions import StartupError
from dynagent.http.serving import loop_factory
from tests.support import Reply, ScriptedModelServer
from tests.support.process import free_port, serve_process, write_config
from tests.support.service import agent_document, write_agent


def test_uvloop_is_chosen_by_name_and_asyncio_is_the_default() -> None:
    assert loop_factory("uvloop") is uvloop.new_event_loop
    assert loop_factory("asyncio") is None


def test_uvloop_where_it_is_missing_is_a_startup_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # `import uvloop` raises ImportError
    assert loop_factory("asyncio") is None
    with pytest.raises(StartupError, match=r"listen\.event_loop is uvloop, which is not installed"):
        loop_factory("uvloop")


@pytest.mark.parametrize("loop", [None, "asyncio", "uvloop"])
async def test_the_service_serves_and_stops_on_the_chosen_loop(
    model_server: ScriptedModelServer, tmp_path: Path, loop: str | None
) -> None:
    model_server.script("gpt-main", [Reply("on the loop")])
    agents = tmp_path / "agents"
    agents.mkdir()
    write_agent(agents, agent_document("bot", model_server))
    config = write_config(
        tmp_path,
        {
            "listen": {"event_loop": loop} if loop else {},
            "factories": {"default": {"directory": str(agents)}},
            "sessions": {"store": "sqlite", "path": str(tmp_path / "sessions.db")},
        },
    )
    port = free_port()
    async with serve_process(config, port) as served:
        await served.wait_log(f"(event loop: {loop or 'asyncio'})", within=5)
        async with (
            aiohttp.ClientSession() as http,
            http.post(f"{served.url}/v1/agents/bot/invoke", json={"input": "hi"}) as response,
        ):
            assert response.status == 200
            assert (await response.json())["output"] == "on the loop"
        served.process.send_signal(signal.SIGTERM)
        assert await served.exit_code(within=30) == 0
