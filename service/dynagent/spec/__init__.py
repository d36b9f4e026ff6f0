"""The validated shapes, at the edge: ``AgentSpec`` and its parts, the tool entries
(dispatched to their kinds by ``type``), and the bounds every document is checked against."""

from dynagent.spec.agent import AgentSpec, json_schema, load_spec

__all__ = ["AgentSpec", "json_schema", "load_spec"]
