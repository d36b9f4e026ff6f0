"""AgentBuilder: turns a validated ``AgentSpec`` into an immutable ``Agent``.

Resolves tool and interceptor names against registries (a definition never
names code), ``${VAR}`` from the environment, and the model endpoint.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

from ._templates import MissingVariable, expand_env
from .agent import Agent, SourceInfo
from .exceptions import ConfigError, FieldIssue
from .interceptors.base import Interceptor, InterceptorChain
from .interceptors.registry import InterceptorRegistry
from .models.base import Model
from .models.breaker import BreakerPolicy
from .models.fallback import FallbackModel
from .models.openai import OpenAIModel
from .models.test import TestModel
from .resources import Resources
from .sessions.base import SessionStore
from .spec import AgentSpec, FallbackModelSpec, HttpToolSpec, ToolRef
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
            )
        except ConfigError as exc:
            raise ConfigError(
                exc.reason, source=source.location, agent=spec.name, issues=exc.issues
            ) from None

    def _env(self, text: str, path: str) -> str:
        try:
            return expand_env(text, self.environ)
        except MissingVariable as exc:
            raise ConfigError(
                "missing environment variable",
                issues=[FieldIssue(path, f"environment variable {exc.name} is not set")],
            ) from None

    def _url(self, text: str, path: str) -> str:
        url = self._env(text, path)
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
        name = self._env(model.name, f"{path}.name")
        if provider == "test":
            return TestModel(name)
        base_url = self._url(model.base_url, f"{path}.base_url")
        api_key = self._env(model.api_key, f"{path}.api_key")
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
        for index, entry in enumerate(spec.tools):
            tool = self._tool(entry, f"tools.{index}")
            tools[tool.name] = tool
        return tools

    def _tool(self, entry: str | ToolRef | HttpToolSpec, path: str) -> Tool:
        if isinstance(entry, HttpToolSpec):
            headers = {
                name: self._env(value, f"{path}.headers.{name}")
                for name, value in entry.headers.items()
            }
            made = http_tool(entry, headers, self.resources)
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
