"""The Spring AI Alibaba layout's pieces mapped onto one AgentSpec (no server needed)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dynagent.exceptions import ConfigError
from dynagent.nacos._saa_layout import Piece, spec_document
from dynagent.spec.agent import load_spec


def piece(group: str, data_id: str, value: Any) -> Piece:
    return Piece(group, data_id, json.dumps(value), "md5")


def pieces(**values: Any) -> dict[str, Piece]:
    names = {
        "base": "agent-base.json",
        "model": "model.json",
        "mcp": "mcp-servers.json",
        "partners": "partner-agents.json",
    }
    return {names[k]: piece("ai-agent-bot", names[k], v) for k, v in values.items()}


PROMPT = piece(
    "nacos-ai-meta",
    "prompt-bot-p.json",
    {"promptKey": "bot-p", "version": "1", "template": "You are {{role}}.", "variables": ["role"]},
)


def test_every_piece_lands_in_one_spec() -> None:
    document = spec_document(
        "bot",
        pieces(
            base={"promptKey": "bot-p", "description": "Helps.", "maxIterations": 5},
            model={
                "baseUrl": "https://llm.example/v1",
                "apiKey": "k",
                "model": "qwen-max",
                "temperature": "0.3",
                "maxTokens": "256",
            },
            mcp={
                "mcpServers": [
                    {"mcpServerName": "weather.v2", "version": "1.0.0", "whiteTools": ["b", "a"]},
                    {"mcpServerName": "search"},
                ]
            },
            partners={"agents": [{"agentName": "billing"}]},
        ),
        PROMPT,
    )
    assert document == {
        "name": "bot",
        "description": "Helps.",
        "prompt": {"system": "You are {{role}}.", "variables": {"role": ""}},
        "limits": {"max_steps": 5},
        "model": {
            "provider": "openai",
            "name": "qwen-max",
            "base_url": "https://llm.example/v1",
            "api_key": "k",
            "settings": {"temperature": 0.3, "max_tokens": 256},
        },
        "tools": [
            {
                "type": "mcp",
                "name": "weather_v2",
                "nacos": {"server": "weather.v2", "version": "1.0.0"},
                "allow": ["a", "b"],
            },
            {"type": "mcp", "name": "search", "nacos": {"server": "search"}},
            {"type": "agent", "name": "billing", "a2a": {"nacos": "billing"}},
        ],
    }
    assert load_spec(document).name == "bot"  # a valid AgentSpec as it stands


@pytest.mark.parametrize(
    ("changes", "prompt", "message"),
    [
        ({"base": {"description": "x"}}, PROMPT, "agent-base.json names no prompt"),
        ({"base": {"promptKey": "bot-p"}}, None, "publish nacos-ai-meta/prompt-bot-p.json"),
        (
            {"base": {"promptKey": "bot-p"}, "model": {"maxTokens": "lots"}},
            PROMPT,
            "invalid model.json",
        ),
    ],
)
def test_a_piece_that_cannot_be_mapped_is_named(
    changes: dict[str, Any], prompt: Piece | None, message: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        spec_document("bot", pieces(**changes), prompt)
    assert message in str(refused.value)
