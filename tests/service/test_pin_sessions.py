"""``rollout.pin_sessions``: a conversation never changes version mid-way, though the weight
moves; new sessions follow the new weight. Without pinning the same session would move."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dynagent.registry.canary import bucket
from tests.support import DEFAULT_MODEL, Reply, ScriptedModelServer
from tests.support.canary import canary_document, canary_filename
from tests.support.service import (
    RunningService,
    agent_document,
    running_service,
    service_config,
    write_agent,
)

CANARY_MODEL = "gpt-canary"


def session_in(low: float, high: float, start: int = 0) -> str:
    """A session id whose bucket lies in [low, high): stable at weight low, canary at high."""
    return next(
        f"s{i}" for i in range(start, start + 100_000) if low <= bucket("bot", f"s{i}") < high
    )


async def turn(service: RunningService, session: str) -> str:
    response = await service.client.post(
        "/v1/agents/bot/invoke", json={"input": "hi", "session_id": session}
    )
    body: dict[str, Any] = await response.json()
    assert response.status == 200, body
    return str(body["variant"])


@pytest.mark.parametrize("store", ["sqlite", "memory"])
@pytest.mark.parametrize("pin", [True, False])
async def test_a_session_keeps_its_variant_when_the_weight_moves(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path, pin: bool, store: str
) -> None:
    stable = agent_document("bot", model_server, system="Stable.")
    candidate = agent_document("bot", model_server, system="Canary.", model={"name": CANARY_MODEL})
    write_agent(agents_dir, stable)
    write_agent(
        agents_dir,
        canary_document(candidate, weight=10, pin_sessions=pin),
        filename=canary_filename("bot"),
    )
    model_server.script(DEFAULT_MODEL, [Reply("s")], cycle=True)
    model_server.script(CANARY_MODEL, [Reply("c")], cycle=True)
    old, new = session_in(10, 60), session_in(10, 60, start=50_000)
    config = service_config(agents_dir, state_dir, sessions={"store": store})
    async with running_service(config) as service:
        assert await turn(service, old) == "stable"
        write_agent(
            agents_dir,
            canary_document(candidate, weight=60, pin_sessions=pin),
            filename=canary_filename("bot"),
        )
        await service.registry.wait_for(lambda r: r.entry("bot").canary.policy.weight == 60)  # type: ignore[union-attr]
        answers = [await turn(service, old), await turn(service, new)]
    assert answers == (["stable", "canary"] if pin else ["canary", "canary"])
