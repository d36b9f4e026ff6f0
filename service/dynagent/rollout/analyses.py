"""``rollout.analysis`` at work: every ``interval`` seconds each serving canary with an
analysis is checked against its stable version (``dynagent.analysis``), from the fleet's
figures in Prometheus or this replica's own.

A *fail* pauses the canary fleet-wide with the figures in the reason (``by: analysis``,
written back like the guard's pulls). A progressive step advances only on a *pass*;
*inconclusive* holds it, and after ``max_inconclusive`` checks in a row at one step the
canary is paused for a person to decide. The figures count from when this replica began
the canary's analysis (and, for the split, from its current step), so the stable and the
canary are compared over the same time. Every replica makes the checks; the write-back's
compare-and-set makes one pause of them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from loguru import logger

from dynagent.analysis import (
    Check,
    error_rate_check,
    latency_check,
    sample_ratio_check,
    score_check,
)
from dynagent.analysis.distributions import Moments
from dynagent.exceptions import DynagentError
from dynagent.registry.analysis_policy import AnalysisPolicy
from dynagent.registry.entry import Canary
from dynagent.registry.facade import AgentRegistry
from dynagent.rollout._figures import (
    Figures,
    SourceError,
    prometheus_figures,
    replica_figures,
)
from dynagent.rollout._ticking import Ticking
from dynagent.rollout.decisions import RolloutDecisions

KIND = "analysis"


@dataclass(slots=True)
class AnalysisState:
    """One canary revision's analysis on this replica; its ``status()`` is the agent's
    ``analysis`` in the status."""

    revision: str
    weight: float
    max_inconclusive: int
    base: Figures | None = None
    step_base: Figures | None = None
    verdict: str = "pending"
    checks: list[Check] = field(default_factory=list)
    source: str = ""
    note: str | None = None
    inconclusive: int = 0
    checked_at: float | None = None
    due: float = 0.0

    def status(self) -> dict[str, Any]:
        return {
            "revision": self.revision,
            "verdict": self.verdict,
            "source": self.source,
            "note": self.note,
            "inconclusive": self.inconclusive,
            "max_inconclusive": self.max_inconclusive,
            "checked_at": self.checked_at,
            "checks": [check.as_dict() for check in self.checks],
        }


class CanaryAnalyses(Ticking):
    def __init__(self, registry: AgentRegistry, decisions: RolloutDecisions) -> None:
        super().__init__()
        self.registry = registry
        self.decisions = decisions
        self._states: dict[str, AnalysisState] = {}
        decisions.step_allowed = self.allows_step

    def allows_step(self, name: str) -> bool:
        """Whether ``name``'s progressive rollout may take its next step."""
        entry = self.registry.entry(name) if name in self.registry else None
        canary = entry.canary if entry else None
        if canary is None or canary.policy.analysis is None:
            return True
        state = self._states.get(name)
        return (
            state is not None
            and state.revision == canary.agent.revision
            and state.weight == canary.policy.weight
            and state.verdict == "pass"
        )

    async def _look(self) -> None:
        now = time.monotonic()
        for entry in list(self.registry):
            canary = entry.canary
            if canary is None or canary.policy.analysis is None or entry.stable is None:
                self._forget(entry.name)
                continue
            state = self._state(entry.name, canary)
            if canary.serving and now >= state.due:
                state.due = now + canary.policy.analysis.interval
                shown = state.status()
                try:
                    await self._check(entry.name, entry.stable.revision, canary, state)
                except Exception:  # one agent's analysis failing must not stop the rest
                    logger.exception("analysis of agent {} failed", entry.name)
                self._publish(entry.name, state, shown)

    def _publish(self, name: str, state: AnalysisState, shown: dict[str, Any]) -> None:
        """Tell the agent's watchers when a check changed what its status shows (the
        verdict, the figures, the inconclusive count): the status is read anew, so a live
        view follows the analysis even while no request changes the traffic. The time of
        the check alone is no change: an idle canary wakes nobody."""
        now = state.status()
        if {**now, "checked_at": None} != {**shown, "checked_at": None}:
            self.registry.attachments.put(name, KIND, state)

    def _state(self, name: str, canary: Canary) -> AnalysisState:
        state = self._states.get(name)
        revision, weight = canary.agent.revision, canary.policy.weight
        assert canary.policy.analysis is not None
        most = canary.policy.analysis.max_inconclusive
        if state is None or state.revision != revision:
            state = self._states[name] = AnalysisState(revision, weight, most)
            self.registry.attachments.put(name, KIND, state)
        elif state.weight != weight:  # a new step: the split counts afresh
            state.weight, state.step_base, state.inconclusive = weight, None, 0
            state.verdict = "pending"
        state.max_inconclusive = most  # the rollout block may change under one revision
        return state

    def _forget(self, name: str) -> None:
        if self._states.pop(name, None) is not None:
            self.registry.attachments.remove(name, KIND)

    async def _check(self, name: str, stable: str, canary: Canary, state: AnalysisState) -> None:
        policy = canary.policy.analysis
        assert policy is not None
        figures = await self._figures(name, stable, canary, policy, state)
        if figures is None:
            state.checks, state.checked_at = [], time.time()
            await self._decide(name, canary, policy, state)
            return
        if state.base is None or (since := figures.since(state.base)) is None:
            state.base = state.step_base = figures  # the start, or a replica restarted
            since = figures.since(figures)
            assert since is not None
        if state.step_base is None or (step := figures.since(state.step_base)) is None:
            state.step_base = figures
            step = figures.since(figures)
            assert step is not None
        if state.source == "replica":  # a replica's window: its own totals, no deltas,
            # but the split still counts from the step: the weight it is compared with
            since, step = figures, replace(figures, routed=step.routed)
        state.checks = _checks(policy, since, step, canary.policy.weight)
        state.checked_at = time.time()
        await self._decide(name, canary, policy, state)

    async def _figures(
        self,
        name: str,
        stable: str,
        canary: Canary,
        policy: AnalysisPolicy,
        state: AnalysisState,
    ) -> Figures | None:
        if policy.prometheus is None:
            state.source, state.note = "replica", "no Prometheus configured: this replica's figures"
            return replica_figures(self.registry.rollouts.stats_of(name), canary.policy.shadow > 0)
        assert self._session is not None
        try:
            figures = await prometheus_figures(
                self._session,
                policy.prometheus,
                name,
                (stable, canary.agent.revision),
                canary.policy.weight,
            )
        except SourceError as exc:
            # Falling back to this replica's figures would judge on a part of the traffic
            # with a different baseline: hold instead, and say why.
            if state.note != str(exc):  # once when it starts failing, not every check
                logger.warning("analysis of agent {}: {}", name, exc)
            state.source, state.note = "prometheus", str(exc)
            return None
        state.source, state.note = "prometheus", None
        return figures

    async def _decide(
        self, name: str, canary: Canary, policy: AnalysisPolicy, state: AnalysisState
    ) -> None:
        verdicts = [check.verdict for check in state.checks]
        failed = [check for check in state.checks if check.verdict == "fail"]
        if failed:
            state.verdict = "fail"
            reason = "analysis: " + "; ".join(f"{c.name}: {c.reason}" for c in failed)
            await self._pause(name, reason)
            return
        if verdicts and all(v == "pass" for v in verdicts):
            state.verdict, state.inconclusive = "pass", 0
            return
        state.verdict = "inconclusive"
        state.inconclusive += 1
        if state.inconclusive >= policy.max_inconclusive:
            held = [f"{c.name}: {c.reason}" for c in state.checks if c.verdict == "inconclusive"]
            held = held or [state.note or "no figures"]
            reason = (
                f"analysis: inconclusive after {state.inconclusive} checks at "
                f"{canary.policy.weight:g} %: " + "; ".join(held)
            )
            await self._pause(name, reason)

    async def _pause(self, name: str, reason: str) -> None:
        logger.warning("analysis pauses the canary of agent {}: {}", name, reason)
        try:
            await self.decisions.pause(name, reason[:4000], "analysis")
        except DynagentError as exc:
            logger.warning("agent {} canary: the pause could not be written: {}", name, exc)


def _checks(policy: AnalysisPolicy, since: Figures, step: Figures, weight: float) -> list[Check]:
    checks = [
        error_rate_check(
            (since.requests["stable"], since.errors["stable"]),
            (since.requests["canary"], since.errors["canary"]),
            confidence=policy.confidence,
            max_increase=policy.max_error_increase,
            min_requests=policy.min_requests,
        )
    ]
    if policy.latency is not None:
        checks.append(
            latency_check(
                since.latency["stable"],
                since.latency["canary"],
                quantile=policy.latency.quantile,
                max_ratio=policy.latency.max_ratio,
                floor_ms=policy.latency.floor_ms,
                confidence=policy.confidence,
                min_requests=policy.min_requests,
            )
        )
    if policy.scores is not None:
        bounds = policy.scores
        empty = Moments(0, 0.0)
        checks.append(
            score_check(
                since.scores.get("stable", empty),
                since.scores.get("canary", empty),
                min_score=bounds.min_score,
                max_drop=bounds.max_drop,
                confidence=policy.confidence,
                min_scores=bounds.min_scores,
            )
        )
    if policy.sample_ratio and step.routed:
        checks.append(sample_ratio_check(step.routed["stable"], step.routed["canary"], weight))
    return checks
