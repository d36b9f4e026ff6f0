"""AgentTable: agent name → the Agent serving it as stable, swapped atomically.

A swap replaces one reference; a run that already holds the old ``Agent``
finishes on it. A definition that fails to build never replaces a good one:
its error is kept as ``last_error`` beside the version still serving. Every
change bumps the shared change counter; swaps, refusals and removals are told
to the listeners as typed events.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from dataclasses import replace

from loguru import logger

from dynagent.exceptions import AgentNotFound, ConfigError, DynagentError, ErrorKind
from dynagent.registry.entry import AgentEntry, LastError, RevisionRecord
from dynagent.registry.events import AgentRefused, AgentRemoved, AgentSwapped
from dynagent.registry.readiness import Changes
from dynagent.runtime.agent import Agent, Variant
from dynagent.spec.agent import AgentSpec

HISTORY = 20
"""Revisions kept per agent for the status and for rollback."""

TOMBSTONES = 1000
"""Removed names remembered, so that their 404 can say when and why they went."""


class AgentUnavailable(DynagentError):
    kind: ErrorKind = "unavailable"


class AgentTable:
    """The entries by name, the revisions each served, and the names removed."""

    def __init__(self, changes: Changes) -> None:
        self.changes = changes
        self._entries: dict[str, AgentEntry] = {}
        self._history: dict[str, deque[RevisionRecord]] = {}
        self.tombstones: dict[str, str] = {}
        """Removed name → ``removed at T: why``, until the name is defined again."""

    # -- reading -----------------------------------------------------------------

    def get(self, name: str) -> Agent:
        """The stable agent serving ``name`` now; hold on to it for the whole run."""
        entry = self.entry(name)
        if entry.stable is None:
            reason = entry.last_error.message if entry.last_error else "not built yet"
            raise AgentUnavailable(f"agent {name!r} has no valid version: {reason}")
        return entry.stable

    def spec_of(self, name: str) -> AgentSpec | None:
        """The definition serving ``name`` as stable, if any (agent tools look here)."""
        entry = self._entries.get(name)
        return entry.stable.spec if entry is not None and entry.stable is not None else None

    def entry(self, name: str) -> AgentEntry:
        entry = self._entries.get(name)
        if entry is None:
            raise AgentNotFound(name, self.tombstones.get(name, ""))
        return entry

    def find(self, name: str) -> AgentEntry | None:
        """The entry of ``name``, or None where ``entry`` would raise."""
        return self._entries.get(name)

    def history(self, name: str) -> list[RevisionRecord]:
        """Revisions ``name`` has served, oldest first."""
        return list(self._history.get(name, ()))

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[AgentEntry]:
        return iter(sorted(self._entries.values(), key=lambda e: e.name))

    def __len__(self) -> int:
        return len(self._entries)

    # -- changes -----------------------------------------------------------------

    def put(self, agent: Agent) -> bool:
        """Serve ``agent`` as stable; returns False when that revision already serves."""
        current = self._entries.get(agent.name) or AgentEntry(agent.name)
        if current.stable is not None and current.stable.revision == agent.revision:
            if current.last_error is not None or current.stable.source != agent.source:
                # Same content, but news about it: an error withdrawn, or a source that
                # now names where it really comes from (e.g. Nacos after the snapshot).
                self.store(replace(current, stable=agent, last_error=None))
            return False
        now = time.time()
        self.store(replace(current, stable=agent, last_error=None, loaded_at=now))
        self.remember(agent, "stable", now)
        old = current.stable.revision if current.stable else None
        self.changes.tell(AgentSwapped(agent.name, agent.revision, old))
        logger.info("agent {} now serves revision {} (was {})", agent.name, agent.revision, old)
        return True

    def fail(self, name: str, error: ConfigError) -> None:
        """Record a definition that did not build; the serving version stays."""
        current = self._entries.get(name) or AgentEntry(name)
        last = LastError.of(error)
        self.store(replace(current, last_error=last))
        self.changes.tell(AgentRefused(name, last))
        serving = current.stable.revision if current.stable else "nothing"
        logger.error("agent {}: {} — still serving {}", name, error, serving)

    def remove(self, name: str, reason: str = "") -> None:
        """Stop routing to ``name``; runs already holding it finish normally. A ``reason``
        (``deleted in Nacos (GROUP/a.agent.yaml)``) is kept for the name's 404."""
        if self._entries.pop(name, None) is None:
            return
        if reason:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            self.tombstones.pop(name, None)
            self.tombstones[name] = f"removed at {stamp}: {reason}"
            while len(self.tombstones) > TOMBSTONES:
                del self.tombstones[next(iter(self.tombstones))]
        self._history.pop(name, None)
        logger.info("agent {} removed", name)
        self.changes.bump()
        self.changes.tell(AgentRemoved(name, reason))

    def store(self, entry: AgentEntry) -> None:
        """Replace the entry of ``entry.name`` whole (the rollouts change canaries here)."""
        self._entries[entry.name] = entry
        self.tombstones.pop(entry.name, None)
        self.changes.bump()

    def remember(self, agent: Agent, variant: Variant, at: float) -> None:
        """Record ``agent`` as the newest revision; one served again (a rollback) moves up."""
        history = self._history.setdefault(agent.name, deque(maxlen=HISTORY))
        same = [r for r in history if (r.revision, r.variant) == (agent.revision, variant)]
        for earlier in same:
            history.remove(earlier)
        history.append(RevisionRecord(agent.revision, variant, at, agent))
