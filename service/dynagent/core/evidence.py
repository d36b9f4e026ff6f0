"""What a finished run counts for besides its own series: its evidence about the version
that served it (the canary guard's window, the evidence metrics, the online judge), and
the runs of the agents it called as tools (``type: agent``), each on its own agent,
revision and variant: they never pass through the one run path of a request
(``core.runs``), so the run that called them counts them when it ends."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dynagent.core.spend import count_spend
from dynagent.events import ErrorEvent, Event, RunFinished, Usage, spent
from dynagent.registry.guard import guard_evidence
from dynagent.registry.rollouts import Served
from dynagent.runtime.agent import Variant

if TYPE_CHECKING:
    from dynagent.core.service import Service


def count_evidence(  # noqa: PLR0917
    service: Service,
    served: Served,
    variant: Variant,
    ok: bool,
    seconds: float,
    events: Sequence[Event],
    *,
    weight: str,
    unmatched: bool,
) -> None:
    """One run that counts for (``ok``) or against its version: in the guard's window (a
    sample of the split when ``weight`` chose its variant; apart when ``rollout.match``
    kept it from the canary) and the evidence metrics; an answered one is offered to the
    online judge (``rollout.judge``), which scores it after the caller has its answer."""
    service.registry.rollouts.observe(
        served, variant, ok, seconds, routed=bool(weight), unmatched=unmatched
    )
    source = "unmatched" if unmatched else "routed"
    service.metrics.observe_evidence(
        served.name, served.revision, variant, source, ok, seconds, weight
    )
    if ok:
        service.judging.offer(served, variant, events)


@dataclass(frozen=True, slots=True)
class _Version:
    name: str
    revision: str


def count_called(service: Service, nested: list[dict[str, Any]]) -> None:
    """Each called run's spend (its canary's budget included) and its evidence: a canary
    that only other agents reach is judged, and pulled, like any other."""
    for called in nested:
        name = called["agent"]
        if name not in service.registry:  # a removed agent's series are gone for good
            continue
        events = called["events"]
        revision, variant = called["revision"], called["variant"]
        usage, cost = spent(events, _price_of(service, name, revision))
        count_spend(
            service.metrics,
            service.registry.rollouts.spend,
            name,
            revision,
            variant,
            usage=usage,
            cost_usd=cost,
        )
        finished = RunFinished.of(events)
        if finished is None:  # cut off before it ended: nothing either way, as a request
            continue
        error = next((e.error_type for e in events if isinstance(e, ErrorEvent)), None)
        # Nothing of a call's own shapes it: the calling agent's model wrote only its input.
        ok = guard_evidence(error, routed=True, shaped=False)
        if ok is not None:
            seconds = finished.duration_ms / 1000
            weight, unmatched = called["weight"], called["unmatched"]
            count_evidence(
                service,
                _Version(name, revision),
                variant,
                ok,
                seconds,
                events,
                weight=weight,
                unmatched=unmatched,
            )


def _price_of(service: Service, name: str, revision: str) -> Callable[[Usage], float | None] | None:
    """What the model of ``name``'s ``revision`` costs, while the registry serves it: the
    price of a call a called run was cut off in."""
    entry = service.registry.entry(name)
    for agent in (entry.stable, entry.canary.agent if entry.canary else None):
        if agent is not None and agent.revision == revision:
            return agent.cost_of
    return None
