"""AgentRegistry: agent name → the Agent serving it, swapped atomically.

A swap replaces one reference; a run that already holds the old ``Agent``
finishes on it. A definition that fails to build never replaces a good one:
its error is kept as ``last_error`` beside the version still serving. Every
change bumps a counter that waiters (tests, benchmarks) can await.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from loguru import logger

from .agent import Agent, Variant
from .exceptions import AgentNotFound, ConfigError, DynagentError, ErrorKind


class AgentUnavailable(DynagentError):
    kind: ErrorKind = "unavailable"


@dataclass(frozen=True, slots=True)
class LastError:
    """Why the newest definition of an agent is not serving."""

    source: str
    path: str
    message: str
    at: float

    @classmethod
    def of(cls, error: ConfigError) -> LastError:
        return cls(error.source, error.path, str(error), time.time())

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "path": self.path, "message": self.message, "at": self.at}


@dataclass(frozen=True, slots=True)
class AgentEntry:
    """Everything the registry knows about one name; replaced whole, never mutated."""

    name: str
    stable: Agent | None = None
    last_error: LastError | None = None
    loaded_at: float = 0.0

    def status(self) -> dict[str, Any]:
        agent = self.stable
        return {
            "name": self.name,
            "state": "serving" if agent else "failed",
            "revision": agent.revision if agent else None,
            "description": agent.spec.description if agent else "",
            "source": agent.source.as_dict() if agent else None,
            "factory": agent.factory if agent else None,
            "loaded_at": self.loaded_at or None,
            "last_error": self.last_error.as_dict() if self.last_error else None,
            "canary": None,
        }


@dataclass
class AgentRegistry:
    _entries: dict[str, AgentEntry] = field(default_factory=dict)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    changes: int = 0
    """Bumped on every swap, error, addition or removal."""
    ready: bool = False
    """True once every source has delivered its first full load."""
    degraded: dict[str, str] = field(default_factory=dict)
    """Sources serving from a fallback (e.g. a snapshot), and why."""
    listeners: list[Callable[[str, str], None]] = field(default_factory=list)
    """Told ``(agent, "swapped" | "refused" | "removed")`` on every change (metrics)."""

    def get(self, name: str) -> Agent:
        """The agent serving ``name`` now; hold on to it for the whole run."""
        entry = self._entries.get(name)
        if entry is None:
            raise AgentNotFound(name)
        if entry.stable is None:
            reason = entry.last_error.message if entry.last_error else "not built yet"
            raise AgentUnavailable(f"agent {name!r} has no valid version: {reason}")
        return entry.stable

    def route(
        self, name: str, *, key: str | None = None, pin: Variant | None = None
    ) -> tuple[Agent, Variant]:
        """The agent and variant that serve this request."""
        agent = self.get(name)
        if pin == "canary":
            raise AgentNotFound(f"{name}@canary")
        return agent, "stable"

    def entry(self, name: str) -> AgentEntry:
        entry = self._entries.get(name)
        if entry is None:
            raise AgentNotFound(name)
        return entry

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[AgentEntry]:
        return iter(sorted(self._entries.values(), key=lambda e: e.name))

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, agent: Agent) -> bool:
        """Serve ``agent``; returns False when that revision already serves (no-op)."""
        current = self._entries.get(agent.name)
        if current and current.stable and current.stable.revision == agent.revision:
            if current.last_error is not None:
                self._set(replace(current, last_error=None))
            return False
        self._set(AgentEntry(agent.name, agent, None, time.time()))
        self._tell(agent.name, "swapped")
        old = current.stable.revision if current and current.stable else None
        logger.info("agent {} now serves revision {} (was {})", agent.name, agent.revision, old)
        return True

    def fail(self, name: str, error: ConfigError) -> None:
        """Record a definition that did not build; the serving version stays."""
        current = self._entries.get(name) or AgentEntry(name)
        self._set(replace(current, last_error=LastError.of(error)))
        self._tell(name, "refused")
        serving = current.stable.revision if current.stable else "nothing"
        logger.error("agent {}: {} — still serving {}", name, error, serving)

    def remove(self, name: str) -> None:
        """Stop routing to ``name``; runs already holding it finish normally."""
        if self._entries.pop(name, None) is not None:
            logger.info("agent {} removed", name)
            self._bump()
            self._tell(name, "removed")

    def mark_ready(self) -> None:
        self.ready = True
        self._bump()

    def _tell(self, name: str, what: str) -> None:
        for listener in self.listeners:
            listener(name, what)

    def _set(self, entry: AgentEntry) -> None:
        self._entries[entry.name] = entry
        self._bump()

    def _bump(self) -> None:
        self.changes += 1
        # Wake every waiter without awaiting: the swap itself never yields.
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def wait_for(
        self, predicate: Callable[[AgentRegistry], bool], within: float = 10.0
    ) -> None:
        """Wait until ``predicate(registry)`` holds, re-checked on every change."""
        async with asyncio.timeout(within):
            while not predicate(self):
                await self._changed.wait()
