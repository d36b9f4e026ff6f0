"""dynagent.core."""
