"""``GET /v1/mcp/servers``: each MCP server's state (connected, tools, last error) and
the agents that use it."""

from __future__ import annotations

from aiohttp import web

from dynagent.http._routes import Route, Routes
from dynagent.http.api.schemas import McpServerBody, McpServerList
from dynagent.http.sse import json
from dynagent.http.state import caller, service

routes = Routes("mcp")


@routes.add(
    Route(
        "GET",
        "/v1/mcp/servers",
        "The MCP servers agents use, and their state",
        response=McpServerList,
        errors=(401,),
    )
)
async def list_servers(request: web.Request) -> web.Response:
    who = caller(request)
    servers = []
    for status in service(request).mcp.status():
        agents = [name for name in status["agents"] if who.may_see(name)]
        if agents or who.agents is None:
            servers.append(McpServerBody.model_validate({**status, "agents": agents}))
    return json(McpServerList(servers=servers))
