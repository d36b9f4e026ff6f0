"""``rollout.pin_sessions``: a session keeps the variant it started on for the life of the
canary revision, whatever the weight does meanwhile. The first routing of a session is
remembered in the session store (Redis, in a fleet), keyed by agent, canary revision and
session, so every replica keeps it there."""

from __future__ import annotations

from dynagent.registry.rollouts import Rollouts
from dynagent.runtime.agent import Agent, Variant


async def pinned(
    rollouts: Rollouts, name: str, session_id: str, chosen: tuple[Agent, Variant]
) -> tuple[Agent, Variant]:
    """``chosen`` for a session's first run on this canary; its first variant afterwards."""
    canary = rollouts.table.entry(name).canary
    agent, variant = chosen
    if canary is None or not canary.serving or agent.sessions is None:
        return chosen  # a paused canary serves no session, pinned or not
    first = await agent.sessions.pin(f"{name}\x00{canary.agent.revision}\x00{session_id}", variant)
    if first == variant or first not in ("stable", "canary"):
        return chosen
    return rollouts.route(name, pin="canary" if first == "canary" else "stable")
