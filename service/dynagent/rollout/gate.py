"""The gate of a canary: its evaluation suite runs once for the fleet, and the canary takes
live traffic only once the suite passed for exactly its revision.

Every replica judges each gated canary the same way (``registry.gate``): the record in
``rollout.gate_record`` of the canary's document must be of the canary revision, the
suite revision and the judge revision serving now. Until it is, the canary is held (its
weight counts as 0; shadow traffic still runs). A replica that sees no record, or a
stale one, claims the run by a compare-and-set on the document (``rollout.decisions``,
as the progressive steps are taken): the one write that lands wins, the others read
the claim back and wait. The winner renews its claim while the suite runs; a claim not
renewed in ``CLAIM_SECONDS`` (its replica crashed) is stale, and another replica takes
it. The result is written into the same document, so every replica — and one started
later — sees it: a pass opens the gate, a failure also writes ``rollout.paused`` by
``gate`` with the suite's reason.

A canary defined in code (no document to write) keeps its record in this replica only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from loguru import logger

from dynagent.deadlines import cancelled
from dynagent.evals.record import KIND, SuiteRecord
from dynagent.evals.runner import SuiteRun
from dynagent.evals.spec import EvalSuite
from dynagent.exceptions import Conflict, DynagentError
from dynagent.registry.canary import Pulled
from dynagent.registry.entry import Canary
from dynagent.registry.facade import AgentRegistry
from dynagent.registry.gate import (
    GateKey,
    GatePolicy,
    GateRecord,
    GateState,
    gate_state,
    stamp,
    written,
)
from dynagent.rollout._gate_run import GateRun, GateRunObserver, KeptRuns, gate_rule, run_gate
from dynagent.rollout.decisions import RolloutDecisions
from dynagent.rollout.history import recorded
from dynagent.runtime.agent import Agent

CLAIM_SECONDS = 30.0
"""How long a claim holds without renewal; its replica renews it every third of that."""
TICK = 0.5
"""Seconds between looks at the gated canaries when nothing changed (an expired claim);
any change in the registry (a canary, a suite, a judge) is looked at when it happens."""
RETRY_SECONDS = 5.0
"""After a claim or a result could not be written (the config center out), the wait
before this replica tries again."""
KEPT_RUNS = 20
"""Gate runs this replica keeps (``CanaryGate.runs``)."""


@dataclass(frozen=True, slots=True)
class _Inputs:
    key: GateKey
    suite: EvalSuite | None
    judge: Agent | None
    missing: str | None
    """Why the suite cannot run now (no suite, its judge not served)."""


def _still_ours(current: GateRecord | None, claim: GateRecord) -> bool:
    """Whether the record read is this replica's ``claim`` (or older than it). A read may
    lag a write (Nacos answers the old text for a moment): writing over what looks older
    is safe, as the compare-and-set then fails and the edit reads again."""
    return current is None or current.run_id == claim.run_id or current.at < claim.at


class CanaryGate:
    """Judges, claims, runs and records the gates of this registry's canaries."""

    def __init__(
        self, registry: AgentRegistry, decisions: RolloutDecisions, replica: str | None = None
    ) -> None:
        self.registry = registry
        self.decisions = decisions
        self.replica = replica or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        """Who claims runs in records (``by``): unique per running service."""
        self.observers: list[GateRunObserver] = []
        """Told of each gate run this replica makes (the service records them as
        evaluation runs with trigger ``gate``)."""
        self._kept = KeptRuns(KEPT_RUNS)
        self._local: dict[str, GateRecord] = {}
        """Records of canaries whose document cannot be written (defined in code)."""
        self._busy: set[str] = set()
        self._retry_at: dict[str, float] = {}
        self._unwritten: dict[str, tuple[GateRecord, SuiteRun]] = {}
        """A finished run whose result could not be written (the config center out), with
        the claim it ran under: written when the center is back, not run again once the
        claim has expired (a suite costs its judge's and its model's calls)."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._ticker: asyncio.Task[None] | None = None

    @property
    def runs(self) -> deque[SuiteRun]:
        """The gate runs this replica made, newest last."""
        return self._kept.runs

    def attach(self) -> None:
        """Judge every canary's gate as it is stored from now on."""
        self.registry.rollouts.gatekeeper = self.judge

    def start(self) -> None:
        if self._ticker is None:
            self._ticker = asyncio.get_running_loop().create_task(self._tick())

    # -- judging -----------------------------------------------------------------

    def judge(self, canary: Canary) -> GateState | None:
        """The gate state of ``canary`` now (None without ``rollout.gate``)."""
        policy = canary.policy.gate
        if policy is None:
            return None
        inputs = self._inputs(canary.agent, policy)
        return gate_state(self._record(canary), inputs.key, time.time(), inputs.missing)

    def _record(self, canary: Canary) -> GateRecord | None:
        written, local = canary.policy.gate_record, self._local.get(canary.agent.name)
        if local is not None and (written is None or local.at >= written.at):
            return local
        return written

    def _inputs(self, agent: Agent, policy: GatePolicy) -> _Inputs:
        """The key a record must match, the suite, the judge, and why it cannot run."""
        owner = policy.suite or agent.name
        held = self.registry.attachments.get(owner, KIND)
        suite = held.suite if isinstance(held, SuiteRecord) else None
        if suite is None:
            absent = f"no evaluation suite: publish {owner}.evals.yaml"
            return _Inputs(GateKey(agent.revision, None, None), None, None, absent)
        judge: Agent | None = None
        missing: str | None = None
        if suite.judge is not None:
            entry = self.registry.table.find(suite.judge.agent)
            judge = entry.stable if entry is not None else None
            if judge is None:
                missing = f"the suite's judge agent {suite.judge.agent!r} is not served"
        label = f"{judge.name}@{judge.revision}" if judge is not None else None
        return _Inputs(GateKey(agent.revision, suite.revision, label), suite, judge, missing)

    async def _tick(self) -> None:
        feed = self.registry.feed
        while True:
            seen = feed.count
            with contextlib.suppress(TimeoutError):  # at the latest: a claim may expire
                await feed.wait_for(lambda: feed.count != seen, within=TICK)  # noqa: B023
            for entry in list(self.registry):
                canary = entry.canary
                if canary is not None and canary.policy.gate is not None:
                    self._review(entry.name, canary, canary.policy.gate)

    def _review(self, name: str, canary: Canary, policy: GatePolicy) -> None:
        inputs = self._inputs(canary.agent, policy)
        state = gate_state(self._record(canary), inputs.key, time.time(), inputs.missing)
        self.registry.rollouts.set_gate(name, state)
        kept = self._unwritten.get(name)
        if kept is not None and kept[0].key() != inputs.key:
            del self._unwritten[name]  # what it judged no longer serves
            kept = None
        runnable = (state.state in ("pending", "stale") or kept is not None) and (
            inputs.suite is not None
        )
        waiting = self._retry_at.get(name, 0.0) > time.monotonic()
        if runnable and inputs.missing is None and name not in self._busy and not waiting:
            self._busy.add(name)
            self._spawn(self._gate(name, canary, policy, inputs))

    # -- running -----------------------------------------------------------------

    async def _gate(self, name: str, canary: Canary, policy: GatePolicy, inputs: _Inputs) -> None:
        try:
            kept = self._unwritten.pop(name, None)
            if kept is not None:
                claim, run = kept
            else:
                run_id = secrets.token_hex(8)
                claimed = await self._claim(name, canary, inputs.key, run_id)
                if claimed is None:
                    return
                run = await self._claimed_run(name, canary, claimed, policy, inputs, run_id)
                claim = claimed
            try:
                await self._result(name, canary, claim, run)
            except DynagentError:
                self._unwritten[name] = (claim, run)
                raise
        except DynagentError as exc:
            self._retry_at[name] = time.monotonic() + RETRY_SECONDS
            logger.warning("agent {} canary gate: the run could not be recorded: {}", name, exc)
        finally:
            self._busy.discard(name)

    async def _claimed_run(  # noqa: PLR0917
        self,
        name: str,
        canary: Canary,
        claim: GateRecord,
        policy: GatePolicy,
        inputs: _Inputs,
        run_id: str,
    ) -> SuiteRun:
        """The suite's run under ``claim``, renewed while it runs."""
        assert inputs.suite is not None
        renewing = asyncio.get_running_loop().create_task(self._renew(name, canary, claim))
        try:
            return await self._run(canary, policy, inputs.suite, inputs.judge, run_id)
        finally:
            await cancelled(renewing)

    async def _claim(
        self, name: str, canary: Canary, key: GateKey, run_id: str
    ) -> GateRecord | None:
        """Write a claim of the run; the claim, when this replica's write landed."""
        now = time.time()
        claim = GateRecord(
            state="running",
            revision=key.revision,
            suite_revision=key.suite_revision,
            judge=key.judge,
            run_id=run_id,
            at=stamp(now),
            by=self.replica,
            until=stamp(now + CLAIM_SECONDS),
        )

        def take(rollout: dict[str, Any]) -> bool:
            current = GateRecord.read(rollout)
            if current is not None and gate_state(current, key, time.time()).state not in (
                "pending",
                "stale",
            ):
                return False  # another replica claimed it, or its result is in
            rollout["gate_record"] = written(claim)
            return True

        if not await self._write(name, canary, take, claim):
            return None
        logger.info("agent {} canary {}: this replica runs its gate", name, key.revision)
        return claim

    async def _write(
        self,
        name: str,
        canary: Canary,
        change: Callable[[dict[str, Any]], bool],
        record: GateRecord,
    ) -> bool:
        """Apply ``change`` to the canary's document; a canary with no document to write
        keeps ``record`` in this replica."""
        if canary.agent.source.kind == "code":
            self._local[name] = record
            self.registry.rollouts.set_gate(name, self.judge(canary))
            return True
        return await self.decisions.edit(name, canary.agent.spec.revision, change)

    async def _renew(self, name: str, canary: Canary, claim: GateRecord) -> None:
        while True:
            await asyncio.sleep(CLAIM_SECONDS / 3)

            def extend(rollout: dict[str, Any]) -> bool:
                if not _still_ours(GateRecord.read(rollout), claim):
                    return False
                until = stamp(time.time() + CLAIM_SECONDS)
                rollout["gate_record"] = written(claim.model_copy(update={"until": until}))
                return True

            with contextlib.suppress(DynagentError):
                local = self._local.get(name)
                if local is not None and local.run_id == claim.run_id:
                    continue  # a record in this replica needs no renewal
                await self.decisions.edit(name, canary.agent.spec.revision, extend)

    async def _run(
        self, canary: Canary, policy: GatePolicy, suite: EvalSuite, judge: Agent | None, run_id: str
    ) -> SuiteRun:
        rule = gate_rule(suite.pass_, policy)
        entry = self.registry.table.find(canary.agent.name)
        stable = entry.stable if entry is not None and rule.no_regressions else None
        request = GateRun(
            canary.agent, stable, suite, judge, rule, policy.concurrency, run_id, self.replica
        )
        return await run_gate(request, [self._kept, *self.observers])

    async def _result(self, name: str, canary: Canary, claim: GateRecord, run: SuiteRun) -> None:
        key = claim.key()
        passed = run.error is None and run.verdict is not None and run.verdict.passed
        reason = run.error or (run.verdict.reason if run.verdict else "no verdict")
        record = GateRecord(
            state="passed" if passed else "failed",
            revision=key.revision,
            suite_revision=key.suite_revision,
            judge=key.judge,
            run_id=run.id,
            reason=reason,
            at=stamp(time.time()),
            by=self.replica,
        )
        paused = Pulled.now(f"eval: {reason}", "gate").as_paused(key.revision)

        def record_it(rollout: dict[str, Any]) -> bool:
            if not _still_ours(GateRecord.read(rollout), claim):
                return False  # the claim expired and another replica took it
            rollout["gate_record"] = written(record)
            held = rollout.get("paused")
            if not passed:
                rollout["paused"] = paused
            elif isinstance(held, dict) and held.get("by") == "gate":
                del rollout["paused"]  # a failure of an earlier suite or judge
            return True

        change = recorded(record_it, "gate", "gate", to=record.state, reason=reason, run=run.id)
        if await self._write(name, canary, change, record):
            logger.log(
                "INFO" if passed else "WARNING",
                "agent {} canary {}: gate {} (run {}): {}",
                name,
                key.revision,
                record.state,
                run.id,
                reason,
            )

    # -- promotion ---------------------------------------------------------------

    async def force(self, name: str, by: str) -> GateState:
        """Record that ``by`` promotes ``name``'s held canary without a passing record
        (``rollout.gate_record.state: forced``); the state this replica then serves."""
        canary = self._canary(name)
        if canary.policy.gate is None or canary.gate is None:
            raise Conflict(f"the canary of agent {name!r} has no gate to force")
        key = self._inputs(canary.agent, canary.policy.gate).key
        record = GateRecord(
            state="forced",
            revision=key.revision,
            suite_revision=key.suite_revision,
            judge=key.judge,
            reason=f"promoted without a passing record ({canary.gate.state})",
            at=stamp(time.time()),
            by=by[:200],
        )

        def forced(rollout: dict[str, Any]) -> bool:
            rollout["gate_record"] = written(record)
            return True

        change = recorded(forced, "force", by, to="forced")
        await self._write(name, canary, change, record)
        logger.warning(
            "agent {} canary {}: promoted past its gate by {}", name, key.revision, record.by
        )
        return gate_state(record, key, time.time())

    def refusal(self, name: str) -> str | None:
        """Why ``name``'s canary may not be promoted without ``force``; None if it may."""
        canary = self._canary(name)
        gate = canary.gate
        if gate is None or gate.open:
            return None
        return (
            f"canary revision {canary.agent.revision} of {name!r} has no passing evaluation "
            f"record (gate {gate.state}: {gate.reason}); let its suite pass, or force it"
        )

    def _canary(self, name: str) -> Canary:
        canary = self.registry.entry(name).canary
        if canary is None:
            raise Conflict(f"agent {name!r} has no canary")
        return canary

    # -- lifetime ----------------------------------------------------------------

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def aclose(self) -> None:
        """Stop looking and cancel running gates (their claims expire for another replica)."""
        await cancelled(*([self._ticker] if self._ticker else []), *self._tasks)
        self._ticker = None
