"""The prompt-only factory: agent specs are local files, their system prompts
live in Nacos and are watched.

A spec names its prompt with ``prompt.ref: {key, label?, version?}``. Prompts are
plain configs in ``nacos.prompt_group`` (default ``PROMPTS``): dataId ``{key}``,
or ``{key}.{label}`` / ``{key}.{version}`` when the ref names one. The content
is the template itself, or JSON ``{"template": "...", "version": "..."}`` (the
shape Spring AI Alibaba stores). A prompt change rebuilds every agent that uses
it, like any other change; specs without a ref are served as they are.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path

from loguru import logger

from dynagent.config import NacosConfig
from dynagent.exceptions import ConfigError, FieldIssue
from dynagent.factories.base import DocumentApplier, document_name, render_spec
from dynagent.nacos.client import NacosClient, content_md5
from dynagent.nacos.snapshot import Snapshot
from dynagent.nacos.source import NacosSource
from dynagent.registry.facade import AgentRegistry
from dynagent.runtime.agent import Agent, SourceInfo, Variant
from dynagent.runtime.builder import AgentBuilder
from dynagent.sources.base import Document
from dynagent.sources.files import FileSource
from dynagent.spec.agent import AgentSpec, PromptRef


def prompt_data_id(ref: PromptRef) -> str:
    qualifier = ref.label or ref.version
    return f"{ref.key}.{qualifier}" if qualifier else ref.key


@dataclass(frozen=True, slots=True)
class RemotePrompt:
    template: str
    version: str
    md5: str

    @classmethod
    def parse(cls, text: str) -> RemotePrompt:
        md5 = content_md5(text)
        stripped = text.lstrip()
        if stripped.startswith("{"):
            try:
                data = json.loads(text)
            except ValueError:
                data = None
            if isinstance(data, dict) and isinstance(data.get("template"), str):
                return cls(data["template"], str(data.get("version") or md5[:8]), md5)
        return cls(text, md5[:8], md5)


class NacosPromptAgentBuilderFactory:
    name = "nacos-prompt"

    def __init__(self, builder: AgentBuilder, settings: NacosConfig, directory: Path) -> None:
        self._template = builder
        self.settings = settings
        self.directory = directory
        self._prompts: dict[str, RemotePrompt] = {}
        self._documents: dict[str, tuple[Document, str]] = {}
        """Spec document key → (the document, the prompt dataId it uses)."""
        self._applier: DocumentApplier | None = None
        self._files: FileSource | None = None
        self._nacos: NacosSource | None = None

    def builder(self) -> AgentBuilder:
        return replace(self._template, factory=self.name)

    async def start(self, registry: AgentRegistry) -> None:
        settings = self.settings
        namespace = settings.namespace or "public"
        source_name = f"nacos:{namespace}/{settings.prompt_group}"

        # Prompts first, so that the first build of every agent finds its prompt.
        self._nacos = NacosSource(
            NacosClient(settings),
            settings.prompt_group,
            accepts=lambda data_id: True,
            snapshot=Snapshot(settings.snapshot_dir / namespace / settings.prompt_group),
            poll_seconds=settings.poll_seconds,
            on_health=lambda reason: registry.readiness.set_degraded(source_name, reason),
            on_stale=lambda: registry.readiness.refused_stale(source_name),
        )
        await self._nacos.start(self._prompt_changed)
        self._files = await asyncio.to_thread(FileSource, self.directory)
        self._applier = DocumentApplier(
            registry,
            self._prepared_build,
            rebuilds=self._template.rebuilds,
            siblings=self._files.keys,
        )
        await self._files.start(self._apply)

    async def _apply(self, document: Document) -> bool:
        assert self._applier is not None
        if document.text is None:
            self._documents.pop(document.key, None)
        return await self._applier.apply(document)

    async def write(
        self, name: str, variant: Variant, spec: AgentSpec | None, current: SourceInfo | None
    ) -> None:
        assert self._files is not None
        target = document_name(name, variant, current, "yaml")
        await asyncio.to_thread(self._files.write, target, render_spec(spec, target))

    async def read(self, name: str, variant: Variant, current: SourceInfo | None) -> str | None:
        assert self._files is not None
        filename = document_name(name, variant, current, "yaml")
        return await asyncio.to_thread(self._files.read, filename)

    async def replace(
        self, name: str, variant: Variant, current: SourceInfo | None, text: str, expected: str
    ) -> bool:
        assert self._files is not None
        target = document_name(name, variant, current, "yaml")
        return await asyncio.to_thread(self._files.replace_if, target, text, expected)

    async def stop(self) -> None:
        if self._files is not None:
            await self._files.stop()
        if self._nacos is not None:
            await self._nacos.stop()

    async def _prompt_changed(self, document: Document) -> bool:
        """True unless an agent using the prompt refused it (then the snapshot keeps the
        prompt those agents still serve)."""
        if document.text is None:
            self._prompts.pop(document.key, None)
        else:
            self._prompts[document.key] = RemotePrompt.parse(document.text)
        if self._applier is None:
            return True  # still loading prompts: agents are built afterwards
        accepted = True
        for spec_document, data_id in list(self._documents.values()):
            if data_id == document.key:
                logger.info("prompt {} changed: rebuilding {}", data_id, spec_document.key)
                # By key: a document deleted or edited meanwhile is not built as it was.
                accepted = await self._applier.rebuild([spec_document.key]) and accepted
        return accepted

    async def _prepared_build(self, spec: AgentSpec, document: Document) -> Agent:
        await self.builder().prepare(spec)
        return self._build(spec, document)

    def _build(self, spec: AgentSpec, document: Document) -> Agent:
        ref = spec.prompt.ref
        if ref is None:
            self._documents.pop(document.key, None)
            return self.builder().build(spec, source=document.info)
        data_id = prompt_data_id(ref)
        self._documents[document.key] = (document, data_id)
        prompt = self._prompts.get(data_id)
        if prompt is None:
            raise ConfigError(
                "prompt not found in Nacos",
                agent=spec.name,
                issues=[
                    FieldIssue(
                        "prompt.ref",
                        (
                            f"no config {data_id!r} in group {self.settings.prompt_group!r} "
                            f"(namespace {self.settings.namespace or 'public'!r})"
                        ),
                    )
                ],
            )
        details = {
            **document.info.details,
            "prompt_key": ref.key,
            "prompt_data_id": data_id,
            "prompt_version": prompt.version,
            "prompt_md5": prompt.md5,
        }
        if ref.label:
            details["prompt_label"] = ref.label
        source = SourceInfo(
            document.info.kind, document.info.location, details, document.info.health
        )
        revision = hashlib.sha256(f"{spec.revision}:{prompt.md5}".encode()).hexdigest()[:12]
        return self.builder().build(
            spec, source=source, system_prompt=prompt.template, revision=revision
        )
