"""AgentBuilder: turns a validated ``AgentSpec`` into an immutable ``Agent``.

Resolves tool and interceptor names against registries (a definition never
names code), ``${VAR}`` from the environment, and the model endpoint.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

from dynagent.a2a.client import remote_agent_tool
from dynagent.exceptions import ConfigError, FieldIssue
from dynagent.interceptors.base import Interceptor, InterceptorChain
from dynagent.interceptors.registry import InterceptorRegistry
from dynagent.masking import SecretValues
from dynagent.mcp._pool import McpTarget
from dynagent.mcp.tools import McpServers, fingerprint, mcp_tools
from dynagent.models.base import Model
from dynagent.models.breaker import BreakerPolicy
from dynagent.models.fallback import FallbackModel
from dynagent.models.openai import OpenAIModel
from dynagent.models.test import TestModel
from dynagent.runtime.agent import Agent, SourceInfo
from dynagent.runtime.environment import EnvironmentPolicy, expand
from dynagent.runtime.resources import Resources
from dynagent.sessions.base import SessionStore
from dynagent.spec.agent import (
    AgentSpec,
    FallbackModelSpec,
    HttpToolSpec,
    ToolSpec,
    tool_entry_name,
)
from dynagent.spec.tools import A2aRef, AgentToolSpec, McpToolSpec
from dynagent.tools.agent import AgentDirectory, agent_tool
from dynagent.tools.base import Tool
from dynagent.tools.http import http_tool
from dynagent.tools.registry import ToolRegistry


@dataclass
class AgentBuilder:
    """Builds agents; cheap to create, holds no per-agent state."""

    tools: ToolRegistry = field(default_factory=ToolRegistry.default)
    interceptors: InterceptorRegistry = field(default_factory=InterceptorRegistry.default)
    resources: Resources = field(default_factory=Resources)
    sessions: SessionStore | None = None
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    factory: str = "default"
    environment: EnvironmentPolicy = field(default_factory=EnvironmentPolicy)
    """Which ``${VAR}`` definitions may read (the service config's ``environment``)."""
    secrets: SecretValues = field(default_factory=SecretValues)
    """Credentials taken from the environment join these; built agents mask them."""
    mcp: McpServers | None = None
    """MCP servers for ``type: mcp`` entries (the service always has them)."""
    agents: AgentDirectory | None = None
    """Where ``type: agent`` entries find their agent at call time (the registry)."""
    a2a: Callable[[str], Awaitable[str]] | None = None
    """Where ``type: agent`` entries with ``a2a: {nacos: NAME}`` find the agent's address
    at call time (the Nacos A2A registry)."""
    offline: bool = False
    """Check MCP and agent tool entries by their shape only, reaching no server
    (``dynagent validate`` / ``publish``): their tools are left out of the agent."""

    @property
    def rebuilds(self) -> list[Callable[[frozenset[str]], None]] | None:
        """Where factories listen for agents to build again: MCP servers they use changed."""
        return self.mcp.listeners if self.mcp is not None else None

    async def prepare(self, spec: AgentSpec) -> None:
        """Open the MCP sessions ``spec`` needs before ``build`` (which cannot wait)."""
        if self.mcp is None:
            return
        targets = [
            self._mcp_target(entry, _entry_path(entry))
            for entry in spec.tools
            if isinstance(entry, McpToolSpec)
        ]
        await self.mcp.prepare(spec.name, targets)

    def build(
        self,
        spec: AgentSpec,
        *,
        source: SourceInfo | None = None,
        system_prompt: str | None = None,
        revision: str | None = None,
    ) -> Agent:
        """Build ``spec``; ``system_prompt`` overrides the spec's (remote prompts).

        Raises ``ConfigError`` naming the agent and the field at fault.
        """
        source = source or SourceInfo("code")
        try:
            interceptors = tuple(
                self.interceptors.create(ref, i) for i, ref in enumerate(spec.interceptors)
            )
            tools, remote = self._tools(spec, interceptors)
            revision = revision or spec.revision
            if remote:  # what the servers offer is part of what serves
                mixed = f"{revision}:{fingerprint(remote)}".encode()
                revision = hashlib.sha256(mixed).hexdigest()[:12]
            return Agent(
                spec=spec,
                model=self._model(spec),
                tools=tools,
                chain=InterceptorChain(interceptors),
                system_prompt=system_prompt if system_prompt is not None else spec.prompt.system,
                revision=revision,
                sessions=self.sessions,
                source=source,
                factory=self.factory,
                secrets=self.secrets,
            )
        except ConfigError as exc:
            raise ConfigError(
                exc.reason, source=source.location, agent=spec.name, issues=exc.issues
            ) from None

    def expand_env(self, text: str, path: str, *, secret: bool = False) -> str:
        """``${VAR}`` filled in for the definition's field at ``path``: the one expansion
        every field goes through (model, HTTP and MCP tool headers, …). Only names the
        service allows; ``secret`` (a credential) masks the values from then on.
        Raises ``ConfigError`` naming the field and the variable."""
        return expand(text, path, self.environ, self.environment, self.secrets, secret=secret)

    _env = expand_env
    """The name code written before ``expand_env`` calls (headers are found by their path)."""

    def _url(self, text: str, path: str) -> str:
        url = self.expand_env(text, path)
        try:
            parts = urlsplit(url)
            valid = parts.scheme in ("http", "https") and bool(parts.hostname)
            parts.port  # noqa: B018 - raises ValueError for a port that is not a number
        except ValueError:
            valid = False
        if not valid:
            # The value itself is left out: ${VAR} may have put a secret in it.
            raise ConfigError(
                "invalid model endpoint",
                issues=[FieldIssue(path, "not an http(s) URL once ${VAR} are filled in")],
            )
        return url

    def _model(self, spec: AgentSpec) -> Model:
        primary = self._endpoint(spec.model, "model")
        if spec.model.fallback is None:
            return primary
        return FallbackModel(primary, self._endpoint(spec.model.fallback, "model.fallback"))

    def _endpoint(self, model: FallbackModelSpec, path: str) -> Model:
        provider = model.provider
        if provider == "auto":
            configured = self.environ.get("OPENAI_BASE_URL") or self.environ.get("OPENAI_API_KEY")
            provider = "openai" if configured else "test"
        name = self.expand_env(model.name, f"{path}.name")
        if provider == "test":
            return TestModel(name)
        base_url = self._url(model.base_url, f"{path}.base_url")
        api_key = self.expand_env(model.api_key, f"{path}.api_key", secret=True)
        pool = self.resources.model_clients
        breaker = model.circuit_breaker
        return OpenAIModel(
            pool.get(base_url, api_key),
            name,
            model.settings,
            timeout=model.timeout,
            retries=model.retries,
            structured_output=model.structured_output,
            breaker=pool.breaker(base_url, name) if breaker.enabled else None,
            breaker_policy=BreakerPolicy(breaker.failures, breaker.cooldown),
            max_chunks=model.max_answer_chunks,
            max_chars=model.max_answer_chars,
        )

    def _tools(
        self, spec: AgentSpec, interceptors: tuple[Interceptor, ...]
    ) -> tuple[dict[str, Tool], list[Tool]]:
        """The agent's tools by name, and those of them its MCP servers offer."""
        tools: dict[str, Tool] = {}
        remote: list[Tool] = []
        for interceptor in interceptors:
            tools.update((tool.name, tool) for tool in interceptor.tools)
        for entry in spec.tools:
            path = _entry_path(entry)
            if self.offline and isinstance(entry, McpToolSpec | AgentToolSpec):
                continue
            if isinstance(entry, McpToolSpec):
                offered = self._mcp_tools(spec, entry, path)
                remote.extend(offered)
            elif isinstance(entry, AgentToolSpec):
                offered = [self._agent_tool(spec, entry, path)]
            else:
                offered = [self._tool(entry, path)]
            _add_tools(tools, offered, path)
        return tools, remote

    def _mcp_target(self, entry: McpToolSpec, path: str) -> McpTarget:
        if self.mcp is None:
            raise ConfigError(
                "MCP tools are not available here",
                issues=[FieldIssue(path, "this builder has no MCP servers (McpServers)")],
            )
        # The URL may carry a key in its query: expanded as a credential (masked).
        url = "" if entry.url is None else self.expand_env(entry.url, f"{path}.url", secret=True)
        headers = {
            name: self.expand_env(value, f"{path}.headers.{name}", secret=True)
            for name, value in entry.headers.items()
        }
        return self.mcp.target(entry, url, headers, path)

    def _mcp_tools(self, spec: AgentSpec, entry: McpToolSpec, path: str) -> list[Tool]:
        target = self._mcp_target(entry, path)
        assert self.mcp is not None
        self.mcp.pool.use(spec.name, [target])  # a refused build is retried when it connects
        return mcp_tools(self.mcp, entry, target, path)

    def _agent_tool(self, spec: AgentSpec, entry: AgentToolSpec, path: str) -> Tool:
        if entry.a2a is not None:
            return self._remote_agent_tool(entry, entry.a2a, path)
        if self.agents is None:
            raise ConfigError(
                "agent tools are not available here",
                issues=[FieldIssue(path, "this builder has no agent registry to call through")],
            )
        return agent_tool(entry, spec, self.agents, path)

    def _remote_agent_tool(self, entry: AgentToolSpec, target: A2aRef, path: str) -> Tool:
        """A remote A2A agent, its address resolved on every call (``tools/a2a.py``)."""
        lookup, url, name = self.a2a, self.expand_env(target.url or "", f"{path}.a2a.url"), ""
        if target.nacos is not None:
            if lookup is None:
                raise ConfigError(
                    "remote agents by Nacos name are not available here",
                    issues=[FieldIssue(f"{path}.a2a.nacos", "no Nacos A2A registry to ask")],
                )
            name = target.nacos

        async def resolve() -> str:
            return await lookup(name) if name and lookup is not None else url

        # Like an MCP server's url, the address is the definition's own: private allowed.
        session = self.resources.http_session(allow_private=True)
        headers = {  # credentials of the remote agent: masked from now on
            name: self.expand_env(value, f"{path}.headers.{name}", secret=True)
            for name, value in entry.headers.items()
        }
        tool = remote_agent_tool(
            entry.name,
            entry.description,
            resolve,
            session,
            headers=headers,
            timeout=entry.timeout or 60.0,
        )
        return tool.with_options(timeout=None, on_error=entry.on_error)

    def _tool(self, entry: ToolSpec, path: str) -> Tool:
        if isinstance(entry, HttpToolSpec):
            headers = {
                name: self.expand_env(value, f"{path}.headers.{name}", secret=True)
                for name, value in entry.headers.items()
            }
            try:
                made = http_tool(entry, headers, self.resources)
            except ValueError as exc:
                raise ConfigError(
                    "invalid HTTP tool URL", issues=[FieldIssue(f"{path}.url", str(exc))]
                ) from None
            return replace(made, shadow_safe=entry.shadow_safe)
        name = entry if isinstance(entry, str) else entry.name
        tool = self.tools.get(name)
        if tool is None:
            known = ", ".join(self.tools.names()) or "none"
            raise ConfigError(
                "unknown tool",
                issues=[FieldIssue(path, f"no tool named {name!r} is registered; known: {known}")],
            )
        if not isinstance(entry, str):
            tool = tool.with_options(timeout=entry.timeout, on_error=entry.on_error)
            shadow_safe = getattr(entry, "shadow_safe", None)
            if shadow_safe is not None:
                tool = replace(tool, shadow_safe=shadow_safe)
        return tool


def _entry_path(entry: ToolSpec) -> str:
    """Where an entry's problems are reported: ``tools[name]``, its own entry."""
    return f"tools[{tool_entry_name(entry)}]"


def _add_tools(tools: dict[str, Tool], offered: list[Tool], path: str) -> None:
    """Add ``offered``; a name an earlier entry (or interceptor) offers is a build error
    rather than one tool silently replacing another (MCP tools are named by servers)."""
    for tool in offered:
        if tool.name in tools:
            raise ConfigError(
                "tool name offered twice",
                issues=[FieldIssue(path, f"{tool.name!r} is already a tool of this agent")],
            )
        tools[tool.name] = tool
