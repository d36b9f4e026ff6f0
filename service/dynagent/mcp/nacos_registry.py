"""The Nacos MCP registry, through nacos-sdk-python's ``NacosAIService``.

Checked against the real Nacos 3.1 server of ``scripts/nacos.sh``: it has the MCP
registry (``release_mcp_server``, ``get_mcp_server``, ``subscribe_mcp_server``; the
admin API ``/nacos/v3/admin/ai/mcp``). Endpoints are instances of the naming
service ``{name}::{version}`` in group ``mcp-endpoints``; the SDK re-reads a
subscribed server about every 10 s and calls back when anything in it changed.
The client connects on first use, so a service whose agents use no registry
server never opens it.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from v2.nacos.ai.model.ai_param import GetMcpServerParam, SubscribeMcpServerParam
from v2.nacos.ai.nacos_ai_service import NacosAIService

from dynagent.config import NacosConfig
from dynagent.mcp._connection import RemoteTool
from dynagent.mcp._registry import RegistryEntry
from dynagent.nacos._sdk_config import CONNECT_TIMEOUT, sdk_config

PROTOCOLS = {"mcp-streamable": "streamable_http", "mcp-sse": "sse"}


class NacosMcpDirectory:
    """``McpDirectory`` over one Nacos server (``nacos:`` of the service config)."""

    def __init__(self, settings: NacosConfig) -> None:
        self.settings = settings
        self._service: Any = None
        self._lock = asyncio.Lock()
        self._work_dir: Path | None = None
        self._callbacks: list[tuple[SubscribeMcpServerParam, Any]] = []

    async def _ai(self) -> Any:
        async with self._lock:
            if self._service is None:
                folder = await asyncio.to_thread(tempfile.mkdtemp, prefix="dynagent-nacos-mcp-")
                self._work_dir = Path(folder)
                builder = sdk_config(self.settings, self._work_dir)
                async with asyncio.timeout(CONNECT_TIMEOUT * 2):
                    self._service = await NacosAIService.create_ai_service(builder.build())
            return self._service

    async def get(self, server: str, version: str | None) -> RegistryEntry:
        ai = await self._ai()
        detail = await ai.get_mcp_server(GetMcpServerParam(mcp_name=server, version=version))
        if detail is None:
            raise LookupError(f"no MCP server {server!r} in the Nacos MCP registry")
        return registry_entry(detail)

    async def subscribe(
        self, server: str, version: str | None, on_change: Callable[[RegistryEntry], None]
    ) -> None:
        ai = await self._ai()

        async def changed(_id: str, _namespace: str, _name: str, detail: Any) -> None:
            try:
                entry = registry_entry(detail)
            except ValueError:
                return  # a version this service cannot use; the last good one stays
            on_change(entry)

        param = SubscribeMcpServerParam(
            mcp_name=server, version=version, subscribe_callback=changed
        )
        await ai.subscribe_mcp_server(param)
        self._callbacks.append((param, changed))

    async def aclose(self) -> None:
        service, self._service = self._service, None
        if service is not None:
            # Shutting down: the SDK may fail while its server is gone; nothing left to tell.
            for param, _ in self._callbacks:
                with contextlib.suppress(Exception):
                    await service.unsubscribe_mcp_server(param)
            with contextlib.suppress(Exception):
                await service.shutdown()
        if self._work_dir is not None:
            await asyncio.to_thread(shutil.rmtree, self._work_dir, ignore_errors=True)


def registry_entry(detail: Any) -> RegistryEntry:
    """Our view of a ``McpServerDetailInfo``; ``ValueError`` for a protocol we cannot call."""
    protocol = detail.frontProtocol or detail.protocol or ""
    transport = PROTOCOLS.get(protocol) or PROTOCOLS.get(detail.protocol or "")
    if transport is None:
        raise ValueError(
            f"MCP server {detail.name!r} speaks {protocol!r}; only mcp-streamable and mcp-sse "
            "servers can be called"
        )
    remote = detail.remoteServerConfig
    export_path = (remote.exportPath if remote else None) or ""
    endpoints = tuple(
        f"{'https' if (e.protocol or '') == 'https' else 'http'}://{e.address}:{e.port}"
        f"{e.path or export_path}"
        for e in (detail.frontendEndpoints or detail.backendEndpoints or [])
        if e.address and e.port
    )
    spec = detail.toolSpec
    tools = tuple(
        RemoteTool(t.name, t.description or "", dict(t.inputSchema or {}))
        for t in (spec.tools if spec and spec.tools else [])
        if t.name
    )
    meta = spec.toolsMeta if spec and spec.toolsMeta else {}
    disabled = frozenset(name for name, m in meta.items() if m is not None and m.enabled is False)
    if detail.enabled is False:  # the whole server switched off: offer none of its tools
        disabled = frozenset(t.name for t in tools)
    version = detail.versionDetail.version if detail.versionDetail else detail.version or ""
    return RegistryEntry(
        name=detail.name or "",
        version=version or "",
        transport=transport,  # type: ignore[arg-type]
        endpoints=tuple(sorted(endpoints)),
        tools=tools,
        disabled=disabled,
    )
