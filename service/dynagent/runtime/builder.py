"""AgentBuilder: turns a validated ``AgentSpec`` into an immutable ``Agent``.

Resolves interceptor names against their registry (a definition never names
code), each ``tools`` entry through the tool kind of its ``type`` (``ToolKinds``:
named tools, HTTP, MCP, agents, plugins), ``${VAR}`` from the environment, and the
model endpoint.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlsplit

from dynagent.exceptions import ConfigError, FieldIssue
from dynagent.interceptors.base import Interceptor, InterceptorChain
from dynagent.interceptors.registry import InterceptorRegistry
from dynagent.masking import SecretValues
from dynagent.models.base import Model
from dynagent.models.breaker import BreakerPolicy
from dynagent.models.fallback import FallbackModel, priced_names
from dynagent.models.openai import OpenAIModel
from dynagent.models.prices import Prices
from dynagent.models.test import TestModel
from dynagent.runtime.agent import Agent, SourceInfo
from dynagent.runtime.environment import EnvironmentPolicy, expand
from dynagent.runtime.resources import Resources
from dynagent.sessions.base import SessionStore
from dynagent.spec.agent import AgentSpec, FallbackModelSpec
from dynagent.spec.tools import ToolSpec, entry_type, tool_entry_name
from dynagent.tools.agent import AgentDirectory
from dynagent.tools.base import Tool
from dynagent.tools.kinds import KindContext, ToolKinds, fingerprint
from dynagent.tools.registry import ToolRegistry

_COLLECTING: ContextVar[set[str] | None] = ContextVar("dynagent_build_secrets", default=None)
"""The secret values the build under way has expanded so far (its definition's own)."""


class _Owned:
    """Where ``expand`` puts the secrets it finds: the build's own set while a build runs;
    otherwise (a kind or a test expanding on its own) values owned by no definition."""

    def __init__(self, secrets: SecretValues) -> None:
        self._secrets = secrets

    def add(self, values: Iterable[str]) -> None:
        collecting = _COLLECTING.get()
        if collecting is not None:
            collecting.update(v for v in values if v)
        else:
            self._secrets.own("", self._secrets.owned("") | {v for v in values if v})


@contextmanager
def _collecting() -> Iterator[set[str]]:
    collected: set[str] = set()
    token = _COLLECTING.set(collected)
    try:
        yield collected
    finally:
        _COLLECTING.reset(token)


class Servers(Protocol):
    """A feature whose servers decide what tools agents are offered (the MCP servers):
    it tells its listeners which agents to build again when those change."""

    @property
    def listeners(self) -> list[Callable[[frozenset[str]], None]]: ...


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
    mcp: Servers | None = None
    """MCP servers for ``type: mcp`` entries (the service always has them); the ``mcp``
    kind finds them as a feature, so this layer never names their type."""
    agents: AgentDirectory | None = None
    """Where ``type: agent`` entries find their agent at call time (the registry)."""
    a2a: Callable[[str], Awaitable[str]] | None = None
    """Where ``type: agent`` entries with ``a2a: {nacos: NAME}`` find the agent's address
    at call time (the Nacos A2A registry)."""
    offline: bool = False
    """Check MCP and agent tool entries (``online`` kinds) by their shape only, reaching
    no server (``dynagent validate`` / ``publish``): their tools are left out of the agent."""
    kinds: ToolKinds = field(default_factory=ToolKinds.default)
    """What builds each ``tools`` entry, by its ``type`` (``tools/kinds.py``)."""
    features: tuple[object, ...] = ()
    """Service objects third-party kinds find with ``KindContext.feature``."""
    prices: Prices = field(default_factory=Prices)
    """The service config's ``models.prices``, handed to every agent it builds."""

    @property
    def rebuilds(self) -> list[Callable[[frozenset[str]], None]] | None:
        """Where factories listen for agents to build again: MCP servers they use changed."""
        return self.mcp.listeners if self.mcp is not None else None

    async def prepare(self, spec: AgentSpec) -> None:
        """Await what ``spec``'s tool kinds need before ``build`` (which cannot wait):
        the MCP sessions it uses."""
        context = self.context()
        with _collecting():  # the build that follows takes them again, for its agent
            for entry in spec.tools:
                path = _entry_path(entry)
                kind = self.kinds.of(entry, path)
                if not (self.offline and kind.online):
                    await kind.prepare(context, spec, entry, path)

    def uses_servers(self, spec: AgentSpec) -> bool:
        """Whether tools of ``spec`` are offered by servers (``remote`` kinds): a build
        refused may then be one waiting for a server."""
        kinds = (self.kinds.get(entry_type(entry)) for entry in spec.tools)
        return any(kind is not None and kind.remote for kind in kinds)

    def context(self) -> KindContext:
        """What tool kinds get of this builder."""
        features = (self.mcp, *self.features) if self.mcp is not None else self.features
        return KindContext(
            expand_env=self.expand_env,
            resources=self.resources,
            tools=self.tools,
            secrets=self.secrets,
            agents=self.agents,
            a2a=self.a2a,
            features=features,
        )

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
            with _collecting() as collected:
                interceptors = tuple(
                    self.interceptors.create(ref, i) for i, ref in enumerate(spec.interceptors)
                )
                tools, remote = self._tools(spec, interceptors)
                model = self._model(spec)
                self._check_priced(spec, model)
        except ConfigError as exc:
            raise ConfigError(
                exc.reason, source=source.location, agent=spec.name, issues=exc.issues
            ) from None
        revision = revision or spec.revision
        if remote:  # what the servers offer is part of what serves
            mixed = f"{revision}:{fingerprint(remote)}".encode()
            revision = hashlib.sha256(mixed).hexdigest()[:12]
        own = frozenset(collected)
        # Masked from now on; the service narrows them to the agents it serves (``own``
        # again on each swap, ``forget`` when the name goes).
        self.secrets.own(spec.name, self.secrets.owned(spec.name) | own)
        return Agent(
            spec=spec,
            model=model,
            tools=tools,
            chain=InterceptorChain(interceptors),
            system_prompt=system_prompt if system_prompt is not None else spec.prompt.system,
            revision=revision,
            sessions=self.sessions,
            source=source,
            factory=self.factory,
            secrets=self.secrets.scoped(own),
            own_secrets=own,
            prices=self.prices,
        )

    def expand_env(self, text: str, path: str, *, secret: bool = False) -> str:
        """``${VAR}`` filled in for the definition's field at ``path``: the one expansion
        every field goes through (model, HTTP and MCP tool headers, …). Only names the
        service allows; ``secret`` (a credential) masks the values from then on.
        Raises ``ConfigError`` naming the field and the variable."""
        sink = _Owned(self.secrets)
        return expand(text, path, self.environ, self.environment, sink, secret=secret)

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

    def _check_priced(self, spec: AgentSpec, model: Model) -> None:
        """A cost ceiling on a model without a price could never act: refused. Offline
        checks (``dynagent validate``) know no service's prices and leave it to the build."""
        if spec.limits.max_cost_usd is None or self.offline:
            return
        unpriced = [name for name in priced_names(model) if name not in self.prices]
        if unpriced:
            listed = ", ".join(sorted(self.prices.by_model)) or "none"
            raise ConfigError(
                "limits.max_cost_usd needs a price for every model the agent uses",
                issues=[
                    FieldIssue(
                        "limits.max_cost_usd",
                        f"model {', '.join(map(repr, unpriced))} has no price in the service "
                        f"config's models.prices (priced: {listed}); add one, or remove the "
                        "limit",
                    )
                ],
            )

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
        """The agent's tools by name, and those of them servers offer (``remote``)."""
        tools: dict[str, Tool] = {}
        remote: list[Tool] = []
        for interceptor in interceptors:
            tools.update((tool.name, tool) for tool in interceptor.tools)
        context = self.context()
        for entry in spec.tools:
            path = _entry_path(entry)
            kind = self.kinds.of(entry, path)
            if self.offline and kind.online:
                kind.check(context, spec, entry, path)
                continue
            offered = kind.build(context, spec, entry, path)
            if kind.remote:
                remote.extend(offered)
            _add_tools(tools, offered, path)
        return tools, remote


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
