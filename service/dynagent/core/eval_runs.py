"""Evaluation runs this replica started, kept in memory for reading back and streaming.

A run is an ``EvalHandle``: the candidate's ``SuiteRun``, the stable version's when the
run compares with it or needs it as a baseline, the task that fills them, and the
progress events (each finished case) that any number of readers follow from the start.
The store keeps the newest runs, ``per_agent`` of an agent and ``total`` in all.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

from dynagent.core.metrics import Metrics
from dynagent.deadlines import cancelled
from dynagent.evals.runner import CaseResult, SuiteRun
from dynagent.evals.spec import JUDGED_TYPES, EvalSuite

Trigger = Literal["api", "cli", "gate"]

PER_AGENT = 50
"""Runs kept per agent."""
TOTAL = 500
"""Runs kept in all."""


@dataclass(eq=False)
class EvalHandle:
    """One evaluation run: its record as it fills, its task, and its progress events."""

    run: SuiteRun
    """The candidate's run (the record's id is its id)."""
    trigger: Trigger
    by: str
    """Who started it: the API key's name, or the gate."""
    stable: SuiteRun | None = None
    """The stable version's run on the same cases (compare, or a ``no_regressions``
    baseline)."""
    compare: bool = False
    task: asyncio.Task[SuiteRun] | None = None
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """``("case", …)`` per finished case, then ``("done", record)``."""
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def id(self) -> str:
        return self.run.id

    @property
    def total(self) -> int:
        """Cases the whole run runs: the candidate's and the stable version's."""
        return self.run.total + (self.stable.total if self.stable is not None else 0)

    @property
    def done(self) -> int:
        return len(self.run.cases) + (len(self.stable.cases) if self.stable is not None else 0)

    @property
    def finished(self) -> bool:
        return bool(self.events) and self.events[-1][0] == "done"

    def record(self, *, cases: bool = True) -> dict[str, Any]:
        """The run as the API shows it (contract: ``SuiteRun.as_dict()`` and who, why,
        and the per-case difference with the stable version for a compare run)."""
        record = self.run.as_dict()
        record["trigger"], record["by"] = self.trigger, self.by
        record["stable_run"] = self.stable.id if self.stable is not None else None
        record["compare"] = self._compare() if self.compare else None
        if not cases:
            record.pop("cases")
        return record

    def _compare(self) -> dict[str, Any] | None:
        stable = self.stable
        if stable is None:
            return None
        before = {case.case_id: case for case in stable.cases}
        rows = []
        for case in self.run.cases:
            old = before.get(case.case_id)
            if old is None:
                continue
            rows.append(
                {
                    "id": case.case_id,
                    "stable_passed": old.passed,
                    "stable_score": round(old.verdict.score, 4),
                    "passed": case.passed,
                    "score": round(case.verdict.score, 4),
                    "change": _change(old.passed, case.passed),
                }
            )
        return {"stable_run": stable.id, "stable_revision": stable.revision, "cases": rows}

    def case_done(self, run: SuiteRun, case: CaseResult) -> None:
        data = {**case.as_dict(), "variant": run.variant, "revision": run.revision}
        self._emit("case", {**data, "done": self.done, "total": self.total})

    def finish(self) -> None:
        self._emit("done", self.record())

    def _emit(self, name: str, data: dict[str, Any]) -> None:
        self.events.append((name, data))
        self._changed.set()
        self._changed = asyncio.Event()

    async def follow(self) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """Every progress event from the first, as they come, until ``done``."""
        seen = 0
        while True:
            waiting = self._changed
            while seen < len(self.events):
                event = self.events[seen]
                seen += 1
                yield event
                if event[0] == "done":
                    return
            await waiting.wait()


def _change(before: bool, now: bool) -> str:
    if before == now:
        return "same-pass" if now else "same-fail"
    return "fixed" if now else "regressed"


class EvalRuns:
    """The runs of this replica, newest last, within ``per_agent`` and ``total``."""

    def __init__(self, per_agent: int = PER_AGENT, total: int = TOTAL) -> None:
        self.per_agent = per_agent
        self.total = total
        self._runs: OrderedDict[str, tuple[str, EvalHandle]] = OrderedDict()
        """Run id → (agent, handle), oldest first."""

    def add(self, name: str, handle: EvalHandle) -> None:
        self._runs[handle.id] = (name, handle)
        own = [run_id for run_id, (agent, _) in self._runs.items() if agent == name]
        for run_id in own[: max(0, len(own) - self.per_agent)]:
            self._drop(run_id)
        while len(self._runs) > self.total:
            self._drop(next(iter(self._runs)))

    def _drop(self, run_id: str) -> None:
        _, handle = self._runs.pop(run_id)
        if handle.task is not None and not handle.task.done():
            handle.task.cancel()

    def get(self, name: str, run_id: str) -> EvalHandle | None:
        found = self._runs.get(run_id)
        return found[1] if found is not None and found[0] == name else None

    def list(self, name: str) -> list[EvalHandle]:
        """``name``'s runs, newest first."""
        return [handle for agent, handle in reversed(self._runs.values()) if agent == name]

    async def aclose(self) -> None:
        """Cancel the runs still going (the service is stopping)."""
        tasks = [h.task for _, h in self._runs.values() if h.task is not None and not h.task.done()]
        with contextlib.suppress(Exception):  # a run's failure is its own record's
            await cancelled(*tasks)


def count_case(
    metrics: Metrics, run: SuiteRun, case: CaseResult, trigger: str, suite: EvalSuite | None
) -> None:
    """``dynagent_eval_cases_total`` and, for each judged check scored, the judge's score."""
    verdict = "error" if case.error is not None else "pass" if case.passed else "fail"
    metrics.eval_cases.labels(run.agent, run.revision, verdict, trigger).inc()
    cases = suite.cases if suite is not None else []
    checks = next((c.assert_ for c in cases if c.id == case.case_id), [])
    judged = [i for i, check in enumerate(checks) if check.type in JUDGED_TYPES]
    for trial in case.trials:
        if trial.error is not None:
            continue
        for index in judged:
            verdict_of = trial.verdict.checks[index]
            if not verdict_of.error and verdict_of.reason.startswith("judged "):
                metrics.judge_score.labels(run.agent, run.revision, run.variant, "suite").observe(
                    verdict_of.score
                )
