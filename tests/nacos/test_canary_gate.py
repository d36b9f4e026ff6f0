"""Gated canaries on a fleet: two replicas on one real Nacos group. The canary takes no live
traffic on either until its suite passed; exactly one replica runs the suite (its claim is
a compare-and-set on the canary's dataId) and both serve the result it wrote back; a
failing suite pauses the canary on both with its reason; promote refuses the unproven
revision and ``dynagent promote --force`` promotes it, recorded with who forced it; an
edited suite runs the gate again."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import yaml

from dynagent import cli
from dynagent.config import NacosConfig
from dynagent.evals import load_suite
from dynagent.http.state import SERVICE
from dynagent.registry.facade import AgentRegistry
from tests.support.canary import canary_document, canary_revision
from tests.support.nacos import NacosAdmin, nacos_service_config, yaml_text
from tests.support.service import RunningService, agent_document, revision_of, running_service

STABLE = agent_document("bot", system="Stable.")
GATED = canary_document(agent_document("bot", system="Candidate."), weight=100, gate={})
GREETS = {"id": "greets", "input": "hello", "assert": [{"type": "icontains", "value": "hello"}]}
REFUNDS = {
    "id": "refunds",
    "input": "refund me",
    "assert": [{"type": "contains", "value": "refund approved"}],
}
PASSING = {"cases": [GREETS]}
FAILING = {"cases": [GREETS, REFUNDS]}
REASON = "1 of 2 cases failed: refunds; pass rate 50.0% below 100.0%"


@asynccontextmanager
async def replicas(settings: NacosConfig, tmp_path: Path) -> AsyncIterator[list[RunningService]]:
    async with AsyncExitStack() as stack:
        started = []
        for index in range(2):
            own = settings.model_copy(update={"snapshot_dir": tmp_path / f"snapshot-{index}"})
            folder = tmp_path / f"agents-{index}"
            folder.mkdir()
            config = nacos_service_config(
                own, folder, tmp_path / f"state-{index}", sessions={"store": "memory"}
            )
            started.append(await stack.enter_async_context(running_service(config, environ={})))
        yield started


def gate_is(state: str, **fields: Any) -> Any:
    def reached(registry: AgentRegistry) -> bool:
        canary = registry.status("bot")["canary"] if "bot" in registry else None
        gate = canary.get("gate") if canary else None
        return gate is not None and gate["state"] == state and fields.items() <= gate.items()

    return reached


def gate_of(service: RunningService) -> dict[str, Any]:
    gate: dict[str, Any] = service.registry.status("bot")["canary"]["gate"]
    return gate


async def variants(services: list[RunningService]) -> list[str]:
    served = []
    for service in services:
        response = await service.client.post(
            "/v1/agents/bot/invoke", json={"input": "hi"}, headers={"X-Canary-Key": "c"}
        )
        assert response.status == 200, await response.text()
        served.append(response.headers["X-Agent-Variant"])
    return served


def gate_runs(services: list[RunningService]) -> list[str]:
    return [run.id for service in services for run in service.app[SERVICE].gate.runs]


async def stored_rollout(nacos: NacosAdmin, group: str) -> Any:
    config = await nacos.get("bot.canary.yaml", group)
    assert config is not None
    return yaml.safe_load(config["content"])["rollout"]


async def promote_command(url: str, *flags: str) -> tuple[int, Any]:
    """``dynagent promote bot --json *flags`` against ``url`` (off the loop: it blocks)."""
    out = io.StringIO()

    def run() -> int:
        with contextlib.redirect_stdout(out):
            return cli.main(["promote", "bot", "--json", "--url", url, *flags])

    code = await asyncio.to_thread(run)
    return code, json.loads(out.getvalue())


async def test_a_gated_canary_on_two_replicas_is_judged_once_and_held_by_both(
    nacos: NacosAdmin, nacos_settings: NacosConfig, tmp_path: Path
) -> None:
    group = nacos_settings.group
    await nacos.publish("bot.agent.yaml", group, yaml_text(STABLE))
    await nacos.publish("bot.canary.yaml", group, yaml_text(GATED))
    async with replicas(nacos_settings, tmp_path) as fleet:
        for service in fleet:
            await service.wait_serving("bot", revision_of(STABLE))
            await service.registry.wait_for(gate_is("pending"), within=30)
        assert await variants(fleet) == ["stable", "stable"]  # 100 %, but no passing record

        published = time.time()
        await nacos.publish("bot.evals.yaml", group, yaml_text(PASSING))
        for service in fleet:
            await service.registry.wait_for(gate_is("passed"), within=30)
        opened = time.time() - published
        assert len(gate_runs(fleet)) == 1  # one replica ran it, for both
        [run] = [run for service in fleet for run in service.app[SERVICE].gate.runs]
        assert run.finished_at is not None
        suite_seconds = run.finished_at - run.started_at
        print(
            f"\nsuite published -> gate open on both replicas in {opened * 1000:.0f} ms, "
            f"of which the suite ran {suite_seconds * 1000:.0f} ms"
        )
        assert {gate_of(service)["run_id"] for service in fleet} == set(gate_runs(fleet))
        record = (await stored_rollout(nacos, group))["gate_record"]
        assert (record["state"], record["revision"], record["suite_revision"]) == (
            "passed",
            canary_revision(GATED),
            load_suite(PASSING).revision,
        )
        assert await variants(fleet) == ["canary", "canary"]

        await nacos.publish("bot.evals.yaml", group, yaml_text(FAILING))  # the gate runs again
        for service in fleet:
            await service.registry.wait_for(gate_is("failed"), within=30)
        assert len(gate_runs(fleet)) == 2
        for service in fleet:
            canary = service.registry.status("bot")["canary"]
            assert (canary["state"], canary["pulled"]["by"], canary["pulled"]["reason"]) == (
                "pulled",
                "gate",
                f"eval: {REASON}",
            )
        paused = (await stored_rollout(nacos, group))["paused"]
        assert (paused["by"], paused["reason"]) == ("gate", f"eval: {REASON}")
        assert await variants(fleet) == ["stable", "stable"]

        code, refused = await promote_command(fleet[1].url)
        assert (code, refused["error"]["type"]) == (1, "conflict")
        assert "has no passing evaluation record (gate failed" in refused["error"]["message"]
        code, promoted = await promote_command(fleet[1].url, "--force")
        assert code == 0, promoted
        assert (promoted["revision"], promoted["canary"]) == (canary_revision(GATED), None)
        assert (promoted["forced"]["state"], promoted["forced"]["by"]) == ("forced", "operator")
        for service in fleet:
            await service.wait_serving("bot", canary_revision(GATED))
        assert await nacos.get("bot.canary.yaml", group) is None
