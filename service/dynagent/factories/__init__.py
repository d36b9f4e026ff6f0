"""Builder factories: the local default one (and, beside it, the Nacos ones)."""

from dynagent.factories.base import AgentBuilderFactory, DocumentApplier
from dynagent.factories.default import DefaultAgentBuilderFactory

__all__ = ["AgentBuilderFactory", "DefaultAgentBuilderFactory", "DocumentApplier"]
