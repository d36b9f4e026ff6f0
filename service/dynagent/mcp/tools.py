"""MCP tools: the tools of an MCP server, offered to an agent as ``{prefix}_{tool}``.

``McpServers`` is what the builder resolves ``type: mcp`` entries against: the
pooled sessions (``_mcp_pool``), the stdio servers the service config declares,
and the Nacos MCP registry when one is configured. The model sees each tool's
own JSON Schema; the run loop validates arguments against it before the call.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

from mcp import types

from dynagent import _regex
from dynagent.exceptions import ConfigError, FieldIssue
from dynagent.mcp._connection import (
    CONNECT_TIMEOUT,
    McpToolError,
    McpUnavailable,
    RemoteTool,
    connect_timeout,
)
from dynagent.mcp._pool import McpPool
from dynagent.mcp._registry import McpDirectory, RegisteredServer, endpoint_target, registry_key
from dynagent.mcp._transport import McpTarget
from dynagent.mcp.entry import McpToolSpec
from dynagent.models.base import ToolDefinition
from dynagent.runtime.outbound import PRIVATE_HINT, OutboundPolicy
from dynagent.spec._schemas import check_schema
from dynagent.tools.base import Tool

_UNSAFE = _regex.compile(r"[^a-zA-Z0-9_-]")
_CREDENTIALS = _regex.compile(r"^(\w+://)[^@/]*@")
MAX_RESULT_CHARS = 32_000


class McpServers:
    """Every MCP server agents may use, and the sessions to them; owned by the service."""

    def __init__(
        self, *, stdio: Mapping[str, McpTarget] | None = None, directory: McpDirectory | None = None
    ) -> None:
        self.pool = McpPool()
        self.stdio = dict(stdio or {})
        """Servers declared under ``mcp_servers:`` in the service config, by name."""
        self.directory = directory
        self._registered: dict[McpTarget, RegisteredServer] = {}
        self._closing: set[asyncio.Task[None]] = set()

    @property
    def listeners(self) -> list[Callable[[frozenset[str]], None]]:
        """Told the agent names to rebuild when a server they use changes."""
        return self.pool.listeners

    def target(
        self, entry: McpToolSpec, url: str, headers: Mapping[str, str], path: str
    ) -> McpTarget:
        """The server ``entry`` (at ``path``) names (``url`` and ``headers`` with ``${VAR}``
        filled in), reached as its ``allow_hosts`` and ``allow_private`` say."""
        policy = OutboundPolicy.of(url, entry.allow_hosts, entry.allow_private)
        if entry.server is not None:
            found = self.stdio.get(entry.server)
            if found is None:
                known = ", ".join(sorted(self.stdio)) or "none"
                message = f"no MCP server {entry.server!r} in mcp_servers; known: {known}"
                raise _issue(f"{path}.server", message)
            return found
        if entry.nacos is not None:
            if self.directory is None:
                message = "this service has no Nacos MCP registry configured"
                raise _issue(f"{path}.nacos", message)
            return registry_key(entry.nacos.server, entry.nacos.version, policy)
        refused = policy.refusal(url)
        if refused is not None:
            hint = f"; {PRIVATE_HINT}" if "private" in refused else ""
            raise _issue(f"{path}.url", f"{refused}{hint}")
        label = _CREDENTIALS.sub(lambda m: m.group(1) or "", url).split("?", 1)[0]
        return McpTarget(
            entry.transport,
            label,
            url=url,
            headers=tuple(sorted(headers.items())),
            policy=policy,
        )

    async def prepare(self, agent: str, targets: Iterable[McpTarget]) -> None:
        """Open (or wait a moment for) the sessions ``agent`` needs, so that the build that
        follows finds their tools; a server still down then refuses the build.

        ``agent`` becomes a user of each server only after that first outcome: the build
        that follows sees a connect that happened meanwhile, so it needs no rebuild."""
        for target in targets:
            if target.transport == "nacos":
                registered = self._registered_server(target)
                await registered.first_outcome(CONNECT_TIMEOUT)
                first = self._server_listed(registered)
                if first is not None:
                    await self._open(agent, first)
            else:
                await self._open(agent, target)
            self.pool.use(agent, [target])

    async def _open(self, agent: str, target: McpTarget) -> None:
        """Wait for the session's first outcome; for a rebuild (``agent`` already uses it),
        also check that an open session still answers. New agents skip that check: a
        start that loads a thousand agents on one server must not ping it a thousand times."""
        connection = self.pool.connection(target)
        with connection.holding():  # not closed for want of users while the agent waits
            await connection.first_outcome(connect_timeout(target))
            if agent in self.pool.users.get(target, ()):
                await connection.verify()
        self.pool.use(agent, [target])

    def release(self, agent: str) -> None:
        """``agent`` is gone (deleted, renamed): close the sessions, and drop the registry
        subscriptions, of the servers no agent uses any more."""
        for target in self.pool.release(agent):
            self._close_soon(target)

    def retain(self, agent: str, held: Iterable[Hashable]) -> None:
        """``agent`` now serves versions whose tools hold ``held``: it stops using every
        other server (an edit dropped it), and a session no agent uses then closes."""
        keep = {target for target in held if isinstance(target, McpTarget)}
        for key in [target for target in keep if target.transport == "nacos"]:
            registered = self._registered.get(key)
            entry = registered.entry if registered is not None else None
            if entry is not None:  # the registry server's sessions, by endpoint
                keep |= {endpoint_target(entry, url, key.policy) for url in entry.endpoints}
        for target in self.pool.release(agent, keep=keep):
            self._close_soon(target)

    def _close_soon(self, target: McpTarget) -> None:
        task = asyncio.get_running_loop().create_task(self._close_unused(target))
        self._closing.add(task)  # kept until done: the loop holds tasks weakly
        task.add_done_callback(self._closing.discard)

    async def _close_unused(self, target: McpTarget) -> None:
        if self.pool.users.get(target):
            return
        registered = self._registered.get(target) if target.transport == "nacos" else None
        if registered is not None:
            del self._registered[target]
            await registered.aclose()
            entry = registered.entry
            if entry is not None:
                for url in entry.endpoints:
                    await self.pool.close_unused(endpoint_target(entry, url, target.policy))
        await self.pool.close_unused(target)

    def _registered_server(self, key: McpTarget) -> RegisteredServer:
        found = self._registered.get(key)
        if found is None:
            assert self.directory is not None
            version = key.command or None
            found = RegisteredServer(
                self.directory, key.url, version, self.pool.changed, key.policy
            )
            self._registered[key] = found
            found.start()
        return found

    def _server_listed(self, registered: RegisteredServer) -> McpTarget | None:
        """For a registry entry without tools, the endpoint whose ``tools/list`` counts."""
        entry = registered.entry
        if entry is None or entry.tools or not entry.endpoints:
            return None
        return endpoint_target(entry, entry.endpoints[0], registered.key.policy)

    def offered(self, target: McpTarget) -> tuple[tuple[RemoteTool, ...], frozenset[str]]:
        """The server's tools now and those its registry disables; ``McpUnavailable`` if down."""
        if target.transport == "nacos":
            registered = self._registered_server(target)
            entry = registered.current()
            listed = self._server_listed(registered)
            tools = entry.tools if listed is None else self._listed(listed)
            return tools, entry.disabled
        return self._listed(target), frozenset()

    def _listed(self, target: McpTarget) -> tuple[RemoteTool, ...]:
        connection = self.pool.connection(target)
        if connection.tools is None or not connection.usable:
            reason = connection.last_error or "still connecting"
            raise McpUnavailable(f"MCP server {target.label} is not connected: {reason}")
        return connection.tools

    async def call(
        self, target: McpTarget, name: str, arguments: Mapping[str, Any], seconds: float
    ) -> str:
        named = target
        if target.transport == "nacos":
            target = self._registered_server(target).pick()  # chosen at call time
        try:
            result = await self.pool.connection(target).call(name, arguments, seconds)
        finally:
            if not self.pool.users.get(named):  # a run that outlived its agent
                self._close_soon(named)
        text = result_text(result)
        if result.is_error:
            raise McpToolError(text or "the tool reported an error")
        return text

    def status(self) -> list[dict[str, Any]]:
        registered = [
            {**server.status(), "agents": sorted(self.pool.users.get(key, ()))}
            for key, server in sorted(self._registered.items(), key=lambda i: i[0].label)
        ]
        return [*self.pool.status(), *registered]

    async def aclose(self) -> None:
        await asyncio.gather(*self._closing, return_exceptions=True)
        servers, self._registered = list(self._registered.values()), {}
        for server in servers:
            await server.aclose()
        await self.pool.aclose()
        if self.directory is not None:
            await self.directory.aclose()


