"""AgentBuilder: turns a validated ``AgentSpec`` into an immutable ``Agent``.

Resolves tool and interceptor names against registries (a definition never
names code), ``${VAR}`` from the environment, and the model endpoint.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

from .agent import Agent, SourceInfo
from .environment import EnvironmentPolicy, expand
from .exceptions import ConfigError, FieldIssue
from .interceptors.base import Interceptor, InterceptorChain
from .interceptors.registry import InterceptorRegistry
from .masking import SecretValues
from .models.base import Model
from .models.breaker import BreakerPolicy
from .models.fallback import FallbackModel
from .models.openai import OpenAIModel
from .models.test import TestModel
from .resources import Resources
from .sessions.base import SessionStore
from .spec import AgentSpec, FallbackModelSpec, HttpToolSpec, ToolRef, tool_entry_name
from .tools.base import Tool
from .tools.http import http_tool
from .tools.registry import ToolRegistry


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
            return Agent(
                spec=spec,
                model=self._model(spec),
                tools=self._tools(spec, interceptors),
                chain=InterceptorChain(interceptors),
                system_prompt=system_prompt if system_prompt is not None else spec.prompt.system,
                revision=revision or spec.revision,
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
        )

    def _tools(self, spec: AgentSpec, interceptors: tuple[Interceptor, ...]) -> dict[str, Tool]:
        tools: dict[str, Tool] = {}
        for interceptor in interceptors:
            tools.update((tool.name, tool) for tool in interceptor.tools)
        for entry in spec.tools:
            tool = self._tool(entry, f"tools[{tool_entry_name(entry)}]")
            tools[tool.name] = tool
        return tools

    def _tool(self, entry: str | ToolRef | HttpToolSpec, path: str) -> Tool:
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
        if isinstance(entry, ToolRef):
            tool = tool.with_options(timeout=entry.timeout, on_error=entry.on_error)
            if entry.shadow_safe is not None:
                tool = replace(tool, shadow_safe=entry.shadow_safe)
        return tool
