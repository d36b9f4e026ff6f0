"""AgentRegistry: the registry's three parts as one object, for whoever needs them all.

The service, its sources and its HTTP handlers hold one registry: ``table`` (the stable
versions by name: put, fail, remove), ``rollouts`` (canaries, traffic figures, the
guard) and ``readiness`` (ready, degraded sources). All three share one ``Changes``
(the counter waiters wake on, and the listeners told each ``RegistryEvent``). The
registry itself only answers what spans them: routing, the status, and waiting.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from dynagent.registry.attachments import Attachments
from dynagent.registry.entry import AgentEntry, RevisionRecord
from dynagent.registry.events import Listener
from dynagent.registry.readiness import Changes, Readiness
from dynagent.registry.rollouts import Rollouts
from dynagent.registry.table import AgentTable
from dynagent.runtime.agent import Agent, Variant
from dynagent.spec.agent import AgentSpec


class AgentRegistry:
    def __init__(self) -> None:
        self.feed = Changes()
        self.table = AgentTable(self.feed)
        self.rollouts = Rollouts(self.table)
        self.readiness = Readiness(self.feed)
        self.attachments = Attachments(self.feed)
        """Documents beside an agent (its evaluation suite), shown in its status."""
        self.before_read: Callable[[], None] = lambda: None
        """Called before the traffic figures are read or a canary routes (the service's
        ``RunEnds.settle``: the runs that have ended are all counted by then)."""

    @property
    def listeners(self) -> list[Listener]:
        """Told every ``RegistryEvent`` (``registry.events``), in the order they subscribed."""
        return self.feed.listeners

    @property
    def changes(self) -> int:
        """Bumped on every swap, error, addition, removal, guard action and source health
        change."""
        return self.feed.count

    @property
    def ready(self) -> bool:
        return self.readiness.ready

    @property
    def degraded(self) -> dict[str, str]:
        return self.readiness.degraded

    # -- reading (the table's, and routing through the canaries) ---------------------

    def get(self, name: str) -> Agent:
        return self.table.get(name)

    def entry(self, name: str) -> AgentEntry:
        return self.table.entry(name)

    def spec_of(self, name: str) -> AgentSpec | None:
        return self.table.spec_of(name)

    def history(self, name: str) -> list[RevisionRecord]:
        return self.table.history(name)

    def route(
        self,
        name: str,
        *,
        key: str | None = None,
        pin: Variant | None = None,
        attributes: Mapping[str, Any] | None = None,
        admitted: bool | None = None,
    ) -> tuple[Agent, Variant]:
        return self.rollouts.route(name, key=key, pin=pin, attributes=attributes, admitted=admitted)

    def route_call(self, name: str, *, key: str | None) -> tuple[Agent, Variant, bool, str]:
        """``route`` for a run one agent asks of another (``type: agent``), which has no
        request attributes of its own: the agent and variant, whether ``rollout.match``
        kept it from a serving canary, and the canary weight that chose the variant
        (``""``: none did), as ``core.routing.select`` gives them for a request."""
        canary = self.table.entry(name).canary
        if canary is not None:  # its guard and budget weigh the runs that ended before
            self.before_read()
        admitted = canary is None or canary.policy.eligible(None)
        agent, variant = self.rollouts.route(name, key=key, admitted=admitted)
        serving = canary is not None and canary.serving and not canary.held
        unmatched = serving and not admitted and variant == "stable"
        weighed = canary is not None and serving and admitted
        return agent, variant, unmatched, f"{canary.policy.weight:g}" if weighed and canary else ""

    def status(self, name: str) -> dict[str, Any]:
        """``name``'s entry, the traffic figures of its variants, its revisions and what is
        attached to it (``evals``: its suite)."""
        self.before_read()
        status = self.table.entry(name).status(self.rollouts.stats_of(name))
        status["revisions"] = [r.as_dict() for r in reversed(self.table.history(name))]
        attached = self.attachments.status_of(name)
        budget = attached.pop("budget", None)  # a canary's (``rollout.budget``): shown in it
        if budget is not None and status["canary"] is not None:
            status["canary"]["budget"] = budget
        status.update(attached)
        return status

    def __contains__(self, name: str) -> bool:
        return name in self.table

    def __iter__(self) -> Iterator[AgentEntry]:
        return iter(self.table)

    def __len__(self) -> int:
        return len(self.table)

    async def wait_for(
        self, predicate: Callable[[AgentRegistry], bool], within: float = 10.0
    ) -> None:
        """Wait until ``predicate(registry)`` holds, re-checked on every change."""
        await self.feed.wait_for(lambda: predicate(self), within)
