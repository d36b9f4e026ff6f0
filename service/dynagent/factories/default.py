"""The local default factory: specs from a watched folder, and specs given in code."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from dynagent.exceptions import ConfigError, Conflict
from dynagent.factories.base import DocumentApplier, document_name, render_spec
from dynagent.registry.facade import AgentRegistry
from dynagent.runtime.agent import Agent, SourceInfo, Variant
from dynagent.runtime.builder import AgentBuilder
from dynagent.sources.base import Document
from dynagent.sources.files import FileSource
from dynagent.spec.agent import AgentSpec


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
        self._tasks: set[asyncio.Task[None]] = set()

    def builder(self) -> AgentBuilder:
        return replace(self._template, factory=self.name)

    async def start(self, registry: AgentRegistry) -> None:
        for spec in self.specs:
            await self._put_code(spec, registry)
        rebuilds = self._template.rebuilds
        if self.specs and rebuilds is not None:
            rebuilds.append(lambda names: self._rebuild_code(names, registry))
        if self.directory is not None:
            self._source = await asyncio.to_thread(FileSource, self.directory)
            applier = DocumentApplier(
                registry, self._build, rebuilds=self._template.rebuilds, siblings=self._source.keys
            )
            await self._source.start(applier.apply)

    async def _put_code(self, spec: AgentSpec, registry: AgentRegistry) -> None:
        """A spec given in code; one whose MCP server is down waits for it, refused."""
        builder = self.builder()
        try:
            await builder.prepare(spec)
            registry.table.put(builder.build(spec, source=SourceInfo("code")))
        except ConfigError as exc:
            if not builder.uses_servers(spec):
                raise  # a mistake in code, not a server that is down: fail the start
            registry.table.fail(spec.name, exc)

    def _rebuild_code(self, names: frozenset[str], registry: AgentRegistry) -> None:
        for spec in self.specs:
            if spec.name in names:
                task = asyncio.get_running_loop().create_task(self._put_code(spec, registry))
                self._tasks.add(task)  # kept until done: the loop holds tasks weakly
                task.add_done_callback(self._tasks.discard)

    async def _build(self, spec: AgentSpec, document: Document) -> Agent:
        builder = self.builder()
        await builder.prepare(spec)
        return builder.build(spec, source=document.info)

    async def write(
        self, name: str, variant: Variant, spec: AgentSpec | None, current: SourceInfo | None
    ) -> None:
        target = document_name(name, variant, current, "yaml")
        await asyncio.to_thread(self._files(name).write, target, render_spec(spec, target))

    async def read(self, name: str, variant: Variant, current: SourceInfo | None) -> str | None:
        filename = document_name(name, variant, current, "yaml")
        return await asyncio.to_thread(self._files(name).read, filename)

    async def replace(
        self, name: str, variant: Variant, current: SourceInfo | None, text: str, expected: str
    ) -> bool:
        target = document_name(name, variant, current, "yaml")
        return await asyncio.to_thread(self._files(name).replace_if, target, text, expected)

    def _files(self, name: str) -> FileSource:
        if self._source is None:
            raise Conflict(f"agent {name!r} is defined in code; there is no file to write")
        return self._source

    async def stop(self) -> None:
        if self._source is not None:
            await self._source.stop()
