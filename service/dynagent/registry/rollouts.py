"""Rollouts: each agent's canary, the traffic figures of both variants, and the guard.

Routing sends a serving canary its weight of the keys. The figures of each
variant feed the status and the guard, which pulls a failing canary out of
traffic in this replica at once (``CanaryPulled``); the decision is written
back to the canary's document elsewhere (``rollout.decisions``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC
from typing import Any, Protocol

from loguru import logger

from dynagent.exceptions import NotFound
from dynagent.registry.canary import Pulled, RolloutPolicy, picks_canary
from dynagent.registry.entry import AgentEntry, Canary
from dynagent.registry.events import (
    AgentRemoved,
    AgentSwapped,
    CanaryPaused,
    CanaryPulled,
    CanaryRemoved,
    CanaryResumed,
    CanaryStarted,
    CanaryWeightChanged,
    RegistryEvent,
)
from dynagent.registry.gate import GateState, held
from dynagent.registry.guard import VariantStats, guard_verdict
from dynagent.registry.spend import SpendBook
from dynagent.registry.table import AgentTable
from dynagent.runtime.agent import Agent, Variant


class Served(Protocol):
    """What a finished run names of the version that served it."""

    @property
    def name(self) -> str: ...
    @property
    def revision(self) -> str: ...


VARIANTS: tuple[Variant, ...] = ("stable", "canary")

Gatekeeper = Callable[[Canary], GateState | None]
"""The gate state of a canary as it is stored (None: it has no gate)."""


def _held_until_judged(canary: Canary) -> GateState | None:
    """Without a gatekeeper a gated canary stays out of live traffic."""
    return None if canary.policy.gate is None else held(canary.agent.revision)


def _step_start(policy: RolloutPolicy, now: float) -> float:
    at = policy.step_at
    if at is None:
        return now
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()


class Rollouts:
    """The canaries of the agents in ``table``, and the figures that judge them."""

    def __init__(self, table: AgentTable) -> None:
        self.table = table
        self.changes = table.changes
        self._stats: dict[tuple[str, Variant], VariantStats] = {}
        self.spend = SpendBook()
        """What canary revisions spent on this replica (``rollout.budget``)."""
        self.ended: dict[str, dict[str, Any]] = {}
        """The last ended canary of each agent: its revision, how it ended, its decisions."""
        self.changes.listeners.append(self._forget)
        self.gatekeeper: Gatekeeper = _held_until_judged
        """Judges a canary's gate each time the canary is stored (``rollout.gate``)."""

    def _forget(self, event: RegistryEvent) -> None:
        """A new stable revision is judged afresh; a removed agent leaves no figures."""
        if isinstance(event, AgentSwapped):
            self._stats.pop((event.name, "stable"), None)
            ended = self.ended.get(event.name)
            if ended is not None and ended["revision"] == event.revision:
                ended["outcome"] = "promoted"  # its spec became the stable one
        elif isinstance(event, AgentRemoved):
            self.ended.pop(event.name, None)
            for variant in VARIANTS:
                self._stats.pop((event.name, variant), None)

    # -- reading -----------------------------------------------------------------

    def route(
        self,
        name: str,
        *,
        key: str | None = None,
        pin: Variant | None = None,
        attributes: Mapping[str, Any] | None = None,
        admitted: bool | None = None,
    ) -> tuple[Agent, Variant]:
        """The agent and variant that serve this request.

        ``pin`` forces a variant (a pulled canary still answers a pin, for
        debugging); otherwise a serving canary takes its weight of the keys among the
        requests its ``rollout.match`` admits (``attributes``: the request's;
        ``admitted``: the expression's verdict, when the caller has it already).
        """
        entry = self.table.entry(name)
        canary = entry.canary
        if pin == "canary":
            if canary is None:
                raise NotFound(f"agent {name!r} has no canary")
            return canary.agent, "canary"
        if (
            pin is None
            and canary is not None
            and canary.serving
            and not canary.held
            and (
                entry.stable is None
                or (
                    (canary.policy.eligible(attributes) if admitted is None else admitted)
                    and picks_canary(name, key, canary.policy.weight)
                )
            )
        ):
            return canary.agent, "canary"
        return self.table.get(name), "stable"

    def stats_of(self, name: str) -> dict[Variant, VariantStats]:
        """The figures of ``name``'s variants that have any."""
        # Looked up, not searched: a list of 1,000 agents must not scan every agent's stats.
        found = ((v, self._stats.get((name, v))) for v in VARIANTS)
        return {v: s for v, s in found if s is not None}

    def canary_stats(self, name: str) -> VariantStats | None:
        return self._stats.get((name, "canary"))

    # -- changes -----------------------------------------------------------------

    def put_canary(self, agent: Agent, policy: RolloutPolicy) -> None:
        """Start (or rebuild) the canary of ``agent.name``. Its ``rollout.paused`` decides
        whether it serves: a new revision clears this replica's own pull, and so does an
        edit that removes a recorded pause (a resume)."""
        current = self.table.find(agent.name) or AgentEntry(agent.name)
        old = current.canary
        pulled = Pulled.of(policy.paused, agent.revision)
        if old is not None and old.agent.revision == agent.revision:
            self._update_canary(current, old, policy, pulled)
            return
        now = time.time()
        canary = Canary(agent, policy, now, pulled, _step_start(policy, now))
        canary = replace(canary, gate=self.gatekeeper(canary))
        self.table.store(replace(current, canary=canary, last_error=None))
        self.table.remember(agent, "canary", now)
        self._stats[(agent.name, "canary")] = VariantStats(policy.guard.window)
        self.changes.tell(CanaryStarted(agent.name, agent.revision, policy.weight))
        logger.info(
            "agent {} canary revision {} at {}% of traffic{}",
            agent.name,
            agent.revision,
            policy.weight,
            " once its gate opens" if canary.held else "",
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
        canary = self._gated(canary, self.gatekeeper(canary))
        if resumed or (policy.weight, policy.step_at) != (old.policy.weight, old.policy.step_at):
            stats = self._stats.get((entry.name, "canary"))
            ok = stats.requests - stats.errors if stats else 0
            canary = replace(canary, step_since=_step_start(policy, time.time()), step_ok=ok)
        self.table.store(replace(entry, canary=canary, last_error=None))
        self._tell_update(entry.name, old, canary)

    def _tell_update(self, name: str, old: Canary, new: Canary) -> None:
        revision, weight = old.agent.revision, new.policy.weight
        if weight != old.policy.weight:
            self.changes.tell(CanaryWeightChanged(name, revision, weight, old.policy.weight))
            logger.info("agent {} canary now at {:g}% of traffic", name, weight)
        pulled = new.pulled
        if old.pulled is not None and pulled is None:
            self.changes.tell(CanaryResumed(name, revision))
            logger.info("agent {} canary {} back in traffic", name, revision)
        elif old.pulled is None and pulled is not None:
            self.changes.tell(CanaryPaused(name, revision, pulled.reason, pulled.by))
            logger.warning(
                "agent {} canary {} paused by {}: {}", name, revision, pulled.by, pulled.reason
            )

    def set_gate(self, name: str, gate: GateState | None) -> None:
        """Store the newly judged gate of ``name``'s canary (a suite, a judge, a claim
        changed); an opened gate starts the canary's traffic, and its step clock."""
        entry = self.table.find(name)
        canary = entry.canary if entry else None
        if entry is None or canary is None or canary.gate == gate:
            return
        self.table.store(replace(entry, canary=self._gated(canary, gate)))

    def _gated(self, canary: Canary, gate: GateState | None) -> Canary:
        was_held, now_held = canary.held, gate is not None and not gate.open
        if was_held != now_held or (gate and canary.gate and gate.state != canary.gate.state):
            self._tell_gate(canary, gate)
        if was_held and not now_held:  # its traffic starts now: so does its first step
            stats = self._stats.get((canary.agent.name, "canary"))
            ok = stats.requests - stats.errors if stats else 0
            return replace(canary, gate=gate, step_since=time.time(), step_ok=ok)
        return replace(canary, gate=gate)

    def _tell_gate(self, canary: Canary, gate: GateState | None) -> None:
        name, revision = canary.agent.name, canary.agent.revision
        if gate is None or gate.open:
            logger.info("agent {} canary {}: gate open, taking live traffic", name, revision)
        elif gate.state == "failed":
            logger.warning("agent {} canary {}: gate failed: {}", name, revision, gate.reason)
        else:
            why = f": {gate.reason}" if gate.reason else ""
            logger.info("agent {} canary {}: gate {}{}", name, revision, gate.state, why)

    def resume_canary(self, name: str) -> None:
        """Lift a pull that lives only in this replica (one never recorded in the document)."""
        entry = self.table.find(name)
        canary = entry.canary if entry else None
        if entry is None or canary is None or canary.pulled is None or canary.pulled.recorded:
            return
        self.table.store(replace(entry, canary=replace(canary, pulled=None)))
        self._stats[(name, "canary")] = VariantStats(canary.policy.guard.window)
        self.changes.tell(CanaryResumed(name, canary.agent.revision))

    def remove_canary(self, name: str) -> None:
        current = self.table.find(name)
        if current is None or current.canary is None:
            return
        if current.stable is None:
            self.table.remove(name)
            return
        self.table.store(replace(current, canary=None))
        self._stats.pop((name, "canary"), None)
        ended = current.canary
        promoted = current.stable.revision == ended.agent.revision
        self.ended[name] = {
            "revision": ended.agent.revision,
            "outcome": "promoted" if promoted else "ended",
            "at": time.time(),
            "entries": [entry.model_dump() for entry in ended.policy.history],
        }
        self.changes.tell(CanaryRemoved(name, current.canary.agent.revision))
        logger.info("agent {} canary removed", name)

    def observe(
        self,
        served: Served,
        variant: Variant,
        ok: bool,
        seconds: float,
        *,
        routed: bool = True,
        unmatched: bool = False,
    ) -> None:
        """Count one finished run of ``served`` (an agent, or the name and revision of
        one another agent called as a tool) while its revision serves as ``variant``
        (``routed``: its variant was the weight's choice; ``unmatched``: ``rollout.match``
        kept it from the canary, so it is not compared); may pull the canary (the guard).
        A late run of a revision since replaced counts for nothing."""
        entry = self._serving(served.name, served.revision, variant)
        if entry is None:
            return
        self._figures(entry, variant).record(ok, seconds, routed=routed, unmatched=unmatched)
        if variant == "canary" and entry.canary is not None and entry.canary.serving:
            self._guard(entry, entry.canary)

    def rate(self, name: str, revision: str, variant: Variant, score: float) -> bool:
        """Count a feedback score for a run of ``revision``; False when that revision no
        longer serves as ``variant`` (the figures are of the versions serving now)."""
        entry = self._serving(name, revision, variant)
        if entry is None:
            return False
        self._figures(entry, variant).rate(score)
        canary = entry.canary
        if variant == "canary" and canary is not None and canary.serving:
            self._guard(entry, canary)
        return True

    def judged(
        self, name: str, revision: str, variant: Variant, score: float | None, *, skipped: bool
    ) -> bool:
        """Count an online judgement of a run of ``revision`` (``rollout.judge``): a score,
        a judge error (``score`` None) or a sampled run skipped (``skipped``: the judge's
        queue was full); False when that revision no longer serves as ``variant``."""
        entry = self._serving(name, revision, variant)
        if entry is None:
            return False
        canary = entry.canary
        judged = self._figures(entry, variant).judged
        if skipped:
            judged.skipped += 1
            return True
        judged.add(score)
        if score is not None and canary is not None and canary.serving:
            self._guard(entry, canary)
        return True

    def _serving(self, name: str, revision: str, variant: Variant) -> AgentEntry | None:
        """``name``'s entry while ``revision`` serves as ``variant``: the figures are of
        the versions serving now."""
        entry = self.table.find(name)
        if entry is None:
            return None
        canary = entry.canary
        serving = canary.agent if variant == "canary" and canary else entry.stable
        return entry if serving is not None and serving.revision == revision else None

    def _figures(self, entry: AgentEntry, variant: Variant) -> VariantStats:
        key = (entry.name, variant)
        stats = self._stats.get(key)
        if stats is None:
            window = entry.canary.policy.guard.window if entry.canary else 200
            stats = self._stats[key] = VariantStats(window)
        return stats

    def _guard(self, entry: AgentEntry, canary: Canary) -> None:
        stable = self._stats.get((entry.name, "stable")) or VariantStats()
        reason = guard_verdict(canary.policy.guard, stable, self._stats[(entry.name, "canary")])
        if reason is None:
            return
        self.table.store(replace(entry, canary=replace(canary, pulled=Pulled.now(reason))))
        self.changes.tell(CanaryPulled(entry.name, canary.agent.revision, reason))
        logger.warning(
            "guard pulled canary {} of agent {} out of traffic: {}",
            canary.agent.revision,
            entry.name,
            reason,
        )
