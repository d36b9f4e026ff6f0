"""The MCP feature: ``type: mcp`` tool entries, pooled SDK sessions to the servers, the
Nacos MCP registry, the servers' status, and ``dynagent mcp list``."""
