"""Rollout decisions written where the canary is defined, so that the fleet agrees.

A guard's pull takes effect in this replica at once (``Rollouts``), then is
recorded as ``rollout.paused: {reason, at, by}`` in the canary's document — its file,
or its Nacos dataId — by a compare-and-set on the text that was read. Replicas that
pull at the same moment make one write: the others' compare fails, they read again and
find the pause already there. Every replica then stops routing to the canary as soon as
the change reaches it, and a restarted replica reads the pause back. A pause by hand
(``dynagent rollout pause NAME``) is the same edit with the operator's name in ``by``;
resuming is the reverse edit (``dynagent rollout resume NAME``, or removing the block).
A YAML document keeps its own lines and comments: only the changed ``rollout`` entries are
rewritten (``_yaml_lines``).
"""

from __future__ import annotations

import asyncio
import copy
import json
import random
import time
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

import yaml
from loguru import logger

from dynagent.deadlines import cancelled
from dynagent.exceptions import ConfigError, Conflict, DynagentError
from dynagent.factories.base import AgentBuilderFactory, document_name
from dynagent.registry.canary import Pulled, load_canary
from dynagent.registry.entry import Canary
from dynagent.registry.events import CanaryPulled, RegistryEvent
from dynagent.registry.rollouts import Rollouts
from dynagent.rollout._yaml_lines import edited_lines
from dynagent.rollout.history import recorded
from dynagent.runtime.agent import Agent
from dynagent.spec.agent import Format, format_of, parse_document

ATTEMPTS = 8
"""Reads and compare-and-sets before giving up (each failure means someone else wrote)."""
RETRY_PAUSE = 0.05
"""Seconds before the second attempt, doubling after each failure up to ``MAX_RETRY_PAUSE``
(with jitter, so that two replicas do not retry in step). Nacos answers a read just after
a write with the old text until its dump of the write lands, which on a busy server took
longer than eight pauses of 50 ms: a gate's finished run was then never recorded."""
MAX_RETRY_PAUSE = 1.0

STEP_TICK = 0.2
"""Seconds between looks at the progressive rollouts (a step's clock runs to this)."""

RolloutEdit = Callable[[dict[str, Any]], bool]
"""Changes a canary's ``rollout`` mapping in place; False when there is nothing to change
(the decision is already recorded)."""


