"""Tool kinds: what turns one ``tools`` entry of a spec into the agent's tools.

Each kind handles the entries of one ``type`` (``ref``, ``http``, ``mcp``, ``agent``,
or a plugin's): its ``entry`` model validates them (``spec.tools``), ``prepare``
does what must be awaited before a build (opening sessions), ``build`` makes the
tools. ``AgentBuilder`` looks every entry's kind up in its ``ToolKinds`` and has no
branch of its own per kind. Kinds are found through the entry-point group
``dynagent.tool_kinds`` (``spec.kinds``); ``docs/plugins.md`` shows a third-party one.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from loguru import logger

from dynagent.exceptions import ConfigError, FieldIssue
from dynagent.masking import SecretValues
from dynagent.runtime.resources import Resources
from dynagent.spec.agent import AgentSpec
from dynagent.spec.kinds import EntryModel, Kinds, registered, unknown_type
from dynagent.spec.tools import ToolSpec, entry_type
from dynagent.tools.agent import AgentDirectory
from dynagent.tools.base import Tool
from dynagent.tools.registry import ToolRegistry

E = TypeVar("E")
T = TypeVar("T")


class ExpandEnv(Protocol):
    def __call__(self, text: str, path: str, *, secret: bool = False) -> str: ...


@dataclass(frozen=True, slots=True)
class KindContext:
    """What a kind may use of the builder building an agent."""

    expand_env: ExpandEnv
    """``${VAR}`` filled in for the field at ``path`` (only variables the service allows;
    ``secret``: a credential, masked from then on); ``ConfigError`` naming the field."""
    resources: Resources
    """The service's pooled HTTP sessions and model clients."""
    tools: ToolRegistry
    """The tools a definition may name."""
    secrets: SecretValues
    """Values built agents mask in what they record."""
    agents: AgentDirectory | None = None
    """The service's agents (``type: agent``), found at call time."""
    a2a: Callable[[str], Awaitable[str]] | None = None
    """A remote A2A agent's address by its name in the Nacos A2A registry."""
    features: tuple[object, ...] = ()
    """The service objects of feature packages (the MCP servers, a plugin's client)."""

    def feature(self, cls: type[T]) -> T | None:
        """The service's object of class ``cls`` (``McpServers``), if it has one."""
        return next((obj for obj in self.features if isinstance(obj, cls)), None)


class ToolKind(ABC, Generic[E]):
    """The entries of one ``type`` and how their tools are built.

    ``E`` is what ``build`` is handed: an instance of ``entry``, already validated."""

    type: ClassVar[str]
    """What entries of this kind write as ``type:``."""
    entry: ClassVar[EntryModel]
    """The model entries are validated with; it has a ``type`` (a ``Literal`` of
    ``type``) and a ``name`` (the entry's place in error paths: ``tools[name]``)."""
    remote: ClassVar[bool] = False
    """Its tools are what a server offers: their definitions are part of the agent's
    revision, so that a change on the server shows as a new revision."""
    online: ClassVar[bool] = False
    """Its tools need the service (servers, agents) to be built: a builder checking
    definitions offline (``dynagent validate``) skips them, the entry validated only."""

    async def prepare(self, ctx: KindContext, spec: AgentSpec, entry: E, path: str) -> None:
        """Awaited before ``build`` (which cannot wait), e.g. to open a session."""

    def check(self, ctx: KindContext, spec: AgentSpec, entry: E, path: str) -> None:
        """What an ``online`` kind can check offline, reaching no server (``dynagent
        publish``): ``ConfigError`` with ``FieldIssue``s under ``path``."""

    @abstractmethod
    def build(self, ctx: KindContext, spec: AgentSpec, entry: E, path: str) -> list[Tool]:
        """The tools ``entry`` (at ``path``: ``tools[name]``) offers ``spec``'s agent;
        ``ConfigError`` with ``FieldIssue``s under ``path`` for what cannot be built."""


_refused: set[str] = set()


class ToolKinds(Kinds[ToolKind[Any]]):
    """The kinds a builder builds entries with, by ``type``."""

    @classmethod
    def default(cls) -> ToolKinds:
        """The kinds of the entry-point group (those ``AgentSpec`` validates with)."""
        kinds = cls()
        for kind in registered():
            if isinstance(kind, ToolKind):
                kinds.register(kind)
            elif kind.type not in _refused:
                _refused.add(kind.type)
                logger.error("tool kind {} left out: not a dynagent ToolKind", kind.type)
        return kinds

    def of(self, entry: ToolSpec, path: str) -> ToolKind[Any]:
        """The kind building ``entry``; ``ConfigError`` when this builder has none."""
        kind = self.get(entry_type(entry))
        if kind is None:
            raise ConfigError(
                "unknown tool type",
                issues=[FieldIssue(f"{path}.type", unknown_type(entry_type(entry), self))],
            )
        return kind


def fingerprint(tools: Sequence[Tool]) -> str:
    """What of the servers' tools the model sees, and whether a call may be repeated,
    for the agent's revision (a tool never repeated adds nothing: revisions made before
    tools could be repeated stay as they were)."""
    return json.dumps(
        [
            [t.name, t.definition.description, t.definition.parameters]
            + (["idempotent"] if t.idempotent else [])
            for t in tools
        ],
        sort_keys=True,
    )
