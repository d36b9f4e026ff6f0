"""dynagent.rollout."""