class RolloutDecisions:
    """Writes the registry's rollout decisions back into the canaries' documents."""

    def __init__(self, rollouts: Rollouts, factories: dict[str, AgentBuilderFactory]) -> None:
        self.rollouts = rollouts
        self.factories = factories
        self.writes = 0
        """Documents this replica changed (what tests and benchmarks count)."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._busy: set[str] = set()
        """Agents whose step or promotion is being written now."""
        self._ticker: asyncio.Task[None] | None = None
        self.step_allowed: Callable[[str], bool] = lambda name: True
        """Whether an agent's progressive rollout may step now (its analysis passed)."""
        self.ticks = 0
        """Rounds of step decisions made (what a test waits on to see a step held)."""
        self._ticked: asyncio.Condition | None = None

    def attach(self) -> None:
        """Record every pull of this replica's guard from now on."""
        self.rollouts.changes.listeners.append(self._changed)

    def start(self) -> None:
        """Take the steps of progressive rollouts from now on (in the running loop)."""
        if self._ticker is None:
            self._ticker = asyncio.get_running_loop().create_task(self._tick())

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(STEP_TICK)
            now = time.time()
            for entry in list(self.rollouts.table):
                canary = entry.canary
                if canary is None or not canary.serving or canary.held or entry.name in self._busy:
                    continue
                healthy = canary.healthy(self.rollouts.canary_stats(entry.name))
                done = canary.policy.step_done(canary.step_since, healthy, now)
                held = canary.policy.awaits_approval(canary.agent.revision)
                if done and not held and self.step_allowed(entry.name):
                    self._busy.add(entry.name)
                    self._spawn(self._step(entry.name, canary))
            self.ticks += 1
            if self._ticked is not None:
                async with self._ticked:
                    self._ticked.notify_all()

    async def wait_ticks(self, count: int, within: float = 10.0) -> None:
        """Wait until ``count`` more rounds of step decisions were made."""
        if self._ticked is None:
            self._ticked = asyncio.Condition()
        target = self.ticks + count
        async with self._ticked:
            await asyncio.wait_for(self._ticked.wait_for(lambda: self.ticks >= target), within)

    async def _step(self, name: str, canary: Canary) -> None:
        policy, revision = canary.policy, canary.agent.spec.revision
        weight = policy.next_weight()
        step_at = datetime.now(UTC).isoformat(timespec="milliseconds")

        def advance(rollout: dict[str, Any]) -> bool:
            if rollout.get("paused") or rollout.get("weight", policy.steps[0]) != policy.weight:
                return False  # paused, or another replica took this step first
            rollout["weight"], rollout["step_at"] = weight, step_at
            return True

        try:
            if weight is not None:
                step = recorded(advance, "step", "rollout", **{"from": policy.weight, "to": weight})
                if await self.edit(name, revision, step):
                    logger.info("agent {} canary: step to {:g}%", name, weight)
            elif policy.auto_promote:
                await self._promote(name, canary)
        except DynagentError as exc:
            logger.warning("agent {} canary: the rollout could not advance: {}", name, exc)
        finally:
            self._busy.discard(name)

    async def _promote(self, name: str, canary: Canary) -> None:
        """The last step is done: the canary's spec becomes the stable definition."""
        agent = canary.agent
        factory = self.factories[agent.factory]
        text = await factory.read(name, "canary", agent.source)
        still = _edited(text, name, agent.spec.revision, _target(name, agent), lambda _: True)
        if still is None:
            return  # the canary changed or ended meanwhile (another replica promoted it)
        entry = self.rollouts.table.entry(name)
        await factory.write(
            name, "stable", agent.spec, entry.stable.source if entry.stable else None
        )
        await factory.write(name, "canary", None, agent.source)
        self.writes += 1
        logger.info("agent {} canary {} promoted after its last step", name, agent.revision)

    def _changed(self, event: RegistryEvent) -> None:
        if not isinstance(event, CanaryPulled):
            return
        canary = self._canary(event.name)
        if canary is not None and canary.pulled is not None and not canary.pulled.recorded:
            self._spawn(self._record_pull(event.name, canary, canary.pulled))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _record_pull(self, name: str, canary: Canary, pulled: Pulled) -> None:
        revision = canary.agent.spec.revision
        paused = pulled.as_paused(canary.agent.revision)

        def pause(rollout: dict[str, Any]) -> bool:
            if rollout.get("paused"):
                return False  # another replica (or a person) recorded it first
            rollout["paused"] = paused
            return True

        try:
            change = recorded(pause, "pause", pulled.by, reason=pulled.reason)
            wrote = await self.edit(name, revision, change)
        except DynagentError as exc:
            logger.warning(
                "the guard's pull of {}'s canary stays in this replica only: {}", name, exc
            )
            return
        if wrote:
            logger.info("recorded the pull of {}'s canary in its definition", name)

    async def pause(self, name: str, reason: str, by: str) -> bool:
        """Record ``rollout.paused: {reason, at, by, revision}`` in the canary of ``name``;
        False if a pause of this canary revision was already recorded.

        Nothing changes in this replica until the edited document comes back through its
        watcher, as on every other replica: the config center stays the one truth."""
        canary = self._canary(name)
        if canary is None:
            raise Conflict(f"agent {name!r} has no canary to pause")
        revision = canary.agent.revision
        block = Pulled.now(reason, by).as_paused(revision)

        def pause(rollout: dict[str, Any]) -> bool:
            current = rollout.get("paused")
            if isinstance(current, dict) and current.get("revision") in (None, revision):
                return False  # already paused (another replica, the guard or a person)
            rollout["paused"] = block  # replaces a pause of an earlier revision
            return True

        change = recorded(pause, "pause", by, reason=reason)
        wrote = await self.edit(name, canary.agent.spec.revision, change)
        if wrote:
            logger.info("agent {} canary {}: pause by {} written", name, revision, by)
        return wrote

    async def approve(self, name: str, by: str) -> bool:
        """Record ``rollout.approved: {by, at, revision}`` in the canary of ``name``, so its
        progressive rollout may pass ``rollout.approval.before_weight``; False if this
        revision was already approved."""
        canary = self._canary(name)
        if canary is None:
            raise Conflict(f"agent {name!r} has no canary to approve")
        if canary.policy.approval is None:
            raise Conflict(f"the canary of agent {name!r} has no rollout.approval to give")
        revision = canary.agent.revision
        at = datetime.now(UTC).isoformat(timespec="milliseconds")

        def approve(rollout: dict[str, Any]) -> bool:
            current = rollout.get("approved")
            if isinstance(current, dict) and current.get("revision") == revision:
                return False
            rollout["approved"] = {"by": by, "at": at, "revision": revision}
            return True

        change = recorded(approve, "approve", by)
        wrote = await self.edit(name, canary.agent.spec.revision, change)
        if wrote:
            logger.info("agent {} canary {}: approved by {}", name, revision, by)
        return wrote

    async def resume(self, name: str, by: str = "operator") -> bool:
        """Remove ``rollout.paused`` from the canary of ``name``; False if it had none."""
        canary = self._canary(name)
        if canary is None:
            raise Conflict(f"agent {name!r} has no canary to resume")

        def unpause(rollout: dict[str, Any]) -> bool:
            return rollout.pop("paused", None) is not None

        change = recorded(unpause, "resume", by)
        wrote = await self.edit(name, canary.agent.spec.revision, change)
        if canary.pulled is not None and not canary.pulled.recorded:
            self.rollouts.resume_canary(name)  # a pull never written back: lift it here
        return wrote

    async def edit(self, name: str, revision: str, change: RolloutEdit) -> bool:
        """Apply ``change`` to the rollout block of the canary document of ``name``, while it
        still defines spec ``revision``; True when this call wrote it."""
        for attempt in range(ATTEMPTS):
            canary = self._canary(name)
            if canary is None or canary.agent.spec.revision != revision:
                return False  # the canary changed or ended meanwhile: the decision is moot
            factory = self.factories[canary.agent.factory]
            source = canary.agent.source
            text = await factory.read(name, "canary", source)
            edited = _edited(text, name, revision, _target(name, canary.agent), change)
            if edited is None:
                return False
            if text is not None and await factory.replace(name, "canary", source, edited, text):
                self.writes += 1
                return True
            pause = min(MAX_RETRY_PAUSE, RETRY_PAUSE * 2**attempt)
            await asyncio.sleep(pause * random.uniform(0.5, 1.5))
        raise Conflict(f"the canary definition of {name!r} kept changing; the edit was not written")

    def _canary(self, name: str) -> Canary | None:
        entry = self.rollouts.table.find(name)
        return entry.canary if entry is not None else None

    async def aclose(self, within: float = 5.0) -> None:
        """Let pending writes finish (for up to ``within`` seconds), then cancel them."""
        if self._ticker is not None:
            await cancelled(self._ticker)
        if not self._tasks:
            return
        _, pending = await asyncio.wait(set(self._tasks), timeout=within)
        await cancelled(*pending)


