"""Evaluation suites as ``{name}.evals.yaml`` dataIds in the agents' Nacos group: shown in
the agent's status, refused on their own, never changing what the agent serves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dynagent.config import NacosConfig
from dynagent.evals import load_suite
from dynagent.registry.facade import AgentRegistry
from tests.support.nacos import NacosAdmin, invoke, nacos_service_config, yaml_text
from tests.support.service import agent_document, revision_of, running_service

SUITE = {
    "cases": [
        {"id": "greets", "input": "hello", "assert": [{"type": "icontains", "value": "hello"}]}
    ]
}
BROKEN = (
    "cases:\n  - id: greets\n    input: hello\n    assert:\n      - {type: contains, valu: x}\n"
)


def evals_of(registry: AgentRegistry) -> dict[str, Any] | None:
    return registry.status("bot").get("evals") if "bot" in registry else None


async def test_a_suite_published_in_the_group_is_shown_and_a_broken_one_leaves_the_agent_alone(
    nacos: NacosAdmin, nacos_settings: NacosConfig, agents_dir: Path, state_dir: Path
) -> None:
    group = nacos_settings.group
    agent = agent_document("bot")
    await nacos.publish("bot.agent.yaml", group, yaml_text(agent))
    await nacos.publish("bot.evals.yaml", group, yaml_text(SUITE))
    config = nacos_service_config(nacos_settings, agents_dir, state_dir)
    async with running_service(config) as service:
        registry = service.registry
        await service.wait_serving("bot", revision_of(agent))
        await registry.wait_for(lambda r: evals_of(r) is not None, within=30)
        shown = evals_of(registry)
        assert shown is not None
        assert (shown["state"], shown["revision"], shown["cases"]) == (
            "valid",
            load_suite(SUITE).revision,
            1,
        )

        await nacos.publish("bot.evals.yaml", group, BROKEN)
        await registry.wait_for(lambda r: (evals_of(r) or {}).get("state") == "refused", 30)
        refused = evals_of(registry)
        assert refused is not None
        assert (refused["revision"], refused["last_error"]["path"]) == (
            load_suite(SUITE).revision,
            "cases[#1].assert[#1].value",
        )
        assert "unknown field 'valu'" in refused["last_error"]["message"]
        status = registry.status("bot")
        assert (status["revision"], status["last_error"]) == (revision_of(agent), None)
        code, body = await invoke(service, "bot", "hello")
        assert (code, body["revision"]) == (200, revision_of(agent))

        await nacos.delete("bot.evals.yaml", group)
        await registry.wait_for(lambda r: evals_of(r) is None, within=30)
        assert registry.status("bot")["revision"] == revision_of(agent)
