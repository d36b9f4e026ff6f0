"""Online scores (``rollout.judge``): a sample of the live runs of both variants of a
canaried agent, scored by a judge agent in the background once they have answered.

The caller never waits: a sampled run is handed over after its answer is out (the run
path calls ``offer`` as it records the run), and ``offer`` only starts a task. Each
agent has at most ``rollout.judge.queue`` sampled runs waiting or in judgement and
``concurrency`` judge runs in flight; a sampled run past the queue is skipped and
counted. A judge answer that is no score is counted as an error, never as a score.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass

from loguru import logger

from dynagent.core.metrics import Metrics
from dynagent.evals.capture import content_text
from dynagent.evals.judge import Judge
from dynagent.events import Event, FinalOutput, RunStarted
from dynagent.exceptions import DynagentError
from dynagent.registry.facade import AgentRegistry
from dynagent.registry.judged import JudgePolicy
from dynagent.registry.rollouts import Served
from dynagent.runtime.agent import Variant

MAX_TEXT = 20_000
"""Characters of a run's input and answer kept for its judgement (the judge sees less)."""


@dataclass(frozen=True, slots=True)
class _Sampled:
    """One answered run, as the judge will see it."""

    agent: str
    revision: str
    variant: Variant
    input: str
    answer: str


class _Lane:
    """One agent's judge queue: how many sampled runs wait or are judged, and the limit
    on judge runs in flight."""

    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency
        self.limit = asyncio.Semaphore(concurrency)
        self.queued = 0


class OnlineJudge:
    """Samples answered runs of agents whose canary has ``rollout.judge`` and scores them."""

    def __init__(self, registry: AgentRegistry, metrics: Metrics) -> None:
        self.registry = registry
        self.metrics = metrics
        self._lanes: dict[str, _Lane] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._idle = asyncio.Event()
        self._idle.set()

    def policy(self, name: str) -> JudgePolicy | None:
        entry = self.registry.rollouts.table.find(name)
        canary = entry.canary if entry is not None else None
        return canary.policy.judge if canary is not None else None

    def offer(self, agent: Served, variant: Variant, events: Sequence[Event]) -> None:
        """A run of ``agent`` (an agent, or the name and revision of one another agent
        called as a tool) has answered: score it if it is sampled. Never waits."""
        policy = self.policy(agent.name)
        if policy is None or random.random() >= policy.sample:
            return
        lane = self._lane(agent.name, policy)
        if lane.queued >= policy.queue:
            self._skipped(agent, variant)
            return
        sampled = _sampled(agent, variant, events)
        if sampled is None:
            return
        lane.queued += 1
        task = asyncio.get_running_loop().create_task(self._judge(sampled, policy, lane))
        self._tasks.add(task)
        self._idle.clear()
        task.add_done_callback(self._done)

    def _lane(self, name: str, policy: JudgePolicy) -> _Lane:
        lane = self._lanes.get(name)
        if lane is None or (lane.concurrency != policy.concurrency and not lane.queued):
            lane = self._lanes[name] = _Lane(policy.concurrency)
        return lane

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not self._tasks:
            self._idle.set()

    async def idle(self) -> None:
        """Until no sampled run waits or is judged (for tests and benchmarks); the runs
        that have ended are offered first (``RunEnds``, through the registry)."""
        self.registry.before_read()
        await self._idle.wait()

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _judge(self, run: _Sampled, policy: JudgePolicy, lane: _Lane) -> None:
        try:
            async with lane.limit:
                score, reason = await self._score(run, policy)
        except Exception as exc:  # a background task: nothing above it to tell
            score, reason = None, f"the judge failed: {type(exc).__name__}: {exc}"
        finally:
            lane.queued -= 1
        counted = self.registry.rollouts.judged(
            run.agent, run.revision, run.variant, score, skipped=False
        )
        if not counted:
            return
        outcome = "error" if score is None else "scored"
        self.metrics.online_judged.labels(run.agent, run.variant, outcome).inc()
        if score is None:
            logger.warning("online judge of {} ({}): {}", run.agent, run.variant, reason)
            return
        labels = (run.agent, run.revision, run.variant, "online")
        self.metrics.judge_score.labels(*labels).observe(score)

    async def _score(self, run: _Sampled, policy: JudgePolicy) -> tuple[float | None, str]:
        """The judge's score of ``run``, or None and why there is none."""
        try:
            judge_agent = self.registry.get(policy.agent)
        except DynagentError as exc:
            return None, f"no judge agent {policy.agent!r}: {exc}"
        judge = Judge(judge_agent, concurrency=1, timeout=policy.timeout)
        verdict = await judge.rubric(policy.rubric, run.input, run.answer)
        return (verdict.score if verdict.passed else None), verdict.reason

    def _skipped(self, agent: Served, variant: Variant) -> None:
        rollouts = self.registry.rollouts
        if rollouts.judged(agent.name, agent.revision, variant, None, skipped=True):
            self.metrics.online_judged.labels(agent.name, variant, "skipped").inc()


def _sampled(agent: Served, variant: Variant, events: Sequence[Event]) -> _Sampled | None:
    """The run's input (its last user message) and answer, from its (masked) events."""
    started = next((e for e in events if isinstance(e, RunStarted)), None)
    final = next((e for e in reversed(events) if isinstance(e, FinalOutput)), None)
    if started is None or final is None:
        return None
    text = last_user_text(started.input)
    output = final.output
    answer = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
    return _Sampled(agent.name, agent.revision, variant, text[:MAX_TEXT], answer[:MAX_TEXT])


def last_user_text(value: object) -> str:
    """A run's input as text: itself, or the text of its last user message."""
    if isinstance(value, str):
        return value
    for item in reversed(value if isinstance(value, list) else []):
        if isinstance(item, dict) and item.get("role") == "user":
            return content_text(item.get("content"))
    return ""
