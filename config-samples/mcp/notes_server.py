"""A tiny stdio MCP server shipped with the samples: read-only notes about ACME's shop.

Declared under ``mcp_servers:`` in ``config-samples/service.yaml``; the service starts it
(with the interpreter running Dynagent, which has the ``mcp`` SDK) when an agent names it.
"""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import MCPServer
from pydantic import Field

NOTES = {
    "shipping": "Orders ship within 2 working days; tracking arrives by e-mail.",
    "returns": "Items may be returned within 30 days, unused, with the receipt.",
    "hours": "Support answers Monday to Friday, 9:00 to 17:00 CET.",
}

server: MCPServer = MCPServer("notes")


@server.tool(description="The titles of the notes.")
def list_notes() -> list[str]:
    return sorted(NOTES)


@server.tool(description="One note by its title, e.g. 'shipping'.")
def read_note(title: Annotated[str, Field(examples=["shipping"])]) -> str:
    if title not in NOTES:
        raise ValueError(f"no note {title!r}; titles: {', '.join(sorted(NOTES))}")
    return NOTES[title]


if __name__ == "__main__":
    import asyncio

    asyncio.run(server.run_stdio_async())
