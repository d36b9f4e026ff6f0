"""Progressive rollouts: ``rollout.steps`` advance by healthy requests and/or time while the
guard is satisfied, each step written back into the canary's file; ``auto_promote`` makes the
canary the stable definition after the last step. Status and metrics show the step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from dynagent.exceptions import ConfigError
from dynagent.http.state import SERVICE
from dynagent.registry.canary import load_canary, picks_canary
from dynagent.registry.facade import AgentRegistry
from tests.support import Reply, ScriptedModelServer
from tests.support.canary import canary_document, canary_filename, canary_revision
from tests.support.service import (
    RunningService,
    agent_document,
    running_service,
    service_config,
    write_agent,
)

CANARY_MODEL = "gpt-canary"


def weight(registry: AgentRegistry) -> float | None:
    canary = registry.entry("bot").canary if "bot" in registry else None
    return None if canary is None else canary.policy.weight


CANARY_KEYS = [k for k in (f"caller-{i}" for i in range(2000)) if picks_canary("bot", k, 10)]
"""Keys the router sends to the canary from its first step (10 %) on: only traffic the
router chose counts for a step, as for the guard."""


async def canary_calls(service: RunningService, count: int) -> None:
    for key in CANARY_KEYS[:count]:
        response = await service.client.post(
            "/v1/agents/bot/invoke", json={"input": "hi"}, headers={"X-Canary-Key": key}
        )
        assert response.status == 200, await response.text()
        assert (await response.json())["variant"] == "canary"


async def metric(service: RunningService, name: str) -> float | None:
    text = await (await service.client.get("/metrics")).text()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == {"agent": "bot"}:
                return sample.value
    return None


async def test_steps_advance_on_healthy_requests_and_the_last_promotes(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    stable = agent_document("bot", model_server, system="Stable.")
    candidate = agent_document("bot", model_server, system="Canary.", model={"name": CANARY_MODEL})
    rollout: dict[str, Any] = {
        "steps": [10, 50, 100],
        "step_after": {"requests": 3},
        "auto_promote": True,
    }
    write_agent(agents_dir, stable)
    canary_path = write_agent(
        agents_dir, {**candidate, "rollout": rollout}, filename=canary_filename("bot")
    )
    model_server.script(CANARY_MODEL, [Reply("canary")], cycle=True)
    async with running_service(service_config(agents_dir, state_dir)) as service:
        registry = service.registry
        steps = registry.status("bot")["canary"]["steps"]
        assert isinstance(steps.pop("since"), float)
        assert steps == {
            "weights": [10.0, 50.0, 100.0],
            "step": 0,
            "healthy_requests": 0,
            "after": {"seconds": None, "requests": 3},
            "auto_promote": True,
            "awaiting_approval": False,
            "approved": None,
        }
        assert (weight(registry), await metric(service, "dynagent_canary_step")) == (10, 0)

        await canary_calls(service, 2)
        assert registry.status("bot")["canary"]["steps"]["healthy_requests"] == 2
        await canary_calls(service, 1)
        await registry.wait_for(lambda r: weight(r) == 50)
        written = yaml.safe_load(canary_path.read_text())["rollout"]
        assert isinstance(written.pop("step_at"), str)
        (step,) = written.pop("history")
        assert (step["action"], step["by"], step["from"], step["to"]) == ("step", "rollout", 10, 50)
        assert written == {**rollout, "weight": 50}
        assert registry.status("bot")["canary"]["steps"]["healthy_requests"] == 0
        assert await metric(service, "dynagent_canary_step") == 1
        assert await metric(service, "dynagent_canary_weight") == 50

        await canary_calls(service, 3)
        await registry.wait_for(lambda r: weight(r) == 100)
        await canary_calls(service, 3)
        await registry.wait_for(lambda r: r.entry("bot").canary is None)
        promoted = registry.entry("bot").stable
        assert promoted is not None and promoted.spec.revision == canary_revision(candidate)
        assert sorted(p.name for p in agents_dir.iterdir()) == ["bot.yaml"]
        answer = await service.client.post("/v1/agents/bot/invoke", json={"input": "hi"})
        body = await answer.json()  # the stable now is the candidate, on its model
        assert (body["variant"], body["output"]) == ("stable", "canary")


async def test_an_approval_holds_the_step_until_a_person_gives_it(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    stable = agent_document("bot", model_server, system="Stable.")
    candidate = agent_document("bot", model_server, system="Canary.", model={"name": CANARY_MODEL})
    rollout: dict[str, Any] = {
        "steps": [10, 50],
        "step_after": {"requests": 1},
        "approval": {"before_weight": 50},
    }
    write_agent(agents_dir, stable)
    path = write_agent(
        agents_dir, {**candidate, "rollout": rollout}, filename=canary_filename("bot")
    )
    model_server.script(CANARY_MODEL, [Reply("canary")], cycle=True)
    async with running_service(service_config(agents_dir, state_dir)) as service:
        registry = service.registry
        await canary_calls(service, 3)
        steps = registry.status("bot")["canary"]["steps"]
        assert (steps["healthy_requests"], steps["awaiting_approval"]) == (3, True)
        # The step is due; the decisions' next ticks must still leave it where it is.
        await service.app[SERVICE].decisions.wait_ticks(3)
        assert weight(registry) == 10
        assert "approved" not in yaml.safe_load(path.read_text())["rollout"]

        answer = await service.client.post("/v1/agents/bot/rollout/approve")
        assert answer.status == 200, await answer.text()
        approved = (await answer.json())["canary"]["steps"]["approved"]
        assert approved["by"] == "operator"
        assert approved["revision"] == canary_revision(candidate)
        await registry.wait_for(lambda r: weight(r) == 50)
        written = yaml.safe_load(path.read_text())["rollout"]
        assert written["approved"]["by"] == "operator"

        again = await service.client.post("/v1/agents/bot/rollout/approve")
        assert again.status == 409


async def test_a_step_after_a_duration_needs_no_traffic(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    stable = agent_document("bot", model_server, system="Stable.")
    candidate = agent_document("bot", model_server, system="Canary.")
    rollout = {"steps": [5, 25], "step_after": {"seconds": 0.3}}
    write_agent(agents_dir, stable)
    path = write_agent(
        agents_dir, canary_document(candidate, weight=5, **rollout), filename=canary_filename("bot")
    )
    async with running_service(service_config(agents_dir, state_dir)) as service:
        await service.registry.wait_for(lambda r: weight(r) == 25, within=5)
        # the last step without auto_promote: the canary stays at 25 % for a person to decide
        assert yaml.safe_load(path.read_text())["rollout"]["weight"] == 25
        assert service.registry.entry("bot").canary is not None


@pytest.mark.parametrize(
    ("rollout", "message"),
    [
        ({"steps": [5, 25]}, "steps need step_after"),
        ({"steps": [25, 5], "step_after": {"seconds": 1}}, "increasing weights"),
        ({"steps": [5, 25], "weight": 10, "step_after": {"requests": 1}}, "not one of the steps"),
        ({"steps": [5], "step_after": {}}, "give seconds, requests or both"),
        ({"weight": 5, "auto_promote": True}, "need steps"),
    ],
)
def test_bad_steps_are_refused_with_the_reason(rollout: dict[str, Any], message: str) -> None:
    document = {"name": "bot", "model": {"provider": "test"}, "prompt": {"system": "hi"}}
    with pytest.raises(ConfigError) as caught:
        load_canary({**document, "rollout": rollout}, source="bot.canary.yaml")
    assert message in str(caught.value.issues)
