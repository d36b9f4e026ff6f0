"""The ``type: mcp`` entry of an AgentSpec's ``tools``: an MCP server whose tools the
agent may call (validated through the ``mcp`` tool kind, ``mcp/kind.py``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dynagent.spec.tools import OutboundFields

MCP_NAME_PATTERN = r"^[a-zA-Z0-9][a-zA-Z0-9_-]{0,47}$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NacosMcpRef(_Strict):
    """An MCP server in the Nacos MCP registry."""

    server: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")
    """Its name in the registry."""
    version: str | None = Field(default=None, max_length=64)
    """A published version; absent: the latest."""


class McpToolSpec(_Strict, OutboundFields):
    """An MCP server whose tools the agent may call, found by exactly one of ``url``,
    ``nacos`` or ``server`` (a stdio server declared under ``mcp_servers:`` in the
    service config: a definition never makes the service start a program).

    ``allow_hosts`` / ``allow_private`` say where a ``url`` or ``nacos`` server may be
    reached (``runtime.outbound``): a loopback or private address only with
    ``allow_private``."""

    type: Literal["mcp"]
    name: str = Field(pattern=MCP_NAME_PATTERN)
    """Names this server in the agent; its tools are offered as ``{prefix}_{tool}``."""
    prefix: str | None = Field(default=None, pattern=r"^[a-zA-Z0-9_-]{0,32}$")
    """Replaces ``name`` in the offered tool names; ``""`` offers the server's own names."""
    url: str | None = Field(default=None, pattern=r"^https?://")
    """A remote server's endpoint (``${VAR}`` allowed)."""
    transport: Literal["streamable_http", "sse"] = "streamable_http"
    """How ``url`` speaks MCP."""
    headers: dict[str, str] = {}
    """Sent with every request to ``url``; values may use ``${VAR}``; never logged."""
    nacos: NacosMcpRef | None = None
    server: str | None = Field(default=None, pattern=MCP_NAME_PATTERN)
    allow: list[str] | None = None
    """Tool names (the server's own) the agent may call; absent: every tool listed."""
    timeout: float = Field(default=30, gt=0, le=600)
    """Seconds per call."""
    on_error: Literal["report", "fail"] = "report"
    """``report``: failed calls reach the model as ``TOOL_ERROR: …``; ``fail`` ends the run."""

    @model_validator(mode="after")
    def _one_server(self) -> McpToolSpec:
        given = [k for k in ("url", "nacos", "server") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of 'url', 'nacos' or 'server'")
        if self.headers and self.url is None:
            raise ValueError("'headers' go with 'url' only")
        if self.server is not None and (self.allow_hosts is not None or self.allow_private):
            raise ValueError(
                "'allow_hosts' and 'allow_private' go with 'url' or 'nacos' "
                "(a stdio server opens no connection)"
            )
        return self

    @property
    def tool_prefix(self) -> str:
        prefix = self.name if self.prefix is None else self.prefix
        return f"{prefix}_" if prefix else ""
