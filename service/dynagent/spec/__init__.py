"""dynagent.spec."""
