"""MCP servers found in a registry (the Nacos MCP registry): their endpoints are chosen
at call time, the tools the registry disables are never offered, and a change in the
registry rebuilds the agents that use the server."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

from loguru import logger

from dynagent.mcp._connection import (
    BACKOFF_FIRST,
    BACKOFF_MAX,
    McpUnavailable,
    RemoteTool,
    describe,
)
from dynagent.mcp._transport import McpTarget
from dynagent.runtime.outbound import OutboundPolicy


@dataclass(frozen=True, slots=True)
class RegistryEntry:
    """One server version as the registry describes it."""

    name: str
    version: str
    transport: Literal["streamable_http", "sse"]
    endpoints: tuple[str, ...]
    """URLs of its registered endpoints."""
    tools: tuple[RemoteTool, ...]
    """The tools the registry lists (empty: ask the server)."""
    disabled: frozenset[str] = frozenset()
    """Tools the registry marks disabled: never offered."""


class McpDirectory(Protocol):
    """A registry of MCP servers (``sources.nacos_mcp.NacosMcpDirectory``)."""

    async def get(self, server: str, version: str | None) -> RegistryEntry: ...

    async def subscribe(
        self, server: str, version: str | None, on_change: Callable[[RegistryEntry], None]
    ) -> None: ...

    async def aclose(self) -> None: ...


def registry_key(
    server: str, version: str | None, policy: OutboundPolicy | None = None
) -> McpTarget:
    """The key of a registry server; ``policy`` goes to the endpoints the registry names."""
    label = f"nacos:{server}@{version or 'latest'}"
    return McpTarget(
        "nacos", label, url=server, command=version or "", policy=policy or OutboundPolicy()
    )


def endpoint_target(
    entry: RegistryEntry, url: str, policy: OutboundPolicy | None = None
) -> McpTarget:
    parts = urlsplit(url)
    label = f"{parts.scheme}://{parts.netloc}{parts.path}"
    return McpTarget(entry.transport, label, url=url, policy=policy or OutboundPolicy())


class RegisteredServer:
    """A registry server: its current entry, kept by a subscription, retried while missing."""

    def __init__(
        self,
        directory: McpDirectory,
        server: str,
        version: str | None,
        on_change: Callable[[McpTarget, bool], None],
        policy: OutboundPolicy | None = None,
    ) -> None:
        self.key = registry_key(server, version, policy)
        self.entry: RegistryEntry | None = None
        self.last_error: str | None = None
        self._directory = directory
        self._server, self._version = server, version
        self._on_change = on_change
        self._next = 0
        self._task: asyncio.Task[None] | None = None
        self._settled = asyncio.Event()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._resolve(), name=self.key.label)

    async def first_outcome(self, within: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                await self._settled.wait()

    async def _resolve(self) -> None:
        delay = BACKOFF_FIRST
        while True:
            try:
                await self._directory.subscribe(self._server, self._version, self._update)
                self._update(await self._directory.get(self._server, self._version))
                return
            except Exception as exc:
                self.last_error = describe(exc)
                self._settled.set()
                self._on_change(self.key, False)
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX)

    def _update(self, entry: RegistryEntry) -> None:
        self.last_error = None
        self._settled.set()
        if entry != self.entry:
            if self.entry is not None:
                logger.info("Nacos MCP registry changed {}", self.key.label)
            self.entry = entry
            self._on_change(self.key, True)

    def current(self) -> RegistryEntry:
        if self.entry is None:
            reason = self.last_error or "not resolved yet"
            raise McpUnavailable(f"MCP server {self.key.label} is not available: {reason}")
        return self.entry

    def pick(self) -> McpTarget:
        """The endpoint for the next call: round robin over the registered ones."""
        entry = self.current()
        if not entry.endpoints:
            raise McpUnavailable(f"MCP server {self.key.label} has no registered endpoint")
        url = entry.endpoints[self._next % len(entry.endpoints)]
        self._next += 1
        return endpoint_target(entry, url, self.key.policy)

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def status(self) -> dict[str, Any]:
        entry = self.entry
        return {
            "server": self.key.label,
            "transport": "nacos",
            "state": "resolved" if entry else "down",
            "version": entry.version if entry else None,
            "endpoints": [endpoint_target(entry, u).label for u in entry.endpoints]
            if entry
            else [],
            "tools": [t.name for t in entry.tools if t.name not in entry.disabled] if entry else [],
            "disabled": sorted(entry.disabled) if entry else [],
            "last_error": self.last_error,
        }
