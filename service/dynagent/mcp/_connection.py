"""The session to one MCP server, kept open by its own task.

Each ``McpConnection`` owns a task that opens the session with the official
``mcp`` SDK client, caches ``tools/list``, and keeps it open; a
``notifications/tools/list_changed`` lists the tools again (at most once per
``RELIST_SECONDS``). A call that fails
on the transport marks the session broken; the task reconnects, with backoff
while the server stays down. Whoever built agents on a server's tools is told
when they change (``McpPool.listeners``), so those agents are rebuilt.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
import warnings
from collections.abc import Callable, Coroutine, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import httpx2
from loguru import logger
from mcp import types
from mcp.client import Client, IncomingMessage
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types.jsonrpc import CONNECTION_CLOSED, REQUEST_TIMEOUT

from dynagent.exceptions import ToolCallError
from dynagent.mcp._transport import MAX_MESSAGE_BYTES, McpTarget, transport
from dynagent.runtime._tracing import outgoing_headers

BACKOFF_FIRST = 0.2
BACKOFF_MAX = 30.0
CONNECT_TIMEOUT = 5.0
STDIO_START_TIMEOUT = 20.0
"""A stdio server is a process to start (an interpreter importing the SDK): more time."""


def connect_timeout(target: McpTarget) -> float:
    return STDIO_START_TIMEOUT if target.transport == "stdio" else CONNECT_TIMEOUT


RELIST_SECONDS = 0.5
"""A server's ``tools/list_changed`` lists its tools at once, then at most once per this
interval however often it repeats (a server sending one every 5 ms cost a core in
listings and rebuilds); the last change of a burst is always listed."""

PING_SECONDS = 10.0
"""An idle session is pinged this often, so that a server gone quiet shows as down."""


class McpUnavailable(ToolCallError):
    """The MCP server cannot be reached now; the session reconnects on its own. For a
    call, a transient failure: the same call may succeed on the new session."""

    kind = "unavailable"

    def __init__(self, message: str) -> None:
        super().__init__(message, transient=True)


class McpToolError(ToolCallError):
    """The MCP server answered the call with an error (``isError`` or a JSON-RPC error);
    ``transient`` only when that error says the call timed out."""


@dataclass(frozen=True, slots=True)
class RemoteTool:
    """A tool as the server lists it."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    idempotent: bool = False
    """The server marks it ``readOnlyHint`` or ``idempotentHint``: a call that failed on
    the way may be sent again. Without either hint, a call is never repeated."""


def _remote(tool: types.Tool) -> RemoteTool:
    hints = tool.annotations
    idempotent = hints is not None and (
        hints.read_only_hint is True or hints.idempotent_hint is True
    )
    return RemoteTool(tool.name, tool.description or "", dict(tool.input_schema), idempotent)


ConnectionState = Literal["connecting", "connected", "down", "closed"]


