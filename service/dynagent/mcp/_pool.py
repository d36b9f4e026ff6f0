"""One MCP session per server, shared by every agent and run that uses it.

The pool hands out one ``McpConnection`` per target, remembers which agents use each
server (they are rebuilt when its tools change) and closes a session once the last
agent using it is gone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Container, Iterable
from typing import Any

from loguru import logger

from dynagent.mcp._connection import RELIST_SECONDS, McpConnection
from dynagent.mcp._transport import McpTarget


class McpPool:
    """Every MCP session of the service, by target; closed at shutdown."""

    def __init__(self, relist_seconds: float = RELIST_SECONDS) -> None:
        self.relist_seconds = relist_seconds
        """For sessions opened from now on (``RELIST_SECONDS``)."""
        self._connections: dict[McpTarget, McpConnection] = {}
        self.users: dict[McpTarget, set[str]] = {}
        """Agents built (or refused) on each target: rebuilt when it changes."""
        self.listeners: list[Callable[[frozenset[str]], None]] = []
        """Told the names of the agents to rebuild when a server's tools or state change."""
        self.changes = 0
        """Bumped on every change of a server's tools, state, registry entry or users."""
        self._changed_event = asyncio.Event()

    def connection(self, target: McpTarget) -> McpConnection:
        found = self._connections.get(target)
        if found is None:
            found = McpConnection(target, self._changed, self.relist_seconds)
            self._connections[target] = found
            found.start()
        return found

    def use(self, agent: str, targets: Iterable[McpTarget]) -> None:
        for target in targets:
            self.users.setdefault(target, set()).add(agent)

    def release(self, agent: str, keep: Container[McpTarget] = ()) -> list[McpTarget]:
        """``agent`` uses no server now but those in ``keep`` (none: it is gone). Returns
        the servers no agent uses."""
        unused = []
        for target, users in list(self.users.items()):
            if target in keep:
                continue
            users.discard(agent)
            if not users:
                del self.users[target]
                unused.append(target)
        self._bump()
        return unused

    async def close_unused(self, target: McpTarget) -> None:
        """Close the session to ``target`` if no agent uses it and no call or build holds
        it; the next agent that names the server opens a new one."""
        connection = self._connections.get(target)
        if connection is None or self.users.get(target) or connection.busy:
            return
        del self._connections[target]
        await connection.aclose()
        logger.info("MCP server {}: session closed, no agent uses it", target.label)
        self._changed(target, False)

    def changed(self, target: McpTarget, rebuild: bool = True) -> None:
        """Count a change of ``target``; with ``rebuild``, tell the agents on it to rebuild
        (also used by registry-backed servers)."""
        self._changed(target, rebuild)

    def _changed(self, target: McpTarget, rebuild: bool) -> None:
        self._bump()
        names = frozenset(self.users.get(target, ())) if rebuild else frozenset()
        if names:
            for listener in list(self.listeners):
                listener(names)

    def _bump(self) -> None:
        self.changes += 1
        event, self._changed_event = self._changed_event, asyncio.Event()
        event.set()

    async def wait_for(self, predicate: Callable[[], bool], within: float = 10.0) -> None:
        """Wait until ``predicate()`` holds, re-checked on every change (tests await this)."""
        async with asyncio.timeout(within):
            while not predicate():
                await self._changed_event.wait()

    def status(self) -> list[dict[str, Any]]:
        return [
            {**conn.status(), "agents": sorted(self.users.get(target, ()))}
            for target, conn in sorted(self._connections.items(), key=lambda i: i[0].label)
        ]

    async def aclose(self) -> None:
        connections, self._connections = list(self._connections.values()), {}
        for connection in connections:
            await connection.aclose()
