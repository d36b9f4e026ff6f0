"""dynagent.mcp."""