def _issue(field: str, message: str) -> ConfigError:
    return ConfigError("invalid MCP tool entry", issues=[FieldIssue(field, message)])


def mcp_tools(servers: McpServers, entry: McpToolSpec, target: McpTarget, path: str) -> list[Tool]:
    """The tools ``entry`` offers: the server's (minus disabled, within ``allow``)."""
    try:
        remote, disabled = servers.offered(target)
    except McpUnavailable as exc:
        raise ConfigError(
            f"MCP server {target.label} is unavailable",
            issues=[FieldIssue(path, f"{exc.message}; retried with backoff")],
        ) from None
    names = {tool.name for tool in remote}
    unknown = sorted(set(entry.allow or ()) - names - disabled)
    if unknown:
        listed = ", ".join(sorted(names)) or "none"
        message = f"{target.label} lists no {unknown}; it has {listed}"
        raise ConfigError("unknown MCP tool", issues=[FieldIssue(f"{path}.allow", message)])
    chosen = [
        tool
        for tool in remote
        if tool.name not in disabled and (entry.allow is None or tool.name in entry.allow)
    ]
    return [_tool(servers, entry, target, tool, path) for tool in chosen]


def _tool(
    servers: McpServers, entry: McpToolSpec, target: McpTarget, remote: RemoteTool, path: str
) -> Tool:
    schema = dict(remote.input_schema) or {"type": "object", "properties": {}}
    try:
        check_schema(schema)
    except ValueError as exc:
        message = f"tool {remote.name!r} has no usable JSON Schema: {exc}"
        raise ConfigError("invalid MCP tool schema", issues=[FieldIssue(path, message)]) from None
    name = _UNSAFE.sub("_", f"{entry.tool_prefix}{remote.name}")[:64]

    async def call(arguments: dict[str, Any]) -> str:
        return await servers.call(target, remote.name, arguments, entry.timeout)

    definition = ToolDefinition(name, remote.description, schema)
    return Tool.of(
        definition,
        call,
        timeout=entry.timeout,
        on_error=entry.on_error,
        idempotent=remote.idempotent,
        holds=(target,),
    )


