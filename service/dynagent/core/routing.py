"""What a run is asked (``RunRequest``), and which version serves it: the router's choice
by weight and sticky key, narrowed by ``rollout.match`` and kept by
``rollout.pin_sessions``; and whether the run is a sample of the weight's split, which the
sample-ratio check compares with the weight."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dynagent.core.auth import Caller
from dynagent.exceptions import BadRequest
from dynagent.registry.canary import routing_key
from dynagent.rollout.pins import pinned
from dynagent.runtime.agent import Agent, AgentInput, Variant
from dynagent.runtime.options import RunOptions
from dynagent.sessions.scope import session_key

if TYPE_CHECKING:
    from dynagent.core.service import Service


def split_model_name(model: str) -> tuple[str, Variant | None]:
    """``name@canary`` → (name, canary)."""
    name, _, variant = model.partition("@")
    if not variant:
        return name, None
    if variant not in ("stable", "canary"):
        raise BadRequest(f"unknown variant {variant!r} in {model!r}: use @stable or @canary")
    return name, variant  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class RunRequest:
    name: str
    input: AgentInput
    session_id: str | None
    variables: Mapping[str, str]
    pin: Variant | None
    endpoint: str
    options: RunOptions | None = None
    """What the caller adds to this run (OpenAI routes: client tools, schema, settings)."""
    sticky: str | None = None
    """The canary sticky key when there is no session (OpenAI's ``user``)."""
    canary_key: str | None = None
    """The caller's own canary routing key (``X-Canary-Key``), for ``sticky_key: header``."""
    carrier: Mapping[str, str] = field(default_factory=dict)
    """Where the caller's trace context is read from (W3C ``traceparent`` headers): the
    request's headers, which ``rollout.match`` reads too."""
    metadata: Mapping[str, str] = field(default_factory=dict)
    """The request's ``metadata`` (OpenAI routes), for ``rollout.match``."""


async def select(
    service: Service, who: Caller, run: RunRequest
) -> tuple[Agent, Variant, bool, str]:
    """The agent and variant that serve ``run``; whether ``rollout.match`` kept it from a
    serving canary (the stable then serves it whatever the weight: it is no sample of the
    split the sample-ratio check compares with the weight); and the canary weight that
    chose the variant (``""`` when no weight chose it), so that the split of a step counts
    only the runs routed at that step's weight."""
    who.check_agent(run.name)
    registry = service.registry
    canary = registry.entry(run.name).canary
    if canary is not None:  # its guard and budget weigh the runs that ended before
        registry.before_read()
    key = None  # without a canary every request is the stable's: no key to keep
    if canary is not None:
        key = routing_key(
            canary.policy.sticky_key,
            session=run.session_id or run.sticky,
            header=run.canary_key,
            api_key=who.key_digest,
        )
    admitted = True
    if canary is not None and canary.policy.match and run.pin is None:
        admitted = canary.policy.eligible(_attributes(who, run))
    chosen = registry.route(run.name, key=key, pin=run.pin, admitted=admitted)
    scoped = session_key_of(who, run)
    sampled = True  # the current weight chose the variant
    if run.pin is None and scoped and canary is not None and canary.policy.pin_sessions:
        chosen, sampled = await pinned(registry.rollouts, run.name, scoped, chosen)
    serving = canary is not None and canary.serving and not canary.held
    unmatched = serving and not admitted and chosen[1] == "stable"
    weighed = canary is not None and serving and admitted and run.pin is None and sampled
    return (*chosen, unmatched, f"{canary.policy.weight:g}" if weighed and canary else "")


def _attributes(who: Caller, run: RunRequest) -> dict[str, Any]:
    """What ``rollout.match`` may read of a request."""
    return {
        "caller": who.name,
        "headers": run.carrier,
        "variables": run.variables,
        "metadata": run.metadata,
        "user": run.sticky or "",
    }


def session_key_of(who: Caller, run: RunRequest) -> str | None:
    """The store key of the run's session: the caller's identity, the agent, its id.
    Every route that runs an agent comes through here, so none can skip the scope."""
    if run.session_id is None:
        return None
    return session_key(who.principal, run.name, run.session_id)
