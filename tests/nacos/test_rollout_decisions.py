"""Rollout decisions live in Nacos: a guard's pull on one replica is written into the canary's
dataId (compare-and-set on its md5) and every replica stops routing to the canary; replicas
that pull at once write it once; a replica started later does not resume it; a resume is an
edit that puts it back everywhere. Replicas are separate apps on one real Nacos server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import yaml

from dynagent.config import NacosConfig
from dynagent.http.state import SERVICE
from dynagent.registry.canary import picks_canary
from dynagent.registry.entry import Canary
from dynagent.registry.facade import AgentRegistry
from tests.support import DEFAULT_MODEL, Fail, Reply, ScriptedModelServer
from tests.support.canary import canary_document, canary_revision
from tests.support.nacos import NacosAdmin, nacos_service_config, yaml_text
from tests.support.service import RunningService, agent_document, revision_of, running_service

CANARY_MODEL = "gpt-canary"
GUARD = {"min_requests": 5}
REASON = "error rate 100% over the last 5 requests exceeds 20%"


def documents(server: ScriptedModelServer) -> tuple[dict[str, Any], dict[str, Any]]:
    stable = agent_document("bot", server, system="Stable.", model={"retries": 0})
    canary = agent_document(
        "bot", server, system="Canary.", model={"name": CANARY_MODEL, "retries": 0}
    )
    return stable, canary_document(canary, weight=50, guard=GUARD)


def canary_of(registry: AgentRegistry) -> Canary:
    canary = registry.entry("bot").canary
    assert canary is not None
    return canary


def recorded(registry: AgentRegistry) -> bool:
    pulled = canary_of(registry).pulled
    return pulled is not None and pulled.recorded


@asynccontextmanager
async def fleet(
    settings: NacosConfig, tmp_path: Path, count: int
) -> AsyncIterator[tuple[list[RunningService], AsyncExitStack, Callable[[], Any]]]:
    """``count`` replicas on one Nacos group, and a way to start one more."""
    async with AsyncExitStack() as stack:
        started: list[RunningService] = []

        async def start() -> RunningService:
            index = len(started)
            own = settings.model_copy(update={"snapshot_dir": tmp_path / f"snapshot-{index}"})
            folder = tmp_path / f"agents-{index}"
            folder.mkdir()
            config = nacos_service_config(
                own, folder, tmp_path / f"state-{index}", sessions={"store": "memory"}
            )
            service = await stack.enter_async_context(running_service(config, environ={}))
            started.append(service)
            return service

        for _ in range(count):
            await start()
        yield started, stack, start


CANARY_KEYS = [k for k in (f"caller-{i}" for i in range(1000)) if picks_canary("bot", k, 50)]
"""Callers the router sends to the canary: only traffic it chose is the guard's evidence."""


async def fail_canary(service: RunningService, count: int) -> list[int]:
    """``count`` requests of callers the router sends to the serving canary."""
    statuses = []
    for key in CANARY_KEYS[:count]:
        response = await service.client.post(
            "/v1/agents/bot/invoke", json={"input": "hi"}, headers={"X-Canary-Key": key}
        )
        assert response.headers["X-Agent-Variant"] == "canary"
        statuses.append(response.status)
    return statuses


def without_history(rollout: dict[str, Any]) -> dict[str, Any]:
    """The rollout block less its trail of decisions (``rollout.history``)."""
    return {key: value for key, value in rollout.items() if key != "history"}


async def stored_rollout(nacos: NacosAdmin, group: str) -> Any:
    config = await nacos.get("bot.canary.yaml", group)
    assert config is not None
    return yaml.safe_load(config["content"])["rollout"]


async def test_a_pull_on_one_replica_pauses_the_canary_on_all_and_survives_a_restart(
    nacos: NacosAdmin,
    nacos_settings: NacosConfig,
    model_server: ScriptedModelServer,
    tmp_path: Path,
) -> None:
    group = nacos_settings.group
    stable, canary = documents(model_server)
    await nacos.publish("bot.agent.yaml", group, yaml_text(stable))
    await nacos.publish("bot.canary.yaml", group, yaml_text(canary))
    model_server.script(DEFAULT_MODEL, [Reply("stable")], cycle=True)
    model_server.script(CANARY_MODEL, [Fail(500)] * 5 + [Reply("canary again")])
    async with fleet(nacos_settings, tmp_path, 3) as (replicas, _, start):
        for service in replicas:
            await service.wait_serving("bot", revision_of(stable))
            await service.registry.wait_for(lambda r: r.entry("bot").canary is not None)

        assert await fail_canary(replicas[0], 5) == [502] * 5
        pulled_at = time.monotonic()
        for service in replicas:  # the two that saw no error follow the config center
            await service.registry.wait_for(recorded)
        spread = time.monotonic() - pulled_at
        print(f"\npull on one replica -> paused on all three in {spread * 1000:.0f} ms")
        rollout = await stored_rollout(nacos, group)
        assert set(rollout) == {"weight", "guard", "paused", "history"}
        assert [(e["action"], e["by"]) for e in rollout["history"]] == [("pause", "guard")]
        assert (rollout["paused"]["reason"], rollout["paused"]["by"]) == (REASON, "guard")
        assert sum(s.app[SERVICE].decisions.writes for s in replicas) == 1
        for service in replicas:  # unpinned callers all get the stable everywhere
            response = await service.client.post(
                "/v1/agents/bot/invoke", json={"input": "hi"}, headers={"X-Canary-Key": "c"}
            )
            assert response.headers["X-Agent-Variant"] == "stable"

        late = await start()  # a replica started now reads the pause: it does not resume
        await late.registry.wait_for(lambda r: "bot" in r and r.entry("bot").canary is not None)
        assert recorded(late.registry)
        assert late.registry.status("bot")["canary"]["state"] == "pulled"

        # Resume (what `dynagent rollout resume bot` posts): the block goes, all serve it again.
        response = await late.client.post("/v1/agents/bot/rollout/resume")
        assert response.status == 200, await response.text()
        assert (await response.json())["canary"]["state"] == "serving"
        for service in [*replicas, late]:
            await service.registry.wait_for(lambda r: canary_of(r).serving)
        assert without_history(await stored_rollout(nacos, group)) == canary["rollout"]
        assert canary_of(replicas[1].registry).agent.revision == canary_revision(canary)
        assert await fail_canary(replicas[1], 1) == [200]


