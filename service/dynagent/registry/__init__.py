"""dynagent.registry."""
