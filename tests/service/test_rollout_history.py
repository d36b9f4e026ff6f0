"""The audit trail of a rollout: every decision written into the canary's document with
who made it, when, and from what to what, and listed at
``GET /v1/agents/{name}/rollout/history`` — the last ended rollout's too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from dynagent.registry.facade import AgentRegistry
from tests.support.canary import canary_document, canary_filename, canary_revision
from tests.support.service import agent_document, running_service, service_config, write_agent


def _weight(registry: AgentRegistry) -> float | None:
    canary = registry.entry("bot").canary if "bot" in registry else None
    return canary.policy.weight if canary is not None else None


async def test_each_decision_is_recorded_with_who_when_and_what_and_outlives_the_canary(
    agents_dir: Path, state_dir: Path
) -> None:
    candidate = agent_document("bot", system="Canary.")
    rollout: dict[str, Any] = {
        "steps": [10, 50],
        "step_after": {"seconds": 0.05},
        "approval": {"before_weight": 50},
    }
    write_agent(agents_dir, agent_document("bot", system="Stable."))
    path = write_agent(
        agents_dir, canary_document(candidate, 10, **rollout), filename=canary_filename("bot")
    )
    async with running_service(service_config(agents_dir, state_dir)) as service:
        client, registry = service.client, service.registry
        await registry.wait_for(lambda r: _weight(r) == 10)
        for path_, body in (
            ("/v1/agents/bot/rollout/pause", {"reason": "answers look off"}),
            ("/v1/agents/bot/rollout/resume", None),
            ("/v1/agents/bot/rollout/approve", None),
        ):
            answer = await client.post(path_, json=body)
            assert answer.status == 200, await answer.text()
        await registry.wait_for(lambda r: _weight(r) == 50)
        history = await (await client.get("/v1/agents/bot/rollout/history")).json()
        written = yaml.safe_load(path.read_text())["rollout"]["history"]
        promoted = await client.post("/v1/agents/bot/promote")
        assert promoted.status == 200, await promoted.text()
        after = await (await client.get("/v1/agents/bot/rollout/history")).json()
        unknown = await client.get("/v1/agents/nobody/rollout/history")

    trail = history["canary"]["entries"]
    assert history["canary"]["revision"] == canary_revision(candidate)
    assert [(e["action"], e["by"]) for e in trail] == [
        ("pause", "operator"),
        ("resume", "operator"),
        ("approve", "operator"),
        ("step", "rollout"),
    ]
    assert trail[0]["reason"] == "answers look off"
    assert (trail[3]["from"], trail[3]["to"]) == (10, 50)
    assert all(e["at"].endswith("+00:00") for e in trail)
    assert written == trail  # in the document: what every replica reads
    assert after["canary"] is None
    assert after["ended"]["outcome"] == "promoted"
    assert after["ended"]["entries"] == trail
    assert unknown.status == 404
