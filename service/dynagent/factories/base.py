"""Builder factories: where definitions come from, and how they become agents.

Mirrors Spring AI Alibaba's ``AgentBuilderFactory``: a factory hands out
builders; it also owns the source its definitions come from and keeps the
registry in step with it.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import traceback
from collections.abc import Awaitable, Callable
from typing import Protocol

import yaml
from loguru import logger

from dynagent.exceptions import ConfigError
from dynagent.registry.canary import load_canary
from dynagent.registry.facade import AgentRegistry
from dynagent.runtime.agent import Agent, SourceInfo, Variant
from dynagent.runtime.builder import AgentBuilder
from dynagent.sources.base import Document, is_canary_key
from dynagent.spec.agent import AgentSpec, load_spec


class AgentBuilderFactory(Protocol):
    name: str
    """``default``, ``nacos-prompt`` or ``nacos``: shown in each agent's status."""

    def builder(self) -> AgentBuilder: ...

    async def start(self, registry: AgentRegistry) -> None:
        """Load every definition into ``registry``, then keep it in step with changes."""
        ...

    async def stop(self) -> None: ...

    async def write(
        self, name: str, variant: Variant, spec: AgentSpec | None, current: SourceInfo | None
    ) -> None:
        """Write ``spec`` as the definition of ``name``'s variant (``None``: delete it) in
        this factory's source, over ``current`` when given; the watcher then applies it."""
        ...

    async def read(self, name: str, variant: Variant, current: SourceInfo | None) -> str | None:
        """The text of the document defining ``name``'s variant now (None: there is none)."""
        ...

    async def replace(
        self, name: str, variant: Variant, current: SourceInfo | None, text: str, expected: str
    ) -> bool:
        """Write ``text`` over the document only if it still is ``expected`` (compare-and-set:
        on the md5 in Nacos, under a lock file in a folder); False when it changed."""
        ...


def document_name(name: str, variant: Variant, current: SourceInfo | None, suffix: str) -> str:
    """The file name or dataId to write: the current one, else ``{name}.{suffix}`` /
    ``{name}.canary.yaml``."""
    if current is not None and current.kind != "code":
        return current.details.get("data_id") or current.location.rsplit("/", 1)[-1]
    return f"{name}.canary.yaml" if variant == "canary" else f"{name}.{suffix}"


def render_spec(spec: AgentSpec | None, target: str) -> str | None:
    """``spec`` as a document for ``target`` (JSON for ``*.json``, else YAML)."""
    if spec is None:
        return None
    data = spec.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    if target.endswith(".json"):
        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def name_from_key(key: str) -> str:
    """``support-bot.agent.yaml`` → ``support-bot``: whom to blame when a document won't parse."""
    return key.rsplit("/", 1)[-1].split(".", 1)[0]