class McpConnection:
    """The pooled session to one server, kept open by its own task."""

    def __init__(
        self,
        target: McpTarget,
        on_change: Callable[[McpTarget, bool], None],
        relist_seconds: float = RELIST_SECONDS,
    ) -> None:
        """``on_change(target, rebuild)``: told of every change; ``rebuild`` when the agents
        on it should be built again (connected, tools changed)."""
        self.target = target
        self.relist_seconds = relist_seconds
        self.state: ConnectionState = "connecting"
        self.tools: tuple[RemoteTool, ...] | None = None
        self.last_error: str | None = None
        self.connected_at: float | None = None
        self.calls = 0
        self._on_change = on_change
        self._client: Client | None = None
        self._ready = asyncio.Event()
        self._settled = asyncio.Event()
        """Set once the first attempt has ended, either way."""
        self._broken = asyncio.Event()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._chores: set[asyncio.Task[None]] = set()
        self._verifying: asyncio.Task[None] | None = None
        self._relisting: asyncio.Task[None] | None = None
        self._relist_again = False
        self.busy = 0
        """Calls and builds on the way: a session no agent uses is closed once they end."""

    def start(self) -> None:
        if self._task is None:
            # In a context of its own: the session outlives the run that first asked for it,
            # and its pings and listings must not carry that run's trace.
            self._task = asyncio.create_task(
                self._run(), name=f"mcp {self.target.label}", context=contextvars.Context()
            )

    async def first_outcome(self, within: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                await self._settled.wait()

    async def _run(self) -> None:
        delay = BACKOFF_FIRST
        while not self._closed:
            try:
                await self._session()
                delay = BACKOFF_FIRST
            except Exception as exc:
                self.last_error = describe(exc)
            self._client = None
            self._ready.clear()
            self._broken.clear()
            if self._closed:
                break
            if self.state != "down":
                logger.warning("MCP server {} is down: {}", self.target.label, self.last_error)
            self.state = "down"
            self._settled.set()
            self._on_change(self.target, False)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._wake.wait()
            self._wake.clear()
            delay = min(delay * 2, BACKOFF_MAX)

    async def _session(self) -> None:
        async with contextlib.AsyncExitStack() as stack:
            async with asyncio.timeout(connect_timeout(self.target)):
                client = await stack.enter_async_context(
                    Client(
                        transport(self.target),
                        mode="legacy",
                        message_handler=self._message,
                        cache=None,
                    )
                )
                tools = await _list_tools(client)
            self._client = client
            self.state, self.last_error, self.connected_at = "connected", None, time.time()
            changed = tools != self.tools
            self.tools = tools
            self._ready.set()
            self._settled.set()
            logger.info("MCP server {} connected: {} tools", self.target.label, len(tools))
            # Every connect rebuilds: an agent refused while the server was down needs it
            # even when the tools are the same (a serving one keeps its revision then).
            self._on_change(self.target, True)
            if changed:
                logger.debug("MCP server {} lists new tools", self.target.label)
            await self._watch(client)

    async def _watch(self, client: Client) -> None:
        """Until the session breaks: ping it when idle, so a dead server shows as down."""
        while not self._broken.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(PING_SECONDS):
                    await self._broken.wait()
            if not self._broken.is_set():
                await self._ping(client)

    async def _ping(self, client: Client) -> None:
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                with warnings.catch_warnings():  # ping is legacy-era, and so is our handshake
                    warnings.simplefilter("ignore", MCPDeprecationWarning)
                    await client.send_ping()
        except Exception as exc:
            self._fail(exc)

    async def _message(self, message: IncomingMessage) -> None:
        # Not awaited here: the handler runs in the session's receive loop.
        if isinstance(message, types.ToolListChangedNotification):
            self._relist_soon()
        elif isinstance(message, Exception) and self._client is not None:
            self._spawn(self._ping(self._client))  # a stream broke: is the server gone?

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work)
        self._chores.add(task)
        task.add_done_callback(self._chores.discard)
        return task

    @property
    def usable(self) -> bool:
        """Connected, and no call or ping has found the session broken since."""
        return self.state == "connected" and not self._broken.is_set()

    async def verify(self) -> None:
        """Ping an open session now (verifications at the same time share one ping).

        A rebuild must not trust tools cached from a server that died since the last idle
        ping: a failed ping breaks the session, so the build is refused and the agent keeps
        its last good version."""
        client = self._client
        if client is None or not self.usable:
            return
        if self._verifying is None or self._verifying.done():
            self._verifying = self._spawn(self._ping(client))
        await asyncio.shield(self._verifying)

    def _relist_soon(self) -> None:
        """List the tools now, or, while a listing is under way or was made less than
        ``relist_seconds`` ago, once more when that interval ends (one for a burst)."""
        if self._relisting is not None and not self._relisting.done():
            self._relist_again = True
            return
        self._relisting = self._spawn(self._relists())

    async def _relists(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._relist_again = False
            started = loop.time()
            await self._relist()
            if not self._relist_again or self._closed:
                return
            await asyncio.sleep(max(0.0, started + self.relist_seconds - loop.time()))

    async def _relist(self) -> None:
        client = self._client
        if client is None:
            return
        try:
            tools = await _list_tools(client)
        except Exception as exc:
            self._fail(exc)
            return
        if tools != self.tools:
            self.tools = tools
            logger.info("MCP server {} changed its tools", self.target.label)
            self._on_change(self.target, True)

    def _fail(self, exc: BaseException) -> None:
        self.last_error = describe(exc)
        self._broken.set()

    def reconnect_now(self) -> None:
        self._wake.set()

    async def call(
        self, name: str, arguments: Mapping[str, Any], seconds: float
    ) -> types.CallToolResult:
        """Call ``name`` (reading at most ``seconds``); ``McpUnavailable`` when the session
        is down or breaks on the way."""
        with self.holding():
            return await self._call(name, arguments, seconds)

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Keep the session open meanwhile, even if no agent uses the server any more."""
        self.busy += 1
        try:
            yield
        finally:
            self.busy -= 1

    async def _call(
        self, name: str, arguments: Mapping[str, Any], seconds: float
    ) -> types.CallToolResult:
        client = await self._connected(seconds)
        self.calls += 1
        try:
            # W3C trace context in params._meta (the OpenTelemetry MCP conventions); over
            # HTTP the request carries it as a header too (``_traced_client``).
            traced: Any = outgoing_headers() or None
            return await client.call_tool(
                name, dict(arguments), read_timeout_seconds=seconds, meta=traced
            )
        except MCPError as exc:
            if _past_the_bound(exc):  # the answer's stream ended there, not the session
                raise McpToolError(
                    f"the result is larger than {MAX_MESSAGE_BYTES} bytes, the most read of "
                    "one message; ask the tool for less"
                ) from None
            if exc.code != CONNECTION_CLOSED:
                raise McpToolError(exc.message, transient=exc.code == REQUEST_TIMEOUT) from None
            self._fail(exc)
            raise McpUnavailable(
                f"MCP server {self.target.label} closed the connection during the call; "
                "the session reconnects for the next call"
            ) from None
        except (TimeoutError, asyncio.CancelledError):
            raise
        except Exception as exc:
            self._fail(exc)
            raise McpUnavailable(
                f"MCP server {self.target.label} failed during the call: {describe(exc)}; "
                "the session reconnects for the next call"
            ) from None

    async def _connected(self, seconds: float) -> Client:
        """The open session; one that is down gets a reconnect now and a few seconds."""
        wait = seconds
        if self.state == "down":
            self.reconnect_now()
            wait = min(seconds, CONNECT_TIMEOUT)
        try:
            async with asyncio.timeout(wait):
                await self._ready.wait()
        except TimeoutError:
            if wait == seconds and self.state != "down":
                raise
            raise McpUnavailable(
                f"MCP server {self.target.label} is not connected: {self.last_error}"
            ) from None
        assert self._client is not None
        return self._client

    async def aclose(self) -> None:
        self.state, self._closed = "closed", True
        self._broken.set()
        self._wake.set()
        tasks = [*self._chores, *([self._task] if self._task else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def status(self) -> dict[str, Any]:
        return {
            "server": self.target.label,
            "transport": self.target.transport,
            "state": self.state,
            "tools": [tool.name for tool in self.tools or ()],
            "connected_at": self.connected_at,
            "calls": self.calls,
            "last_error": self.last_error,
        }


def _past_the_bound(error: MCPError) -> bool:
    """The SDK ended an answer's SSE stream at ``max_sse_event_size`` (httpx2's
    ``SSEError`` text, passed on as the request's error)."""
    return error.code == CONNECTION_CLOSED and "byte limit" in error.message


async def _list_tools(client: Client) -> tuple[RemoteTool, ...]:
    found: list[RemoteTool] = []
    cursor: str | None = None
    for _ in range(100):  # pages; a server that never ends its listing is cut off
        page = await client.list_tools(cursor=cursor)
        found.extend(_remote(tool) for tool in page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tuple(found)


def describe(exc: BaseException) -> str:
    """One line about a failure, without the URL's query or headers (they may hold secrets)."""
    if isinstance(exc, TimeoutError):
        return f"no answer within {CONNECT_TIMEOUT:g} s"
    if isinstance(exc, httpx2.HTTPStatusError):
        return f"HTTP {exc.response.status_code}"
    if isinstance(exc, PermissionError):  # the tool's outbound policy: says what and why
        return f"refused: {exc}"
    if isinstance(exc, httpx2.TransportError | OSError):
        return f"cannot connect ({type(exc).__name__})"
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe(inner) for inner in exc.exceptions[:3])
    text = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
