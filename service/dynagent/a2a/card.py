"""An agent's A2A card (protocol 0.3, ``a2a-sdk`` types): served at
``/a2a/{name}/.well-known/agent-card.json`` and released to the Nacos A2A registry."""

from __future__ import annotations

from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityScheme,
)

from dynagent.runtime.agent import Agent


def agent_card(agent: Agent, url: str) -> AgentCard:
    """The card of ``agent`` answering at ``url``: version = its revision."""
    description = agent.spec.description or f"Dynagent agent {agent.name}"
    return AgentCard(
        name=agent.name,
        description=description,
        version=agent.revision,
        url=url,
        preferred_transport="JSONRPC",
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain", "application/json"],
        skills=[
            AgentSkill(id=agent.name, name=agent.name, description=description, tags=["dynagent"])
        ],
        security_schemes={"bearer": SecurityScheme(root=HTTPAuthSecurityScheme(scheme="bearer"))},
        security=[{"bearer": []}],
    )
