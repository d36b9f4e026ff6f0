"""AgentRegistry: agent name → the Agent serving it, swapped atomically.

A swap replaces one reference; a run that already holds the old ``Agent``
finishes on it. A definition that fails to build never replaces a good one:
its error is kept as ``last_error`` beside the version still serving. Every
change bumps a counter that waiters (tests, benchmarks) can await.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC
from typing import Any

from loguru import logger

from dynagent.exceptions import AgentNotFound, ConfigError, DynagentError, ErrorKind, NotFound
from dynagent.registry.canary import (
    Pulled,
    RolloutPolicy,
    VariantStats,
    guard_verdict,
    picks_canary,
)
from dynagent.runtime.agent import Agent, Variant
from dynagent.spec.agent import AgentSpec

HISTORY = 20
"""Revisions kept per agent for the status and for rollback."""

TOMBSTONES = 1000
"""Removed names remembered, so that their 404 can say when and why they went."""


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
class Canary:
    """A candidate version in front of a share of traffic."""

    agent: Agent
    policy: RolloutPolicy
    loaded_at: float
    pulled: Pulled | None = None
    """Set while it is out of traffic: by this replica's guard, or by ``rollout.paused``."""
    step_since: float = 0.0
    """Progressive rollouts: when the current step began (``rollout.step_at``, else when
    this replica saw the step first)."""
    step_ok: int = 0
    """Successful canary requests counted before the current step began."""

    @property
    def serving(self) -> bool:
        return self.pulled is None

    def healthy(self, stats: VariantStats | None) -> int:
        """Successful requests in the current step."""
        return 0 if stats is None else max(0, stats.requests - stats.errors - self.step_ok)


@dataclass(frozen=True, slots=True)
class RevisionRecord:
    """One version an agent has served, kept for rollback and for the status."""

    revision: str
    variant: Variant
    loaded_at: float
    agent: Agent

    def as_dict(self) -> dict[str, Any]:
        return {
            "revision": self.revision,
            "variant": self.variant,
            "loaded_at": self.loaded_at,
            "factory": self.agent.factory,
            "source": self.agent.source.as_dict(),
        }


@dataclass(frozen=True, slots=True)
class AgentEntry:
    """Everything the registry knows about one name; replaced whole, never mutated."""

    name: str
    stable: Agent | None = None
    last_error: LastError | None = None
    loaded_at: float = 0.0
    canary: Canary | None = None

    def status(self, stats: Mapping[Variant, VariantStats] | None = None) -> dict[str, Any]:
        agent = self.stable
        stats = stats or {}
        return {
            "name": self.name,
            "state": "serving" if agent else "refused",
            "revision": agent.revision if agent else None,
            "description": agent.spec.description if agent else "",
            "source": agent.source.status_dict() if agent else None,
            "factory": agent.factory if agent else None,
            "loaded_at": self.loaded_at or None,
            "last_error": self.last_error.as_dict() if self.last_error else None,
            "canary": self._canary_status(stats.get("canary")),
            "traffic": {variant: figures.summary() for variant, figures in stats.items()},
        }

    def _canary_status(self, stats: VariantStats | None) -> dict[str, Any] | None:
        canary = self.canary
        if canary is None:
            return None
        return {
            "revision": canary.agent.revision,
            "weight": canary.policy.weight,
            "sticky_key": canary.policy.sticky_key,
            "state": "serving" if canary.serving else "pulled",
            "pulled": None
            if canary.pulled is None
            else {
                "reason": canary.pulled.reason,
                "at": canary.pulled.at,
                "by": canary.pulled.by,
                "recorded": canary.pulled.recorded,
            },
            "source": canary.agent.source.status_dict(),
            "loaded_at": canary.loaded_at,
            "guard": canary.policy.guard.model_dump(),
            "steps": _steps_status(canary, stats),
        }


