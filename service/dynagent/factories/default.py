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
            registry.put(builder.build(spec, source=SourceInfo("code")))
        if self.directory is not None:
            applier = DocumentApplier(registry, self._build)
            self._source = FileSource(self.directory)
            await self._source.start(applier.apply)

    def _build(self, spec: AgentSpec, document: Document) -> Agent:
        return self.builder().build(spec, source=document.info)

    async def write(
        self, name: str, variant: Variant, spec: AgentSpec | None, current: SourceInfo | None
    ) -> None:
        target = document_name(name, variant, current, "yaml")
        self._files(name).write(target, render_spec(spec, target))

    async def read(self, name: str, variant: Variant, current: SourceInfo | None) -> str | None:
        return self._files(name).read(document_name(name, variant, current, "yaml"))

    async def replace(
        self, name: str, variant: Variant, current: SourceInfo | None, text: str, expected: str
    ) -> bool:
        target = document_name(name, variant, current, "yaml")
        return self._files(name).replace_if(target, text, expected)

    def _files(self, name: str) -> FileSource:
        if self._source is None:
            raise Conflict(f"agent {name!r} is defined in code; there is no file to write")
        return self._source

    async def stop(self) -> None:
        if self._source is not None:
            await self._source.stop()