def _target(name: str, agent: Agent) -> str:
    return document_name(name, "canary", agent.source, "")


def _edited(
    text: str | None, name: str, revision: str, target: str, change: RolloutEdit
) -> str | None:
    """``text`` with ``change`` applied to its rollout block, or None when it is not the
    canary of ``revision`` any more, cannot be read, or needs no change."""
    if text is None:
        return None
    fmt = format_of(target)
    try:
        data = parse_document(text, fmt)
        spec, _ = load_canary(data, source=target, name=name)
    except ConfigError:
        return None  # a broken edit is the author's to fix; never overwrite it
    rollout = data.get("rollout") if isinstance(data, dict) else None
    if spec.revision != revision or not isinstance(rollout, dict):
        return None
    before = copy.deepcopy(rollout)
    if not change(rollout):
        return None
    return _written(text, fmt, data, before, rollout)


def _written(
    text: str, fmt: Format, data: Any, before: dict[str, Any], rollout: dict[str, Any]
) -> str:
    """The edited document: for YAML its own lines, comments included, with the changed
    rollout entries rewritten; dumped whole only when that does not read back as ``data``."""
    if fmt == "json":
        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    kept = edited_lines(text, "rollout", before, rollout)
    if kept is not None:
        try:
            if parse_document(kept, fmt) == data:
                return kept
        except ConfigError:
            pass
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
