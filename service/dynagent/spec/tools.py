"""The tool entries of an AgentSpec that reach outside the process: MCP servers and
other agents. Kept beside ``spec.py`` so the union there stays one small edit."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

MCP_NAME_PATTERN = r"^[a-zA-Z0-9][a-zA-Z0-9_-]{0,47}$"
AGENT_NAME_PATTERN = r"^[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NacosMcpRef(_Strict):
    """An MCP server in the Nacos MCP registry."""

    server: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")
    """Its name in the registry."""
    version: str | None = Field(default=None, max_length=64)
    """A published version; absent: the latest."""


class McpToolSpec(_Strict):
    """An MCP server whose tools the agent may call, found by exactly one of ``url``,
    ``nacos`` or ``server`` (a stdio server declared under ``mcp_servers:`` in the
    service config: a definition never makes the service start a program)."""

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
        return self

    @property
    def tool_prefix(self) -> str:
        prefix = self.name if self.prefix is None else self.prefix
        return f"{prefix}_" if prefix else ""


class A2aRef(_Strict):
    """A remote A2A agent: by its name in the Nacos A2A registry, or by URL; resolved
    when the tool is called."""

    nacos: str | None = Field(default=None, min_length=1, max_length=128)
    """Its name in the Nacos A2A registry: its latest card there says where it answers."""
    url: str | None = Field(default=None, pattern=r"^https?://")
    """Its JSON-RPC endpoint, or its card (a URL ending ``/.well-known/agent-card.json``,
    fetched on every call) that says where it answers (``${VAR}`` allowed)."""

    @model_validator(mode="after")
    def _one_target(self) -> A2aRef:
        if (self.nacos is None) == (self.url is None):
            raise ValueError("give exactly one of 'nacos' or 'url'")
        return self


class AgentToolSpec(_Strict):
    """Another agent of this service, offered as a tool taking ``{input: string}``.

    Routed through the registry at call time (stable or canary, current revision)."""

    type: Literal["agent"]
    name: str = Field(pattern=AGENT_NAME_PATTERN)
    """The agent to call; also the tool's name."""
    description: str = ""
    """What the model sees; absent: the agent's own description."""
    timeout: float | None = Field(default=None, gt=0, le=3600)
    """Seconds per call; absent: the called agent's ``limits.timeout``."""
    on_error: Literal["report", "fail"] = "report"
    a2a: A2aRef | None = None
    """A remote agent over A2A instead of one of this service's agents."""
    headers: dict[str, str] = {}
    """Sent to the remote agent (``a2a``) with every request, its card's and its messages'
    (``Authorization: "Bearer ${TOKEN}"``); values may use ``${VAR}``; never logged."""

    @model_validator(mode="after")
    def _headers_go_remote(self) -> AgentToolSpec:
        if self.headers and self.a2a is None:
            raise ValueError("'headers' go with 'a2a' only (a remote agent)")
        return self
