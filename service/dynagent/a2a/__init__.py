"""dynagent.a2a."""
