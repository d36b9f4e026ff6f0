"""Nacos outages: the service keeps serving, says which source is degraded, restarts
from its own snapshot while Nacos is down, and catches up once Nacos is back."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from loguru import logger

from dynagent.config import NacosConfig
from dynagent.nacos._sdk_config import CONNECT_TIMEOUT
from tests.support.nacos import (
    NacosAdmin,
    NacosServer,
    claimed_port,
    invoke,
    nacos_service_config,
    nacos_source,
    status_of,
    without_since,
    yaml_text,
)
from tests.support.service import RunningService, agent_document, revision_of, running_service

DOWN_PORT = 38858
"""Where a port with no Nacos behind it is looked for."""


@pytest.fixture
def restartable_nacos(nacos_server: NacosServer) -> Iterator[NacosServer]:
    """The session's server for a test that stops and starts it: running again afterwards."""
    yield nacos_server
    if not nacos_server.running():
        nacos_server.start()


@pytest.fixture
def log_lines() -> Iterator[list[str]]:
    """Every message the service logs at INFO and above while the test runs."""
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(message.record["message"]), level="INFO")
    yield lines
    logger.remove(sink)


async def readyz(service: RunningService) -> tuple[int, Any]:
    response = await service.client.get("/readyz")
    return response.status, await response.json()


async def test_serving_survives_an_outage_and_a_restart_while_nacos_is_down(
    restartable_nacos: NacosServer,
    nacos: NacosAdmin,
    nacos_settings: NacosConfig,
    agents_dir: Path,
    state_dir: Path,
    log_lines: list[str],
) -> None:
    group = nacos_settings.group
    source_name = f"nacos:public/{group}"
    good = agent_document("bot", system="Served through the outage.")
    after = agent_document("bot", system="Published once Nacos was back.")
    await nacos.publish("bot.agent.yaml", group, yaml_text(good))
    config = nacos_service_config(nacos_settings, agents_dir, state_dir)

    async with running_service(config) as service:
        await service.wait_serving("bot", revision_of(good))
        stopped_at = time.time()
        await restartable_nacos.astop()
        await service.registry.wait_for(lambda r: source_name in r.degraded, within=10)
        # Each agent says it is cut off from Nacos, and since when.
        source = (await status_of(service, "bot", keep_since=True))["source"]
        assert source["since"] >= stopped_at
        assert without_since(source) == nacos_source(
            group, "bot.agent.yaml", yaml_text(good), state="disconnected"
        )

        code, body = await invoke(service, "bot", "still there?")
        assert (code, body["revision"], body["output"]) == (
            200,
            revision_of(good),
            "[test model] you said: still there? | prompt: Served through the outage.",
        )
        code, ready = await readyz(service)
        reason = ready["degraded"].pop(source_name)
        assert (code, ready) == (200, {"status": "degraded", "agents": 1, "degraded": {}})
        assert reason.startswith("Nacos unreachable, serving last known definitions: ")

    # A new instance on the same snapshot dir, while Nacos is still down.
    async with running_service(config) as service:
        assert service.serving("bot") == revision_of(good)
        code, ready = await readyz(service)
        assert (code, ready) == (
            200,
            {
                "status": "degraded",
                "agents": 1,
                "degraded": {
                    source_name: "Nacos unreachable at start, serving snapshot: cannot reach "
                    f"Nacos at {nacos_settings.server_addr}: no answer within 5 s"
                },
            },
        )
        snapshot_dir = nacos_settings.snapshot_dir / "public" / group
        assert (
            f"Nacos source public/{group} unavailable at start (cannot reach Nacos at "
            f"{nacos_settings.server_addr}: no answer within 5 s); serving 1 definitions from "
            f"the snapshot in {snapshot_dir}"
        ) in log_lines
        status = await status_of(service, "bot")
        assert status["source"] == {
            **nacos_source(group, "bot.agent.yaml", yaml_text(good), state="snapshot"),
            "from": "snapshot",
        }
        code, body = await invoke(service, "bot")
        assert (code, body["revision"]) == (200, revision_of(good))

        # Nacos comes back: the source recovers on its own and applies the next change.
        await restartable_nacos.astart()
        await service.registry.wait_for(lambda r: not r.degraded, within=15)
        # The same content, now confirmed by Nacos: the status no longer says snapshot.
        status = await status_of(service, "bot")
        assert status["source"] == nacos_source(group, "bot.agent.yaml", yaml_text(good))
        published = time.perf_counter()
        await nacos.publish("bot.agent.yaml", group, yaml_text(after))
        await service.registry.wait_for(
            lambda _: service.serving("bot") == revision_of(after), within=10
        )
        took = time.perf_counter() - published
        print(f"\nfirst change after Nacos came back served in {took:.2f} s")
        assert await status_of(service, "bot") == {
            "name": "bot",
            "state": "serving",
            "revision": revision_of(after),
            "description": "",
            "source": nacos_source(group, "bot.agent.yaml", yaml_text(after)),
            "factory": "nacos",
            "last_error": None,
        }
        code, ready = await readyz(service)
        assert (code, ready) == (200, {"status": "ready", "agents": 1, "degraded": {}})


async def test_with_nacos_down_the_sources_wait_for_it_side_by_side(
    nacos_settings: NacosConfig, agents_dir: Path, state_dir: Path
) -> None:
    # Nothing listens on the port: three Nacos factories (full agents, prompt-only, Spring AI
    # Alibaba) each wait CONNECT_TIMEOUT (5 s) for it. One after another that kept the port
    # closed 15 s; the Spring AI Alibaba one alone used to wait twice. The floor: the same
    # service with the full-agent factory alone, started in the same test.
    with claimed_port({}, start=DOWN_PORT) as port:
        down = nacos_settings.model_copy(update={"server_addr": f"127.0.0.1:{port}"})
        started = time.monotonic()
        async with running_service(nacos_service_config(down, agents_dir, state_dir)) as alone:
            one = time.monotonic() - started
            assert set(alone.registry.degraded) == {f"nacos:public/{down.group}"}
        config = nacos_service_config(
            down,
            agents_dir,
            state_dir,
            factories={"nacos_prompt": {"directory": str(agents_dir)}, "spring_ai_alibaba": True},
        )
        started = time.monotonic()
        async with running_service(config) as service:
            took = time.monotonic() - started
            assert set(service.registry.degraded) == {
                f"nacos:public/{down.prompt_group}",
                f"nacos:public/{down.group}",
                "nacos:public/nacos-ai-meta",
            }
    print(f"\nwith Nacos down, one Nacos factory started in {one:.2f} s, three in {took:.2f} s")
    assert one >= CONNECT_TIMEOUT, one
    assert took < 1.5 * one, (took, one)  # side by side: not 2 or 3 connect timeouts