def _steps_status(canary: Canary, stats: VariantStats | None) -> dict[str, Any] | None:
    """Where a progressive rollout stands: the step, since when, its healthy requests."""
    policy = canary.policy
    if policy.step is None or policy.step_after is None:
        return None
    return {
        "weights": list(policy.steps),
        "step": policy.step,
        "since": canary.step_since,
        "healthy_requests": canary.healthy(stats),
        "after": policy.step_after.model_dump(),
        "auto_promote": policy.auto_promote,
    }


def _step_start(policy: RolloutPolicy, now: float) -> float:
    at = policy.step_at
    if at is None:
        return now
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()


@dataclass
class AgentRegistry:
    _entries: dict[str, AgentEntry] = field(default_factory=dict)
    _history: dict[str, deque[RevisionRecord]] = field(default_factory=dict)
    _stats: dict[tuple[str, Variant], VariantStats] = field(default_factory=dict)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    changes: int = 0
    """Bumped on every swap, error, addition, removal, guard action and source health change."""
    ready: bool = False
    """True once every source has delivered its first full load."""
    degraded: dict[str, str] = field(default_factory=dict)
    """Sources serving from a fallback (e.g. a snapshot), and why."""
    tombstones: dict[str, str] = field(default_factory=dict)
    """Removed name → ``removed at T: why``, until the name is defined again."""
    listeners: list[Callable[[str, str], None]] = field(default_factory=list)
    """Told ``(agent, what)`` on every change, what being ``swapped``, ``refused``,
    ``removed``, ``canary`` (started or rebuilt), ``canary_removed``, ``canary_pulled`` (by
    this replica's guard), ``canary_paused`` (by its document), ``canary_resumed`` or
    ``canary_weight`` (a new weight, e.g. a step)."""

    # -- reading -----------------------------------------------------------------

    def get(self, name: str) -> Agent:
        """The stable agent serving ``name`` now; hold on to it for the whole run."""
        entry = self.entry(name)
        if entry.stable is None:
            reason = entry.last_error.message if entry.last_error else "not built yet"
            raise AgentUnavailable(f"agent {name!r} has no valid version: {reason}")
        return entry.stable

    def route(
        self, name: str, *, key: str | None = None, pin: Variant | None = None
    ) -> tuple[Agent, Variant]:
        """The agent and variant that serve this request.

        ``pin`` forces a variant (a pulled canary still answers a pin, for
        debugging); otherwise a serving canary takes its weight of the keys.
        """
        entry = self.entry(name)
        canary = entry.canary
        if pin == "canary":
            if canary is None:
                raise NotFound(f"agent {name!r} has no canary")
            return canary.agent, "canary"
        if (
            pin is None
            and canary is not None
            and canary.serving
            and (entry.stable is None or picks_canary(name, key, canary.policy.weight))
        ):
            return canary.agent, "canary"
        return self.get(name), "stable"

    def spec_of(self, name: str) -> AgentSpec | None:
        """The definition serving ``name`` as stable, if any (agent tools look here)."""
        entry = self._entries.get(name)
        return entry.stable.spec if entry is not None and entry.stable is not None else None

    def entry(self, name: str) -> AgentEntry:
        entry = self._entries.get(name)
        if entry is None:
            raise AgentNotFound(name, self.tombstones.get(name, ""))
        return entry

    def status(self, name: str) -> dict[str, Any]:
        entry = self.entry(name)
        # Looked up, not searched: a list of 1,000 agents must not scan every agent's stats.
        variants: tuple[Variant, ...] = ("stable", "canary")
        found = ((v, self._stats.get((name, v))) for v in variants)
        stats: dict[Variant, VariantStats] = {v: s for v, s in found if s is not None}
        status = entry.status(stats)
        status["revisions"] = [r.as_dict() for r in reversed(self.history(name))]
        return status

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
                self._set(replace(current, stable=agent, last_error=None))
            return False
        now = time.time()
        self._set(replace(current, stable=agent, last_error=None, loaded_at=now))
        self._remember(agent, "stable", now)
        self._stats.pop((agent.name, "stable"), None)
        self._tell(agent.name, "swapped")
        old = current.stable.revision if current.stable else None
        logger.info("agent {} now serves revision {} (was {})", agent.name, agent.revision, old)
        return True

    def put_canary(self, agent: Agent, policy: RolloutPolicy) -> None:
        """Start (or rebuild) the canary of ``agent.name``. Its ``rollout.paused`` decides
        whether it serves: a new revision clears this replica's own pull, and so does an
        edit that removes a recorded pause (a resume)."""
        current = self._entries.get(agent.name) or AgentEntry(agent.name)
        old = current.canary
        pulled = Pulled.of(policy.paused, agent.revision)
        if old is not None and old.agent.revision == agent.revision:
            self._update_canary(current, old, policy, pulled)
            return
        now = time.time()
        canary = Canary(agent, policy, now, pulled, _step_start(policy, now))
        self._set(replace(current, canary=canary, last_error=None))
        self._remember(agent, "canary", now)
        self._stats[(agent.name, "canary")] = VariantStats(policy.guard.window)
        self._tell(agent.name, "canary")
        logger.info(
            "agent {} canary revision {} at {}% of traffic",
            agent.name,
            agent.revision,
            policy.weight,
        )

    def _update_canary(
        self, entry: AgentEntry, old: Canary, policy: RolloutPolicy, pulled: Pulled | None
    ) -> None:
        """The same canary revision with a new rollout block (a pause, a resume, a weight)."""
        if pulled is None and old.pulled is not None and not old.pulled.recorded:
            pulled = old.pulled  # this replica's own pull, still being written back
        elif pulled is not None and old.pulled is not None and old.pulled.reason == pulled.reason:
            pulled = replace(old.pulled, recorded=True)  # its write-back: keep the exact time
        resumed = old.pulled is not None and pulled is None
        if resumed:  # judged afresh: the failures that paused it are history
            self._stats[(entry.name, "canary")] = VariantStats(policy.guard.window)
        canary = replace(old, policy=policy, pulled=pulled)
        if resumed or (policy.weight, policy.step_at) != (old.policy.weight, old.policy.step_at):
            stats = self._stats.get((entry.name, "canary"))
            ok = stats.requests - stats.errors if stats else 0
            canary = replace(canary, step_since=_step_start(policy, time.time()), step_ok=ok)
        self._set(replace(entry, canary=canary, last_error=None))
        if policy.weight != old.policy.weight:
            self._tell(entry.name, "canary_weight")
            logger.info("agent {} canary now at {:g}% of traffic", entry.name, policy.weight)
        if resumed:
            self._tell(entry.name, "canary_resumed")
            logger.info("agent {} canary {} back in traffic", entry.name, old.agent.revision)
        elif old.pulled is None and pulled is not None:
            self._tell(entry.name, "canary_paused")
            logger.warning(
                "agent {} canary {} paused by {}: {}",
                entry.name,
                old.agent.revision,
                pulled.by,
                pulled.reason,
            )

    def canary_stats(self, name: str) -> VariantStats | None:
        return self._stats.get((name, "canary"))

    def resume_canary(self, name: str) -> None:
        """Lift a pull that lives only in this replica (one never recorded in the document)."""
        entry = self._entries.get(name)
        canary = entry.canary if entry else None
        if entry is None or canary is None or canary.pulled is None or canary.pulled.recorded:
            return
        self._set(replace(entry, canary=replace(canary, pulled=None)))
        self._stats[(name, "canary")] = VariantStats(canary.policy.guard.window)
        self._tell(name, "canary_resumed")

    def remove_canary(self, name: str) -> None:
        current = self._entries.get(name)
        if current is None or current.canary is None:
            return
        if current.stable is None:
            self.remove(name)
            return
        self._set(replace(current, canary=None))
        self._stats.pop((name, "canary"), None)
        self._tell(name, "canary_removed")
        logger.info("agent {} canary removed", name)

    def fail(self, name: str, error: ConfigError) -> None:
        """Record a definition that did not build; the serving version stays."""
        current = self._entries.get(name) or AgentEntry(name)
        self._set(replace(current, last_error=LastError.of(error)))
        self._tell(name, "refused")
        serving = current.stable.revision if current.stable else "nothing"
        logger.error("agent {}: {} — still serving {}", name, error, serving)

    def remove(self, name: str, reason: str = "") -> None:
        """Stop routing to ``name``; runs already holding it finish normally. A ``reason``
        (``deleted in Nacos (GROUP/a.agent.yaml)``) is kept for the name's 404."""
        if self._entries.pop(name, None) is not None:
            if reason:
                stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                self.tombstones.pop(name, None)
                self.tombstones[name] = f"removed at {stamp}: {reason}"
                while len(self.tombstones) > TOMBSTONES:
                    del self.tombstones[next(iter(self.tombstones))]
            self._history.pop(name, None)
            self._stats.pop((name, "stable"), None)
            self._stats.pop((name, "canary"), None)
            logger.info("agent {} removed", name)
            self._bump()
            self._tell(name, "removed")

    def observe(self, agent: Agent, variant: Variant, ok: bool, seconds: float) -> None:
        """Count one finished request; may pull the canary (the guard)."""
        entry = self._entries.get(agent.name)
        if entry is None:
            return
        serving = entry.canary.agent if variant == "canary" and entry.canary else entry.stable
        if serving is not agent:
            return  # a run of a version that has since been replaced
        window = entry.canary.policy.guard.window if entry.canary else 200
        key = (agent.name, variant)
        stats = self._stats.get(key)
        if stats is None:
            stats = self._stats[key] = VariantStats(window)
        stats.record(ok, seconds)
        if variant == "canary" and entry.canary is not None and entry.canary.serving:
            self._guard(entry, entry.canary)

    def rate(self, name: str, revision: str, variant: Variant, score: float) -> bool:
        """Count a feedback score for a run of ``revision``; False when that revision no
        longer serves as ``variant`` (the figures are of the versions serving now)."""
        entry = self._entries.get(name)
        if entry is None:
            return False
        canary = entry.canary
        serving = canary.agent if variant == "canary" and canary else entry.stable
        if serving is None or serving.revision != revision:
            return False
        stats = self._stats.get((name, variant))
        if stats is None:
            window = canary.policy.guard.window if canary else 200
            stats = self._stats[(name, variant)] = VariantStats(window)
        stats.rate(score)
        if variant == "canary" and canary is not None and canary.serving:
            self._guard(entry, canary)
        return True

    def _guard(self, entry: AgentEntry, canary: Canary) -> None:
        stable = self._stats.get((entry.name, "stable")) or VariantStats()
        reason = guard_verdict(canary.policy.guard, stable, self._stats[(entry.name, "canary")])
        if reason is None:
            return
        self._set(replace(entry, canary=replace(canary, pulled=Pulled.now(reason))))
        self._tell(entry.name, "canary_pulled")
        logger.warning(
            "guard pulled canary {} of agent {} out of traffic: {}",
            canary.agent.revision,
            entry.name,
            reason,
        )

    def mark_ready(self) -> None:
        self.ready = True
        self._bump()

    def set_degraded(self, source: str, reason: str | None) -> None:
        """Record why ``source`` serves from a fallback, or (``None``) that it is healthy."""
        if self.degraded.get(source) == reason:
            return
        if reason is None:
            del self.degraded[source]
        else:
            self.degraded[source] = reason
        self._bump()

    def _remember(self, agent: Agent, variant: Variant, at: float) -> None:
        """Record ``agent`` as the newest revision; one served again (a rollback) moves up."""
        history = self._history.setdefault(agent.name, deque(maxlen=HISTORY))
        same = [r for r in history if (r.revision, r.variant) == (agent.revision, variant)]
        for earlier in same:
            history.remove(earlier)
        history.append(RevisionRecord(agent.revision, variant, at, agent))

    def _tell(self, name: str, what: str) -> None:
        for listener in self.listeners:
            listener(name, what)

    def _set(self, entry: AgentEntry) -> None:
        self._entries[entry.name] = entry
        self.tombstones.pop(entry.name, None)
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
