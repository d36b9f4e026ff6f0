"""dynagent.runtime."""
