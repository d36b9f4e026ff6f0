"""Nacos 3 fuzzy watch on the SDK's own gRPC connection.

nacos-sdk-python 3.x cannot watch a whole group: a new dataId is found only by
listing. The Nacos 3 server can push group-level changes. The wire protocol,
as read in alibaba/nacos (``ConfigFuzzyWatchRequest``, ``ConfigFuzzyWatchSyncRequest``,
``ConfigFuzzyWatchChangeNotifyRequest``, ``FuzzyGroupKeyPattern``, ``GroupKey``):

- the client sends ``ConfigFuzzyWatchRequest{groupKeyPattern, watchType: WATCH,
  initializing, receivedGroupKeys}``; the pattern is ``{namespace}>>{group}>>{dataId}``,
  where group and dataId may use ``*`` (prefix, suffix, contains or all);
- the server answers with the dataIds that exist now in batches of
  ``ConfigFuzzyWatchSyncRequest{syncType, contexts: [{groupKey, changedType}]}``
  (``FUZZY_WATCH_INIT_NOTIFY``, then ``FINISH_FUZZY_WATCH_INIT_NOTIFY``);
- every later publish or delete of a matching config is pushed as
  ``ConfigFuzzyWatchChangeNotifyRequest{groupKey, changeType}``, changeType
  ``ADD_CONFIG``, ``CONFIG_CHANGED`` or ``DELETE_CONFIG``;
- a group key is ``dataId+group+tenant`` with ``+`` and ``%`` escaped as
  ``%2B`` and ``%25``.

The SDK parses server pushes through one table of wire types and dispatches
them by type to registered handlers; this module adds its three types to that
table and a handler for each, and re-sends the watch whenever the SDK
reconnects (through ``dynagent._compat.nacos``: none of this is the SDK's API).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from loguru import logger
from pydantic import BaseModel
from v2.nacos.transport.connection_event_listener import ConnectionEventListener
from v2.nacos.transport.model.rpc_request import Request
from v2.nacos.transport.model.rpc_response import Response
from v2.nacos.transport.server_request_handler import IServerRequestHandler

from dynagent._compat import nacos as sdk
from dynagent.deadlines import cancelled

PATTERN_SPLITTER = ">>"
ChangeKind = Literal["added", "changed", "deleted"]


@dataclass(frozen=True, slots=True)
class GroupChange:
    """One config of a watched group that appeared, changed or went away."""

    data_id: str
    group: str
    kind: ChangeKind


OnGroupChange = Callable[[GroupChange], None]
"""Called inside the SDK's stream reader: must return at once (queue the work)."""


class ConfigFuzzyWatchRequest(Request):  # type: ignore[misc]
    groupKeyPattern: str
    watchType: str = "WATCH"
    initializing: bool = True
    receivedGroupKeys: list[str] = []

    def get_module(self) -> str:
        return "config"

    def get_request_type(self) -> str:
        return "ConfigFuzzyWatchRequest"


class ConfigFuzzyWatchResponse(Response):  # type: ignore[misc]
    def get_response_type(self) -> str:
        return "ConfigFuzzyWatchResponse"


class _Context(BaseModel):
    groupKey: str = ""
    changedType: str = ""


class ConfigFuzzyWatchSyncRequest(Request):  # type: ignore[misc]
    groupKeyPattern: str = ""
    syncType: str = ""
    contexts: list[_Context] | None = None
    totalBatch: int = 0
    currentBatch: int = 0

    def get_module(self) -> str:
        return "config"

    def get_request_type(self) -> str:
        return "ConfigFuzzyWatchSyncRequest"


class ConfigFuzzyWatchChangeNotifyRequest(Request):  # type: ignore[misc]
    groupKey: str = ""
    changeType: str = ""

    def get_module(self) -> str:
        return "config"

    def get_request_type(self) -> str:
        return "ConfigFuzzyWatchChangeNotifyRequest"


class ConfigFuzzyWatchSyncResponse(Response):  # type: ignore[misc]
    def get_response_type(self) -> str:
        return "ConfigFuzzyWatchSyncResponse"


class ConfigFuzzyWatchChangeNotifyResponse(Response):  # type: ignore[misc]
    def get_response_type(self) -> str:
        return "ConfigFuzzyWatchChangeNotifyResponse"


WIRE_TYPES: dict[str, type[Any]] = {
    "ConfigFuzzyWatchResponse": ConfigFuzzyWatchResponse,
    "ConfigFuzzyWatchSyncRequest": ConfigFuzzyWatchSyncRequest,
    "ConfigFuzzyWatchChangeNotifyRequest": ConfigFuzzyWatchChangeNotifyRequest,
}

_KINDS: dict[str, ChangeKind] = {
    "ADD_CONFIG": "added",
    "CONFIG_CHANGED": "changed",
    "DELETE_CONFIG": "deleted",
}


def group_key_pattern(namespace: str, group: str, data_id: str = "*") -> str:
    return PATTERN_SPLITTER.join((namespace or "public", group, data_id))


