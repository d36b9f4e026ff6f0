"""The local default factory: specs from a watched folder, and specs given in code."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from ..agent import Agent, SourceInfo, Variant
from ..builder import AgentBuilder
from ..exceptions import Conflict
from ..registry import AgentRegistry
from ..sources.base import Document
from ..sources.files import FileSource
from ..spec import AgentSpec
from .base import DocumentApplier, document_name, render_spec


class DefaultAgentBuilderFactory:
    name = "default"

    def __init__(
        self,
        builder: AgentBuilder,
        *,
        directory: Path | None = None,
        specs: Sequence[AgentSpec] = (),
    ) -> None:
        self._template = builder
        self.directory = directory
        self.specs = tuple(specs)
        self._source: FileSource | None = None

    def builder(self) -> AgentBuilder:
        return replace(self._template, factory=self.name)

    async def start(self, registry: AgentRegistry) -> None:
        builder = self.builder()
        for spec in self.specs:
            await builder.prepare(spec)
            registry.put(builder.build(spec, source=SourceInfo("code")))
        if self.directory is not None:
            applier = DocumentApplier(registry, self._build, rebuilds=self._template.rebuilds)
            self._source = FileSource(self.directory)
            await self._source.start(applier.apply)

    async def _build(self, spec: AgentSpec, document: Document) -> Agent:
        builder = self.builder()
        await builder.prepare(spec)
        return builder.build(spec, source=document.info)

    async def write(
        self, name: str, variant: Variant, spec: AgentSpec | None, current: SourceInfo | None
    ) -> None:
        if self._source is None:
            raise Conflict(f"agent {name!r} is defined in code; there is no file to write")
        target = document_name(name, variant, current, "yaml")
        self._source.write(target, render_spec(spec, target))

    async def stop(self) -> None:
        if self._source is not None:
            await self._source.stop()
