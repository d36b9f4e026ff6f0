"""What a service is assembled from: its agent factories, its session store, its tracer,
and the start of the factories side by side."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from dynagent.config import ServiceConfig, SpringAiAlibabaConfig
from dynagent.core.tracing import RunTracer
from dynagent.exceptions import ConfigError
from dynagent.factories.base import AgentBuilderFactory
from dynagent.factories.default import DefaultAgentBuilderFactory
from dynagent.nacos.factory import NacosAgentBuilderFactory
from dynagent.nacos.prompt_factory import NacosPromptAgentBuilderFactory
from dynagent.nacos.saa_factory import SpringAiAlibabaAgentBuilderFactory
from dynagent.registry.facade import AgentRegistry
from dynagent.runtime.builder import AgentBuilder
from dynagent.sessions.base import SessionStore
from dynagent.sessions.memory import MemorySessionStore
from dynagent.sessions.sqlite import SqliteSessionStore
from dynagent.spec.agent import AgentSpec


async def start_all(
    factories: Sequence[AgentBuilderFactory],
    registry: AgentRegistry,
    started: list[AgentBuilderFactory],
) -> None:
    """Start the factories side by side: with Nacos down each waits for its connect
    timeout, and one after another they would keep the port closed that many times
    longer. ``started`` gets those that started, in their given order; the first
    failure is raised once all have settled."""
    results = await asyncio.gather(
        *(factory.start(registry) for factory in factories), return_exceptions=True
    )
    started += [f for f, r in zip(factories, results, strict=True) if r is None]
    for result in results:
        if isinstance(result, BaseException):
            raise result


def otel_tracer(environ: Mapping[str, str]) -> RunTracer | None:
    try:
        from dynagent.core.otel import OtelTracer  # the optional ``otel`` extra
    except ImportError:
        return None
    return OtelTracer.from_environ(environ)


def configured_factories(
    builder: AgentBuilder, config: ServiceConfig, specs: Sequence[AgentSpec] = ()
) -> list[AgentBuilderFactory]:
    """The factories the config asks for: the local default one always, Nacos ones on demand."""
    chosen: list[AgentBuilderFactory] = [
        DefaultAgentBuilderFactory(
            builder, directory=config.factories.default.directory, specs=specs
        )
    ]
    if config.factories.nacos:
        chosen.append(NacosAgentBuilderFactory(builder, config.nacos))
    if saa := config.factories.spring_ai_alibaba:
        network = saa if isinstance(saa, SpringAiAlibabaConfig) else SpringAiAlibabaConfig()
        chosen.append(SpringAiAlibabaAgentBuilderFactory(builder, config.nacos, network))
    prompt_only = config.factories.nacos_prompt
    if prompt_only is not None and prompt_only.directory is not None:
        chosen.append(NacosPromptAgentBuilderFactory(builder, config.nacos, prompt_only.directory))
    return chosen


def session_store(config: ServiceConfig) -> SessionStore:
    settings = config.sessions
    budget = settings.max_history_bytes
    if settings.store == "memory":
        return MemorySessionStore(budget, ttl=settings.ttl)
    if settings.store == "redis":
        try:
            from dynagent.sessions.redis import RedisSessionStore  # the optional ``redis`` extra
        except ImportError:
            raise ConfigError(
                "sessions.store: redis needs the redis package: pip install 'dynagent[redis]'"
            ) from None
        return RedisSessionStore(
            settings.url,
            key_prefix=settings.key_prefix,
            lock_ttl=settings.lock_ttl,
            history_bytes=budget,
            ttl=settings.ttl,
            timeout=settings.timeout,
        )
    return SqliteSessionStore(settings.path, budget, ttl=settings.ttl)
