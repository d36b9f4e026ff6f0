"""Agents pointed at the scripted model server, built the way the service builds them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dynagent import Agent, AgentBuilder, AgentSpec, Resources, Tool, ToolRegistry, load_spec
from dynagent.interceptors import InterceptorRegistry
from dynagent.runtime.environment import EnvironmentPolicy
from dynagent.sessions.base import SessionStore

from .scripted_model import ScriptedModelServer

DEFAULT_MODEL = "gpt-main"
SYSTEM_PROMPT = "You are a test agent."


def model_fields(
    server: ScriptedModelServer, name: str = DEFAULT_MODEL, **extra: Any
) -> dict[str, Any]:
    """The ``model`` block of a spec for ``server``: provider openai, its URL, key ``test``."""
    return {
        "provider": "openai",
        "base_url": server.base_url,
        "api_key": "test",
        "name": name,
        **extra,
    }


@dataclass
class AgentFactory:
    """Builds agents whose model is the scripted server; owns the shared ``Resources``."""

    server: ScriptedModelServer
    resources: Resources = field(default_factory=Resources)
    environ: Mapping[str, str] = field(default_factory=dict)

    def spec(self, **fields: Any) -> AgentSpec:
        """A spec with test defaults; ``model`` entries are merged over the server's."""
        document: dict[str, Any] = {
            "name": "test-agent",
            "prompt": {"system": SYSTEM_PROMPT},
            **fields,
            "model": model_fields(self.server, **fields.get("model", {})),
        }
        return load_spec(document)

    def __call__(
        self,
        *,
        tools: Iterable[Tool] = (),
        spec_tools: list[Any] | None = None,
        sessions: SessionStore | None = None,
        interceptor_registry: InterceptorRegistry | None = None,
        **fields: Any,
    ) -> Agent:
        """Build an agent of a spec with ``fields``.

        Code ``tools`` are registered; the spec lists ``spec_tools`` (entries as in a
        document), by default the names of the code tools.
        """
        code_tools = list(tools)
        registry = ToolRegistry.default({tool.name: tool for tool in code_tools})
        entries = [tool.name for tool in code_tools] if spec_tools is None else spec_tools
        builder = AgentBuilder(
            tools=registry,
            interceptors=interceptor_registry or InterceptorRegistry.default(),
            resources=self.resources,
            sessions=sessions,
            environ=self.environ,
            # Any name but the service's secrets: tests hand in only what they mean to.
            environment=EnvironmentPolicy(allow=("*",)),
        )
        return builder.build(self.spec(tools=entries, **fields))

    async def aclose(self) -> None:
        await self.resources.aclose()
