"""The Spring AI Alibaba layout has no network fields: the MCP servers and partner agents
its documents name are reached as the factory's settings say, public addresses only
unless the service config allows private ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dynagent.config import ServiceConfig, SpringAiAlibabaConfig, load_config
from dynagent.exceptions import ConfigError
from dynagent.nacos import _saa_layout as layout
from dynagent.nacos.saa_factory import SpringAiAlibabaAgentBuilderFactory
from dynagent.runtime.builder import AgentBuilder
from dynagent.spec.agent import load_spec
from dynagent.spec.tools import OutboundFields

GROUP = "ai-agent-bot"


def piece(data_id: str, value: Any, group: str = GROUP) -> layout.Piece:
    return layout.Piece(group, data_id, json.dumps(value), "md5")


PIECES = {
    layout.AGENT_BASE: piece(layout.AGENT_BASE, {"promptKey": "bot-prompt"}),
    layout.MCP_SERVERS: piece(
        layout.MCP_SERVERS, {"mcpServers": [{"mcpServerName": "orders", "whiteTools": ["find"]}]}
    ),
    layout.PARTNER_AGENTS: piece(layout.PARTNER_AGENTS, {"agents": [{"agentName": "billing"}]}),
}
PROMPT = piece("prompt-bot-prompt.json", {"template": "You help."}, group=layout.PROMPT_GROUP)


def tools_of(factory: SpringAiAlibabaAgentBuilderFactory) -> list[dict[str, Any]]:
    document = layout.spec_document("bot", PIECES, PROMPT, factory.network)
    spec = load_spec({**document, "model": {"provider": "test"}})
    entries = [entry for entry in spec.tools if isinstance(entry, OutboundFields)]
    assert len(entries) == len(spec.tools)
    return [
        {
            "name": getattr(entry, "name", None),
            "allow_hosts": entry.allow_hosts,
            "allow_private": entry.allow_private,
        }
        for entry in entries
    ]


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        (True, {"allow_hosts": None, "allow_private": False}),
        ({"allow_private": True}, {"allow_hosts": None, "allow_private": True}),
        (
            {"allow_hosts": ["*.corp.example"]},
            {"allow_hosts": ["*.corp.example"], "allow_private": False},
        ),
    ],
    ids=["public only by default", "private allowed", "hosts named"],
)
def test_servers_and_partners_of_the_layout_are_reached_as_the_factory_settings_say(
    setting: Any, expected: dict[str, Any]
) -> None:
    config = ServiceConfig.model_validate({"factories": {"spring_ai_alibaba": setting}})
    saa = config.factories.spring_ai_alibaba
    network = saa if isinstance(saa, SpringAiAlibabaConfig) else None
    factory = SpringAiAlibabaAgentBuilderFactory(AgentBuilder(environ={}), config.nacos, network)
    assert tools_of(factory) == [
        {"name": "orders", **expected},
        {"name": "billing", **expected},
    ]


def test_a_setting_the_factory_does_not_know_is_refused_by_name(tmp_path: Path) -> None:
    config = tmp_path / "service.yaml"
    config.write_text("factories:\n  spring_ai_alibaba:\n    allow_privat: true\n")
    with pytest.raises(ConfigError) as refused:
        load_config(config, environ={})
    assert "allow_privat" in str(refused.value)
