"""The full-agent factory: whole AgentSpecs from Nacos, watched.

Layout: namespace and group from the config (default group ``AGENTS``), one
dataId per agent, ``{name}.agent.yaml`` (or ``.agent.yml`` / ``.agent.json``).
Local tools and interceptors registered in code stay available to remote
specs: they resolve against the same registries as local ones.
"""

from __future__ import annotations

from dataclasses import replace

from dynagent.config import NacosConfig
from dynagent.evals.spec import SUITE_SUFFIXES
from dynagent.factories.base import DocumentApplier, document_name, render_spec
from dynagent.nacos.client import NacosClient, content_md5
from dynagent.nacos.snapshot import Snapshot
from dynagent.nacos.source import NacosSource
from dynagent.registry.facade import AgentRegistry
from dynagent.runtime.agent import Agent, SourceInfo, Variant
from dynagent.runtime.builder import AgentBuilder
from dynagent.sources.base import Document
from dynagent.spec.agent import AgentSpec

AGENT_SUFFIXES = (".agent.yaml", ".agent.yml", ".agent.json")
CANARY_SUFFIXES = (".canary.yaml", ".canary.yml", ".canary.json")


def is_agent_data_id(data_id: str) -> bool:
    """An agent, its canary, or its evaluation suite (``{name}.evals.yaml``)."""
    return data_id.endswith(AGENT_SUFFIXES + CANARY_SUFFIXES + SUITE_SUFFIXES)


def agent_data_id(name: str) -> str:
    return f"{name}.agent.yaml"


class NacosAgentBuilderFactory:
    name = "nacos"

    def __init__(self, builder: AgentBuilder, settings: NacosConfig) -> None:
        self._template = builder
        self.settings = settings
        self.source: NacosSource | None = None

    def builder(self) -> AgentBuilder:
        return replace(self._template, factory=self.name)

    async def start(self, registry: AgentRegistry) -> None:
        settings = self.settings
        namespace = settings.namespace or "public"
        snapshot = Snapshot(settings.snapshot_dir / namespace / settings.group)
        source_name = f"nacos:{namespace}/{settings.group}"

        self.source = NacosSource(
            NacosClient(settings),
            settings.group,
            accepts=is_agent_data_id,
            snapshot=snapshot,
            poll_seconds=settings.poll_seconds,
            on_health=lambda reason: registry.readiness.set_degraded(source_name, reason),
            on_stale=lambda: registry.readiness.refused_stale(source_name),
            delete_grace_seconds=settings.delete_grace_seconds,
        )
        applier = DocumentApplier(
            registry, self._build, rebuilds=self._template.rebuilds, siblings=self.source.keys
        )
        await self.source.start(applier.apply)

    async def _build(self, spec: AgentSpec, document: Document) -> Agent:
        builder = self.builder()
        await builder.prepare(spec)
        return builder.build(spec, source=document.info)

    async def write(
        self, name: str, variant: Variant, spec: AgentSpec | None, current: SourceInfo | None
    ) -> None:
        assert self.source is not None
        data_id = document_name(name, variant, current, "agent.yaml")
        text = render_spec(spec, data_id)
        if text is None:
            await self.source.client.remove(data_id, self.settings.group)
        else:
            kind = "json" if data_id.endswith(".json") else "yaml"
            await self.source.client.publish(data_id, self.settings.group, text, kind)

    async def read(self, name: str, variant: Variant, current: SourceInfo | None) -> str | None:
        assert self.source is not None
        data_id = document_name(name, variant, current, "agent.yaml")
        return await self.source.client.get(data_id, self.settings.group)

    async def replace(
        self, name: str, variant: Variant, current: SourceInfo | None, text: str, expected: str
    ) -> bool:
        assert self.source is not None
        data_id = document_name(name, variant, current, "agent.yaml")
        kind = "json" if data_id.endswith(".json") else "yaml"
        md5 = content_md5(expected)
        return await self.source.client.publish_if(data_id, self.settings.group, text, kind, md5)

    async def stop(self) -> None:
        if self.source is not None:
            await self.source.stop()
