"""dynagent.nacos."""
