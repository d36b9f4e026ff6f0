"""``type: mcp``: the tools of an MCP server, through the service's ``McpServers``.

``prepare`` opens the session the entry needs (or waits a moment for it), ``build``
offers the tools the server lists then; they are ``remote``: what the server offers
is part of the agent's revision. Offline (``dynagent validate``) entries are checked
by their shape only.
"""

from __future__ import annotations

from dynagent.config import ServiceConfig
from dynagent.exceptions import ConfigError, FieldIssue
from dynagent.mcp._transport import McpTarget
from dynagent.mcp.entry import McpToolSpec
from dynagent.mcp.tools import McpServers, mcp_tools
from dynagent.spec.agent import AgentSpec
from dynagent.tools.base import Tool
from dynagent.tools.kinds import KindContext, ToolKind


class McpKind(ToolKind[McpToolSpec]):
    type = "mcp"
    entry = McpToolSpec
    remote = True
    online = True

    async def prepare(
        self, ctx: KindContext, spec: AgentSpec, entry: McpToolSpec, path: str
    ) -> None:
        servers = ctx.feature(McpServers)
        if servers is not None:  # without servers, ``build`` says so
            await servers.prepare(spec.name, [_target(ctx, servers, entry, path)])

    def check(self, ctx: KindContext, spec: AgentSpec, entry: McpToolSpec, path: str) -> None:
        """A stdio server is started only by the service config that serves the agent: one
        that does not declare it refuses the agent, so publishing it there would too."""
        config = ctx.feature(ServiceConfig)
        if config is None or entry.server is None or entry.server in config.mcp_servers:
            return
        known = ", ".join(sorted(config.mcp_servers)) or "none"
        message = (
            f"no MCP server {entry.server!r} in mcp_servers of the service config; known: "
            f"{known} (use the config of the service that will serve it: --config)"
        )
        raise ConfigError("unknown MCP server", issues=[FieldIssue(f"{path}.server", message)])

    def build(self, ctx: KindContext, spec: AgentSpec, entry: McpToolSpec, path: str) -> list[Tool]:
        servers = ctx.feature(McpServers)
        if servers is None:
            raise ConfigError(
                "MCP tools are not available here",
                issues=[FieldIssue(path, "this builder has no MCP servers (McpServers)")],
            )
        target = _target(ctx, servers, entry, path)
        servers.pool.use(spec.name, [target])  # a refused build is retried when it connects
        return mcp_tools(servers, entry, target, path)


def _target(ctx: KindContext, servers: McpServers, entry: McpToolSpec, path: str) -> McpTarget:
    # The URL may carry a key in its query: expanded as a credential (masked).
    url = "" if entry.url is None else ctx.expand_env(entry.url, f"{path}.url", secret=True)
    headers = {
        name: ctx.expand_env(value, f"{path}.headers.{name}", secret=True)
        for name, value in entry.headers.items()
    }
    return servers.target(entry, url, headers, path)


KIND = McpKind()
