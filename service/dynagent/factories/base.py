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
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

import yaml
from loguru import logger

from dynagent.evals.spec import is_suite_key
from dynagent.exceptions import ConfigError
from dynagent.factories._suites import apply_suite
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
        siblings: Callable[[], Iterable[str]] = tuple,
    ) -> None:
        """``build`` may be a coroutine function; ``rebuilds``: where to listen for agents
        to build again (an MCP server they use changed); ``siblings``: the keys the source
        holds now, handed on or not."""
        self.registry = registry
        self.build = build
        self.siblings = siblings
        self._lock = asyncio.Lock()
        self._rebuilding: set[asyncio.Task[bool]] = set()
        self._queued: set[str] = set()
        """Document keys a rebuild is queued for: a burst of changes queues one."""
        self._documents: dict[str, tuple[Document, str]] = {}
        """Document key → (the document, the agent it defines), to build it again."""
        if rebuilds is not None:
            rebuilds.append(self._rebuild_soon)
        self._names: dict[str, str] = {}
        """Document key → the agent it serves."""
        self._claims: dict[str, tuple[Document, str]] = {}
        """Document key → (the document, the agent it names) while it is refused because
        another document owns that name; applied again when the name is free."""
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

    async def rebuild(self, keys: list[str]) -> bool:
        """Build the documents of ``keys`` again, as they stand when the turn comes; True
        when none of them was refused."""
        accepted = True
        for key in keys:
            async with self._lock:
                # The document is read under the lock: a deletion or a newer definition
                # applied while this rebuild waited must win, not the text it replaced.
                self._queued.discard(key)
                known = self._documents.get(key)
                if known is not None:
                    accepted = await self._apply(known[0]) and accepted
        return accepted

    async def apply(self, document: Document) -> bool:
        """Apply ``document``; True when it was accepted, False when it was refused."""
        async with self._lock:  # a rebuild and a new document never interleave
            return await self._apply(document)

    async def _apply(self, document: Document) -> bool:
        self._documents.pop(document.key, None)
        self._claims.pop(document.key, None)
        if is_canary_key(document.key):
            return await self._apply_canary(document)
        if is_suite_key(document.key):
            return apply_suite(self.registry, document)
        known = self._names.get(document.key)
        blame = known or name_from_key(document.key)
        where = document.info.location or document.key
        if document.text is not None or document.error is not None:
            if document.error is not None:
                self._fail(document.key, ConfigError(document.error, source=where, agent=blame))
            accepted = document.error is None and await self._define(document, blame, where)
            own = name_from_key(document.key)
            if self._owner(own) is None:  # it does not take the name it is named after
                await self._released(own)
            return accepted
        if self._names.pop(document.key, None) is not None and known is not None:
            self.registry.table.remove(known, removal_reason(document.info))
            await self._released(known)
        self._forget_failure(document.key)
        return True

    async def _define(self, document: Document, blame: str, where: str) -> bool:
        assert document.text is not None
        try:
            spec = load_spec(document.text, fmt=document.fmt, source=where)
            owner = self._owner_of(spec.name, document.key)
            if (
                owner is not None
                and owner != document.key
                and not _outranks(document.key, owner, spec.name)
            ):
                self._claims[document.key] = (document, spec.name)
                raise ConfigError(_claimed(spec.name, owner, document.key))
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
            return False
        except Exception as exc:  # a bug must not end the watch nor leave no trace in status
            self._fail(document.key, _unexpected(exc, where, blame))
            return False
        previous = self._names.get(document.key)
        evicted = self._owner(spec.name)
        if evicted is not None and evicted != document.key:
            self._names.pop(evicted)  # the document named after the agent takes it over
        self._names[document.key] = spec.name
        if previous is not None and previous != spec.name:
            self.registry.table.remove(previous, f"renamed to {spec.name!r} in {where}")
        self._forget_failure(document.key, keep=spec.name)
        self.registry.table.put(agent)
        if evicted is not None and evicted != document.key:
            await self._evict(evicted, spec.name, document.key)
        if previous is not None and previous != spec.name:
            await self._released(previous)
        canary = self._canaries.get(spec.name)
        if canary is not None and self.registry.entry(spec.name).canary is None:
            await self._apply_canary(canary)
        return True

    async def _evict(self, key: str, name: str, owner: str) -> None:
        """Refuse ``key``, which served ``name`` until ``owner`` (named after the agent)
        came: on its own entry, as it would be had ``owner`` been there first."""
        known = self._documents.pop(key, None)
        if known is None:
            return
        document = known[0]
        where = document.info.location or document.key
        self._claims[key] = (document, name)
        self._fail(
            key, ConfigError(_claimed(name, owner, key), source=where, agent=name_from_key(key))
        )

    async def _released(self, name: str) -> None:
        """``name`` has no document any more: a document refused only because another
        one owned it is applied again (the one named after the agent first, then by key),
        so the outcome is the one a restart would reach."""
        waiting = sorted(
            (key for key, (_, claimed) in self._claims.items() if claimed == name),
            key=lambda key: (name_from_key(key) != name, key),
        )
        for key in waiting:  # those after the new owner are refused again, naming it
            claim = self._claims.get(key)
            if claim is not None:
                await self._apply(claim[0])

    async def _apply_canary(self, document: Document) -> bool:
        """``{name}.canary.yaml``: a candidate spec and its rollout; deleting it ends the canary."""
        name = name_from_key(document.key)
        where = document.info.location or document.key
        if document.text is None:
            self._canaries.pop(name, None)
            self._forget_failure(document.key)
            self.registry.rollouts.remove_canary(name)
            return True
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
            return False
        except Exception as exc:  # as in _define
            self._fail(document.key, _unexpected(exc, where, name))
            return False
        self._forget_failure(document.key, keep=name)
        self.registry.rollouts.put_canary(agent, policy)
        return True

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

    def _owner_of(self, name: str, key: str) -> str | None:
        """Who owns ``name`` against ``key``: the document serving it; else, for a ``key``
        named otherwise, one named after it that the source holds but has not handed on
        yet (a start loads by key: ``aaa.agent.yaml`` before ``faq-bot.agent.yaml``)."""
        owner = self._owner(name)
        if owner is not None or name_from_key(key) == name:
            return owner
        waiting = (
            k
            for k in sorted(self.siblings())
            if name_from_key(k) == name
            and k != key
            and not is_canary_key(k)
            and not is_suite_key(k)
        )
        return next((k for k in waiting if k not in self._names and k not in self._failed), None)


def _outranks(key: str, owner: str, name: str) -> bool:
    """Whether ``key`` takes ``name`` from the document ``owner`` that serves it now.

    A name belongs to the document named after it (``faq-bot.agent.yaml`` for
    ``faq-bot``), whatever the order documents load in, so every replica and every
    restart agree on it; of two such (``bot.yaml``, ``bot.json``) the first by key. A
    document named otherwise serves a name only while no such document claims it."""
    mine, theirs = name_from_key(key) == name, name_from_key(owner) == name
    return mine and (not theirs or key < owner)


def _claimed(name: str, owner: str, key: str) -> str:
    """Why ``key`` may not define ``name``: how to fix it, never "rename it to its name"."""
    own = name_from_key(key)
    if own == name:
        return (
            f"this document names agent {name!r}, which {owner} also defines and owns (the "
            "first by name of two documents named after an agent); delete one of them"
        )
    return (
        f"this document names agent {name!r}, which {owner} already defines; "
        f"rename it (e.g. name: {own}) or delete it"
    )


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
