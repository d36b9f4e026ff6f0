"""What the runs of agents called as tools (``type: agent``) count for, each on its own
agent, revision and variant: they never pass through the one run path of a request
(``core.runs``), so the run that called them counts them when it ends."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dynagent.core.spend import count_spend
from dynagent.events import ErrorEvent, RunFinished, spent
from dynagent.registry.guard import guard_evidence

if TYPE_CHECKING:
    from dynagent.core.service import Service


@dataclass(frozen=True, slots=True)
class _Version:
    name: str
    revision: str


def count_called(service: Service, nested: list[dict[str, Any]]) -> None:
    """Each called run's spend (its canary's budget included), its evidence for the
    canary guard, and its answer for the online judge (``rollout.judge``): a canary that
    only other agents reach is judged, and pulled, like any other."""
    for called in nested:
        name = called["agent"]
        if name not in service.registry:  # a removed agent's series are gone for good
            continue
        events = called["events"]
        usage, cost = spent(events)
        count_spend(
            service.metrics,
            service.registry.rollouts.spend,
            name,
            called["revision"],
            called["variant"],
            usage=usage,
            cost_usd=cost,
        )
        _evidence(service, called, RunFinished.of(events))


def _evidence(service: Service, called: dict[str, Any], finished: RunFinished | None) -> None:
    if finished is None:  # cut off before it ended: nothing either way, as for a request
        return
    error = next((e.error_type for e in called["events"] if isinstance(e, ErrorEvent)), None)
    # Nothing of a call's own shapes it: the calling agent's model wrote only its input.
    ok = guard_evidence(error, routed=True, shaped=False)
    if ok is None:
        return
    name, revision, variant = called["agent"], called["revision"], called["variant"]
    weight, unmatched = called["weight"], called["unmatched"]
    seconds = finished.duration_ms / 1000
    served = _Version(name, revision)
    service.registry.rollouts.observe(
        served, variant, ok, seconds, routed=bool(weight), unmatched=unmatched
    )
    source = "unmatched" if unmatched else "routed"
    service.metrics.observe_evidence(name, revision, variant, source, ok, seconds, weight)
    if ok:  # answered: scored once sampled, as a request's run is
        service.judging.offer(served, variant, called["events"])