def result_text(result: types.CallToolResult) -> str:
    """What the model reads of a result: its text, else its structured content; images,
    audio and resources are described rather than dropped."""
    parts = [_describe(block) for block in result.content]
    texts = [p for p, is_text in parts if is_text]
    notes = [p for p, is_text in parts if not is_text]
    if not texts and result.structured_content is not None:
        texts = [json.dumps(result.structured_content, ensure_ascii=False)]
    return "\n".join([*texts, *notes])[:MAX_RESULT_CHARS]


def _describe(block: Any) -> tuple[str, bool]:
    if isinstance(block, types.TextContent):
        return block.text, True
    if isinstance(block, types.ImageContent | types.AudioContent):
        kind = "image" if isinstance(block, types.ImageContent) else "audio"
        return f"[{kind} {block.mime_type}, {_size(block.data)} bytes, not shown]", False
    if isinstance(block, types.ResourceLink):
        return f"[resource link {block.uri}: {block.name}]", False
    if isinstance(block, types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, types.TextResourceContents):
            return f"[resource {resource.uri}]\n{resource.text}", True
        mime = resource.mime_type or "application/octet-stream"
        return f"[resource {resource.uri}, {mime}, {_size(resource.blob)} bytes, not shown]", False
    return f"[{getattr(block, 'type', 'unknown')} content, not shown]", False


def _size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data)
