"""A gated canary's record is of its revision, and the revision mixes in the tool lists of
the MCP servers under it: a server that changes its tool list (``list_changed``) rebuilds
the canary as another revision, and the gate runs again before it serves."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dynagent.http.state import SERVICE
from dynagent.registry.facade import AgentRegistry
from tests.mcp.conftest import McpProcess
from tests.support.canary import canary_document, canary_filename, canary_revision
from tests.support.service import RunningService, agent_document, running_service, service_config

SUITE = {
    "cases": [
        {"id": "greets", "input": "hello", "assert": [{"type": "icontains", "value": "hello"}]}
    ]
}


def with_orders(name: str, url: str, system: str, **entry: Any) -> dict[str, Any]:
    # The server listens on loopback: reached only because the entry allows it.
    tool = {"type": "mcp", "name": "orders", "url": url, "allow_private": True, **entry}
    return agent_document(name, system=system, tools=[tool])


@pytest.fixture
async def service(agents_dir: Path, state_dir: Path) -> AsyncIterator[RunningService]:
    config = service_config(agents_dir, state_dir, sessions={"store": "memory"})
    async with running_service(config) as running:
        yield running


def passed_gate(registry: AgentRegistry) -> str | None:
    """The canary revision whose gate passed, if it did."""
    canary = registry.status("bot")["canary"] if "bot" in registry else None
    gate = canary.get("gate") if canary else None
    return gate["revision"] if gate and gate["state"] == "passed" else None


async def test_a_changed_tool_list_under_a_gated_canary_runs_its_gate_again(
    service: RunningService, agents_dir: Path, http_server: McpProcess
) -> None:
    stable = with_orders("bot", http_server.url, "Stable.", allow=["grow"])
    # Every tool the server lists; in an evaluation none runs (none is shadow_safe).
    canary = canary_document(with_orders("bot", http_server.url, "Candidate."), weight=100, gate={})
    (agents_dir / "bot.evals.yaml").write_text(yaml.safe_dump(SUITE), encoding="utf-8")
    service.write_agent(stable)
    service.write_agent(canary, filename=canary_filename("bot"))
    await service.registry.wait_for(lambda r: passed_gate(r) is not None, within=30)
    first = passed_gate(service.registry)
    assert "orders_late" not in service.registry.entry("bot").canary.agent.tools  # type: ignore[union-attr]

    # A live run of the stable (the offline model calls every tool once): the server adds
    # ``late`` and tells the pooled session, which both versions share.
    response = await service.client.post(
        "/v1/agents/bot/invoke", json={"input": "grow"}, headers={"X-Agent-Variant": "stable"}
    )
    assert response.status == 200, await response.text()

    def judged_again(registry: AgentRegistry) -> bool:
        revision = passed_gate(registry)
        return revision is not None and revision != first

    await service.registry.wait_for(judged_again, within=30)
    entry = service.registry.entry("bot")
    assert entry.canary is not None and "orders_late" in entry.canary.agent.tools
    assert entry.canary.agent.spec.revision == canary_revision(canary)
    runs = [(run.revision, run.state) for run in service.app[SERVICE].gate.runs]
    assert runs == [(first, "passed"), (entry.canary.agent.revision, "passed")]
    [pooled] = service.app[SERVICE].mcp.status()
    assert pooled["calls"] == 1  # the stable's ``grow``: the two gate runs called no tool