async def test_replicas_pulling_at_once_write_the_pause_once(
    nacos: NacosAdmin,
    nacos_settings: NacosConfig,
    model_server: ScriptedModelServer,
    tmp_path: Path,
) -> None:
    group = nacos_settings.group
    stable, canary = documents(model_server)
    await nacos.publish("bot.agent.yaml", group, yaml_text(stable))
    await nacos.publish("bot.canary.yaml", group, yaml_text(canary))
    model_server.script(DEFAULT_MODEL, [Reply("stable")], cycle=True)
    model_server.script(CANARY_MODEL, [Fail(500)], cycle=True)
    async with fleet(nacos_settings, tmp_path, 3) as (replicas, _, _start):
        for service in replicas:
            await service.registry.wait_for(
                lambda r: "bot" in r and r.entry("bot").canary is not None
            )
        await asyncio.gather(*(fail_canary(service, 5) for service in replicas))
        for service in replicas:
            await service.registry.wait_for(recorded)
        writes = [s.app[SERVICE].decisions.writes for s in replicas]
        own_pulls = [canary_of(s.registry).pulled for s in replicas]
    assert sum(writes) == 1, writes
    assert all(p is not None and p.recorded and p.by == "guard" for p in own_pulls)
    assert (await stored_rollout(nacos, group))["paused"]["reason"] == REASON


async def test_a_pause_by_hand_on_one_replica_is_written_to_nacos_and_held_by_all(
    nacos: NacosAdmin,
    nacos_settings: NacosConfig,
    model_server: ScriptedModelServer,
    tmp_path: Path,
) -> None:
    """``POST …/rollout/pause`` (``dynagent rollout pause bot``) is the guard's write-back
    by hand: one compare-and-set on the dataId, then every replica, and a late one, route
    everyone to the stable until the resume."""
    group = nacos_settings.group
    stable, canary = documents(model_server)
    canary["rollout"]["weight"] = 100  # while it serves, every unpinned caller gets it
    await nacos.publish("bot.agent.yaml", group, yaml_text(stable))
    await nacos.publish("bot.canary.yaml", group, yaml_text(canary))
    model_server.script(DEFAULT_MODEL, [Reply("stable")], cycle=True)
    model_server.script(CANARY_MODEL, [Reply("canary before"), Reply("canary after")])

    async def variants(services: list[RunningService]) -> list[str]:
        served = []
        for service in services:
            response = await service.client.post(
                "/v1/agents/bot/invoke", json={"input": "hi"}, headers={"X-Canary-Key": "c"}
            )
            served.append(response.headers["X-Agent-Variant"])
        return served

    async with fleet(nacos_settings, tmp_path, 2) as (replicas, _, start):
        for service in replicas:
            await service.registry.wait_for(
                lambda r: "bot" in r and r.entry("bot").canary is not None
            )
        assert await variants(replicas[:1]) == ["canary"]

        response = await replicas[0].client.post(
            "/v1/agents/bot/rollout/pause", json={"reason": "hold for the launch"}
        )
        body = await response.json()
        assert response.status == 200, body
        assert (body["canary"]["state"], body["canary"]["pulled"]["by"]) == ("pulled", "operator")
        for service in replicas:
            await service.registry.wait_for(recorded)
        paused = (await stored_rollout(nacos, group))["paused"]
        assert (paused["reason"], paused["by"], paused["revision"]) == (
            "hold for the launch",
            "operator",
            canary_revision(canary),
        )
        assert sum(s.app[SERVICE].decisions.writes for s in replicas) == 1
        late = await start()  # joins ``replicas``
        await late.registry.wait_for(lambda r: "bot" in r and r.entry("bot").canary is not None)
        assert recorded(late.registry)
        assert await variants(replicas) == ["stable"] * 3

        response = await replicas[1].client.post("/v1/agents/bot/rollout/resume")
        assert response.status == 200, await response.text()
        for service in replicas:
            await service.registry.wait_for(lambda r: canary_of(r).serving)
        assert without_history(await stored_rollout(nacos, group)) == canary["rollout"]
        assert await variants([late]) == ["canary"]
