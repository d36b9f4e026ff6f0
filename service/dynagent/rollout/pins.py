"""``rollout.pin_sessions``: a session keeps the variant it started on for the life of the
canary revision, whatever the weight does meanwhile. The first routing of a session is
remembered in the session store (Redis, in a fleet), keyed by agent, canary revision and
session, so every replica keeps it there, with the weight that chose it
(``canary@10``).

A run of a session that started at another weight is no sample of the current weight's
split: the sample-ratio check would see the old weight's share in it (a step from 10 % to
50 % with the conversations of the 10 % step still going looks like broken routing). Such
runs still count for or against the version that served them."""

from __future__ import annotations

from dynagent.registry.rollouts import VARIANTS, Rollouts
from dynagent.runtime.agent import Agent, Variant


async def pinned(
    rollouts: Rollouts, name: str, session_id: str, chosen: tuple[Agent, Variant]
) -> tuple[tuple[Agent, Variant], bool]:
    """``chosen`` for a session's first run on this canary; its first variant afterwards.
    Also whether the current weight chose that variant (the session started at it)."""
    canary = rollouts.table.entry(name).canary
    agent, variant = chosen
    if canary is None or not canary.serving or agent.sessions is None:
        return chosen, True  # a paused canary serves no session, pinned or not
    weight = f"{canary.policy.weight:g}"
    key = f"{name}\x00{canary.agent.revision}\x00{session_id}"
    first, _, at = (await agent.sessions.pin(key, f"{variant}@{weight}")).partition("@")
    if first not in VARIANTS:
        return chosen, True  # not a pin this service wrote: the weight decides
    # A pin without its weight was written before pins carried it: an earlier step's.
    at_weight = at == weight
    if first == variant:
        return chosen, at_weight
    return rollouts.route(name, pin="canary" if first == "canary" else "stable"), at_weight
