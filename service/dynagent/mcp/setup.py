"""The service's MCP servers from its config: stdio servers declared under
``mcp_servers:`` and the Nacos MCP registry of ``nacos:``."""

from __future__ import annotations

import sys

from dynagent.config import McpServerConfig, ServiceConfig
from dynagent.mcp._transport import McpTarget
from dynagent.mcp.nacos_registry import NacosMcpDirectory
from dynagent.mcp.tools import McpServers


def stdio_target(name: str, server: McpServerConfig) -> McpTarget:
    command = sys.executable if server.command == "python" else server.command
    return McpTarget(
        "stdio",
        f"stdio:{name}",
        command=command,
        args=tuple(server.args),
        env=tuple(sorted(server.env.items())),
        cwd=str(server.cwd or ""),
    )


def mcp_servers(config: ServiceConfig) -> McpServers:
    stdio = {name: stdio_target(name, server) for name, server in config.mcp_servers.items()}
    return McpServers(stdio=stdio, directory=NacosMcpDirectory(config.nacos))