class DocumentApplier:
    """Applies documents from one source to the registry.

    Remembers which document defines which agent, so a deleted or renamed
    document removes the right agent and two documents cannot claim one name.
    """

    def __init__(
        self,
        registry: AgentRegistry,
        build: Callable[[AgentSpec, Document], Agent | Awaitable[Agent]],
        *,
        rebuilds: list[Callable[[frozenset[str]], None]] | None = None,
    ) -> None:
        """``build`` may be a coroutine function; ``rebuilds``: where to listen for agents
        to build again (an MCP server they use changed)."""
        self.registry = registry
        self.build = build
        self._lock = asyncio.Lock()
        self._rebuilding: set[asyncio.Task[None]] = set()
        self._queued: set[str] = set()
        """Document keys a rebuild is queued for: a burst of changes queues one."""
        self._documents: dict[str, tuple[Document, str]] = {}
        """Document key → (the document, the agent it defines), to build it again."""
        if rebuilds is not None:
            rebuilds.append(self._rebuild_soon)
        self._names: dict[str, str] = {}
        self._failed: dict[str, tuple[str, str]] = {}
        """Document key → (agent, location) of its last refused definition."""
        self._canaries: dict[str, Document] = {}
        """Agent name → its canary document, applied again when the agent comes back
        (a renamed or re-created agent file removes the agent, canary included)."""

    def _rebuild_soon(self, names: frozenset[str]) -> None:
        keys = [
            key
            for key, (_, name) in self._documents.items()
            if name in names and key not in self._queued
        ]
        if keys:
            self._queued.update(keys)
            task = asyncio.get_running_loop().create_task(self.rebuild(keys))
            self._rebuilding.add(task)  # kept until done: the loop holds tasks weakly
            task.add_done_callback(self._rebuilding.discard)

    async def rebuild(self, keys: list[str]) -> None:
        """Build the documents of ``keys`` again, as they stand when the turn comes."""
        for key in keys:
            async with self._lock:
                # The document is read under the lock: a deletion or a newer definition
                # applied while this rebuild waited must win, not the text it replaced.
                self._queued.discard(key)
                known = self._documents.get(key)
                if known is not None:
                    await self._apply(known[0])

    async def apply(self, document: Document) -> None:
        async with self._lock:  # a rebuild and a new document never interleave
            await self._apply(document)

    async def _apply(self, document: Document) -> None:
        self._documents.pop(document.key, None)
        if is_canary_key(document.key):
            await self._apply_canary(document)
            return
        known = self._names.get(document.key)
        blame = known or name_from_key(document.key)
        where = document.info.location or document.key
        if document.error is not None:
            self._fail(document.key, ConfigError(document.error, source=where, agent=blame))
        elif document.text is None:
            if self._names.pop(document.key, None) is not None and known is not None:
                self.registry.table.remove(known, removal_reason(document.info))
            self._forget_failure(document.key)
        else:
            await self._define(document, blame, where)

    async def _define(self, document: Document, blame: str, where: str) -> None:
        assert document.text is not None
        try:
            spec = load_spec(document.text, fmt=document.fmt, source=where)
            owner = self._owner(spec.name)
            if owner is not None and owner != document.key:
                raise ConfigError(
                    f"this document names agent {spec.name!r}, which {owner} already defines; "
                    f"rename it (e.g. name: {name_from_key(document.key)}) or delete it"
                )
            self._documents[document.key] = (document, spec.name)
            agent = await self._built(spec, document)
        except ConfigError as exc:
            # A refusal lands on the document's own entry: the agent it serves (even when
            # the broken edit also renames it: that agent stays on its old revision), else
            # the name of its key; never on another document's healthy agent.
            name = self._names.get(document.key) or blame
            self._fail(
                document.key,
                ConfigError(exc.reason, source=where, agent=name, issues=exc.issues),
            )
            return
        except Exception as exc:  # a bug must not end the watch nor leave no trace in status
            self._fail(document.key, _unexpected(exc, where, blame))
            return
        previous = self._names.get(document.key)
        self._names[document.key] = spec.name
        if previous is not None and previous != spec.name:
            self.registry.table.remove(previous, f"renamed to {spec.name!r} in {where}")
        self._forget_failure(document.key, keep=spec.name)
        self.registry.table.put(agent)
        canary = self._canaries.get(spec.name)
        if canary is not None and self.registry.entry(spec.name).canary is None:
            await self._apply_canary(canary)

    async def _apply_canary(self, document: Document) -> None:
        """``{name}.canary.yaml``: a candidate spec and its rollout; deleting it ends the canary."""
        name = name_from_key(document.key)
        where = document.info.location or document.key
        if document.text is None:
            self._canaries.pop(name, None)
            self._forget_failure(document.key)
            self.registry.rollouts.remove_canary(name)
            return
        self._canaries[name] = document
        try:
            if document.error is not None:
                raise ConfigError(document.error)
            spec, policy = load_canary(document.text, fmt=document.fmt, source=where, name=name)
            self._documents[document.key] = (document, name)
            agent = await self._built(spec, document)
        except ConfigError as exc:
            self._fail(
                document.key, ConfigError(exc.reason, source=where, agent=name, issues=exc.issues)
            )
            return
        except Exception as exc:  # as in _define
            self._fail(document.key, _unexpected(exc, where, name))
            return
        self._forget_failure(document.key, keep=name)
        self.registry.rollouts.put_canary(agent, policy)

    async def _built(self, spec: AgentSpec, document: Document) -> Agent:
        agent = self.build(spec, document)
        return await agent if inspect.isawaitable(agent) else agent

    def _fail(self, key: str, error: ConfigError) -> None:
        self._forget_failure(key, keep=error.agent)
        self._failed[key] = (error.agent, error.source)
        self.registry.table.fail(error.agent, error)

    def _forget_failure(self, key: str, keep: str | None = None) -> None:
        """Withdraw a refusal of ``key`` that no longer holds: the document is gone,
        fixed, or now names another agent. A name that only ever failed disappears;
        an agent still serving drops the error."""
        name, where = self._failed.pop(key, ("", ""))
        if not name or name == keep or name not in self.registry:
            return
        entry = self.registry.entry(name)
        if entry.stable is None:
            self.registry.table.remove(name)
        elif entry.last_error is not None and entry.last_error.source == where:
            self.registry.table.put(entry.stable)  # the same revision: only clears last_error

    def _owner(self, name: str) -> str | None:
        return next((key for key, owned in self._names.items() if owned == name), None)


def removal_reason(info: SourceInfo) -> str:
    """What a tombstone says about a deleted document: ``deleted in Nacos (GROUP/a.yaml)``."""
    if info.kind == "nacos":
        where = f"{info.details.get('group', '')}/{info.details.get('data_id', '')}"
        return f"deleted in Nacos ({where})"
    return f"its file was deleted ({info.location})" if info.location else "deleted"


def _unexpected(error: Exception, where: str, agent: str) -> ConfigError:
    """A refusal for an error no check foresaw. Neither status nor log repeats its message,
    which may quote values filled in from the environment; the log says where it rose."""
    frames = traceback.extract_tb(error.__traceback__)
    origin = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"
    kind = type(error).__name__
    logger.error("building agent {} from {} failed: {} at {}", agent, where, kind, origin)
    return ConfigError(
        f"the definition could not be built ({kind}); the service log has details",
        source=where,
        agent=agent,
    )