def parse_group_key(key: str) -> tuple[str, str, str]:
    """``dataId+group+tenant`` (``%2B`` = ``+``, ``%25`` = ``%``) → its three parts."""
    parts = [part.replace("%2B", "+").replace("%25", "%") for part in key.split("+", maxsplit=2)]
    while len(parts) < 3:
        parts.append("")
    return parts[0], parts[1], parts[2]


class FuzzyHub(IServerRequestHandler, ConnectionEventListener):  # type: ignore[misc]
    """Every fuzzy watch on one SDK connection. The SDK keeps one handler per push type,
    so the watches share this one, which hands each push to all of them (each keeps what
    its pattern matches), and sends them all again after a reconnect."""

    def __init__(self) -> None:
        self.watches: list[FuzzyWatch] = []
        self._rpc_client: Any = None

    async def attach(self, service: Any) -> Any:
        """The SDK's gRPC client of ``service``, with this hub registered on it (once)."""
        if self._rpc_client is None:
            sdk.register_wire_types(WIRE_TYPES)
            rpc_client = await sdk.rpc_client(service)
            pushes = ("ConfigFuzzyWatchSyncRequest", "ConfigFuzzyWatchChangeNotifyRequest")
            await sdk.serve_pushes(rpc_client, pushes, self)
            self._rpc_client = rpc_client
        return self._rpc_client

    def name(self) -> str:
        return "DynagentFuzzyWatchHandler"

    async def request_reply(self, request: Any) -> Any:
        if isinstance(request, ConfigFuzzyWatchChangeNotifyRequest):
            self._received(request.groupKey, request.changeType)
            return ConfigFuzzyWatchChangeNotifyResponse()
        if isinstance(request, ConfigFuzzyWatchSyncRequest):
            for context in request.contexts or ():
                self._received(context.groupKey, context.changedType)
            return ConfigFuzzyWatchSyncResponse()
        return None

    def _received(self, group_key: str, change_type: str) -> None:
        for watch in list(self.watches):
            watch.received(group_key, change_type)

    async def on_connected(self) -> None:
        # After a reconnect the server has forgotten the watches: send them again.
        for watch in self.watches:
            watch.resend_soon()

    async def on_disconnect(self) -> None:
        return None


def matches(pattern: str, value: str) -> bool:
    """The server's own rule (``FuzzyGroupKeyPattern.itemMatched``): exact, ``*``,
    ``prefix*``, ``*suffix`` or ``*part*``."""
    if "*" not in pattern:
        return pattern == value
    core = pattern.strip("*")
    if pattern.startswith("*") and pattern.endswith("*"):
        return core in value
    return value.endswith(core) if pattern.startswith("*") else value.startswith(core)


class FuzzyWatch:
    """Watches every dataId of the groups matching ``group`` (a name or a pattern such as
    ``ai-agent-*``) for additions, changes and deletions."""

    def __init__(self, namespace: str, group: str, on_change: OnGroupChange, hub: FuzzyHub) -> None:
        self.hub = hub
        self.pattern = group_key_pattern(namespace, group)
        self.group = group
        self.on_change = on_change
        self.active = False
        """True once the server accepted the watch (a 2.x server answers no)."""
        self._rpc_client: Any = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self, service: Any) -> bool:
        """Send the watch over ``service``'s connection; False when the server refuses it."""
        self._rpc_client = await self.hub.attach(service)
        self.hub.watches.append(self)
        self.active = await self._send()
        return self.active

    async def _send(self) -> bool:
        request = ConfigFuzzyWatchRequest(groupKeyPattern=self.pattern)
        try:
            response = await sdk.send(self._rpc_client, request, 3000)
        except Exception as exc:  # the SDK raises its own and grpc's errors
            logger.warning("Nacos fuzzy watch of {} failed: {}", self.pattern, exc)
            return False
        if getattr(response, "resultCode", 200) != 200:
            logger.warning(
                "Nacos refused the fuzzy watch of {}: {}",
                self.pattern,
                getattr(response, "message", ""),
            )
            return False
        return True

    def resend_soon(self) -> None:
        if self._rpc_client is None:
            return
        task = asyncio.create_task(self._resend(), name=f"nacos-fuzzy-watch {self.pattern}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _resend(self) -> None:
        self.active = await self._send()

    def received(self, group_key: str, change_type: str) -> None:
        data_id, group, _tenant = parse_group_key(group_key)
        kind = _KINDS.get(change_type)
        if kind is None or not matches(self.group, group) or not data_id:
            return
        self.on_change(GroupChange(data_id, group, kind))

    async def stop(self) -> None:
        if self in self.hub.watches:
            self.hub.watches.remove(self)
        if self.active and self._rpc_client is not None:
            # Tell the server; patterns count against a server-wide cap (default 20).
            cancel = ConfigFuzzyWatchRequest(groupKeyPattern=self.pattern, watchType="CANCEL_WATCH")
            with contextlib.suppress(Exception):
                await sdk.send(self._rpc_client, cancel, 1000)
        await cancelled(*self._tasks)
        self._rpc_client = None
