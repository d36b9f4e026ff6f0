"""Builder factories: the local default one (and, beside it, the Nacos ones)."""

from .base import AgentBuilderFactory, DocumentApplier
from .default import DefaultAgentBuilderFactory

__all__ = ["AgentBuilderFactory", "DefaultAgentBuilderFactory", "DocumentApplier"]
