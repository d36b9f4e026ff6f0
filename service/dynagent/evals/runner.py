"""Running a suite: every case of an ``EvalSuite`` against one ``Agent``, its checks
judged, its verdict by the suite's pass rule.

The runner works on ``Agent`` objects, not names: which version runs (a served variant,
an old revision, a draft) is the caller's choice, and the version it was handed is the
one that runs to the end, however the registry changes meanwhile. Each case runs apart
from the world (``dynagent.evals.isolation``): its tools replaced, no session written.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dynagent.evals.engine import Outcome, Verdict
from dynagent.evals.isolation import (
    PLACEHOLDER,
    eval_tools,
    failed,
    isolated,
    prepared,
    produced,
    run_case,
)
from dynagent.evals.judge import Judge
from dynagent.evals.spec import Case, EvalSuite, PairwiseCheck, PassRule, RubricCheck
from dynagent.evals.verdicts import (
    CaseVerdict,
    SuiteVerdict,
    TrialVerdict,
    case_verdict,
    suite_verdict,
    trial_verdict,
)
from dynagent.exceptions import DynagentError
from dynagent.runtime.agent import Agent

SHOWN_ANSWER = 2000
"""Characters of an answer kept in a case's result."""


@dataclass(slots=True)
class TrialResult:
    """One run of a case: what it produced and how its checks went."""

    verdict: TrialVerdict
    answer: str
    latency_ms: float
    tokens: int
    cost: float | None
    error: str | None = None
    """Why the run ended without an answer, if it did."""


@dataclass(slots=True)
class CaseResult:
    case_id: str
    verdict: CaseVerdict
    trials: tuple[TrialResult, ...]

    @property
    def passed(self) -> bool:
        return self.verdict.passed

    def as_dict(self) -> dict[str, Any]:
        last = self.trials[-1] if self.trials else None
        costs = [t.cost for t in self.trials]
        return {
            "id": self.case_id,
            "passed": self.verdict.passed,
            "score": round(self.verdict.score, 4),
            "reason": self.verdict.reason,
            "trials": len(self.trials),
            "passed_trials": sum(1 for t in self.trials if t.verdict.passed),
            "latency_ms": round(max((t.latency_ms for t in self.trials), default=0.0), 1),
            "tokens": sum(t.tokens for t in self.trials),
            "cost": None if None in costs else round(sum(c or 0.0 for c in costs), 6),
            "answer": last.answer if last else "",
            "error": self.error,
            "checks": _checks(self.trials),
        }

    @property
    def error(self) -> str | None:
        """Why a trial ran without an answer, else why a check could not be scored."""
        failed = next((t.error for t in self.trials if t.error), None)
        if failed is not None:
            return failed
        checks = (v for t in self.trials for v in t.verdict.checks)
        return next((v.reason for v in checks if v.error), None)


def _checks(trials: Sequence[TrialResult]) -> list[dict[str, Any]]:
    """The checks of the first failing trial (else of the last): what a reader needs."""
    if not trials:
        return []
    shown = next((t for t in trials if not t.verdict.passed), trials[-1])
    return [
        {"passed": v.passed, "score": round(v.score, 4), "reason": v.reason}
        for v in shown.verdict.checks
    ]


@dataclass(slots=True)
class SuiteRun:
    """A run of a suite against one version of an agent; filled in as cases finish."""

    agent: str
    revision: str
    variant: str
    suite_revision: str
    total: int
    """Cases in the run."""
    id: str = field(default_factory=lambda: secrets.token_hex(8))
    started_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    cases: list[CaseResult] = field(default_factory=list)
    verdict: SuiteVerdict | None = None
    judge: str | None = None
    """The judge agent's ``name@revision``, when the suite has one."""
    judge_tokens: int = 0
    judge_cost: float | None = 0.0
    error: str | None = None
    """Why the run could not finish, if it could not."""

    @property
    def state(self) -> str:
        if self.error is not None:
            return "error"
        if self.verdict is None:
            return "running"
        return "passed" if self.verdict.passed else "failed"

    def as_dict(self) -> dict[str, Any]:
        verdict = self.verdict
        return {
            "id": self.id,
            "agent": self.agent,
            "revision": self.revision,
            "variant": self.variant,
            "suite_revision": self.suite_revision,
            "state": self.state,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "total": self.total,
            "done": len(self.cases),
            "passed": None if verdict is None else verdict.passed,
            "pass_rate": None if verdict is None else round(verdict.pass_rate, 4),
            "mean_score": None if verdict is None else round(verdict.mean_score, 4),
            "reason": self.error or (verdict.reason if verdict else None),
            "regressions": list(verdict.regressions) if verdict else [],
            "judge": self.judge,
            "judge_tokens": self.judge_tokens,
            "judge_cost": self.judge_cost,
            "cases": [case.as_dict() for case in self.cases],
        }


async def run_suite(
    agent: Agent,
    suite: EvalSuite,
    *,
    variant: str = "stable",
    judge: Judge | None = None,
    baseline: Mapping[str, bool] | None = None,
    rule: PassRule | None = None,
    concurrency: int = 8,
    on_case: Callable[[SuiteRun, CaseResult], None] | None = None,
    run: SuiteRun | None = None,
    references: Mapping[str, str] | None = None,
    reference_run: bool = False,
) -> SuiteRun:
    """Run every case of ``suite`` on ``agent``, at most ``concurrency`` runs at once.

    ``baseline``: case id → passed on the stable version, for ``no_regressions``;
    ``rule`` overrides the suite's pass rule; ``on_case`` is told each finished case;
    ``run``: a ``SuiteRun`` made beforehand (so a caller can show it while it fills);
    ``references``: case id → the stable version's answer, for ``pairwise`` checks of
    cases without a ``reference``; ``reference_run``: ``agent`` is the stable version,
    whose answers are the references (such a check passes: nothing to compare)."""
    run = run or SuiteRun(agent.name, agent.revision, variant, suite.revision, len(suite.cases))
    if judge is not None:
        run.judge = judge.label
    # Cases without recorded tool results share one isolated agent (its placeholders and
    # shadow-safe tools keep no state between calls); the others get their own per trial.
    cases = _Cases(
        agent,
        isolated(agent, {}),
        asyncio.Semaphore(max(1, concurrency)),
        _Judging(judge, references or {}, reference_run),
        run,
        on_case,
    )
    await asyncio.gather(*(cases.one(case) for case in suite.cases))
    run.cases.sort(key=_order(suite))
    ordered = [result.verdict for result in run.cases]  # in the suite's order, as sorted
    run.verdict = suite_verdict(rule or suite.pass_, ordered, baseline)
    if judge is not None:
        run.judge_tokens, run.judge_cost = judge.tokens, judge.cost
    run.finished_at = time.time()
    return run


@dataclass(slots=True)
class _Cases:
    """What runs the cases of one suite run: each case's trials, its verdict, its record."""

    agent: Agent
    shared: Agent
    limit: asyncio.Semaphore
    judging: _Judging
    run: SuiteRun
    on_case: Callable[[SuiteRun, CaseResult], None] | None

    async def one(self, case: Case) -> None:
        trials: tuple[TrialResult, ...]
        error: str | None
        if case.trials == 1 and not case.judged:
            # The common case, awaited here: every coroutine between the task and the
            # agent's run costs each time the run waits for its model and wakes.
            runner, asked = prepared(self.agent, case, self.shared)
            async with self.limit:
                started = time.perf_counter()
                try:
                    ran = await runner.run(asked, variables=case.variables, variant="stable")
                except DynagentError as exc:
                    outcome, error = failed(exc, started)
                else:
                    outcome, error = produced(ran, started), None
            trials = (_scored(case, outcome, error, None),)
        elif case.trials == 1:
            trials = (await _trial(self.agent, case, self.limit, self.judging, self.shared),)
        else:
            each = (
                _trial(self.agent, case, self.limit, self.judging, self.shared)
                for _ in range(case.trials)
            )
            trials = tuple(await asyncio.gather(*each))
        verdicts = [trials[0].verdict] if len(trials) == 1 else [t.verdict for t in trials]
        result = CaseResult(case.id, case_verdict(case, verdicts), trials)
        self.run.cases.append(result)
        if self.on_case is not None:
            self.on_case(self.run, result)


def _order(suite: EvalSuite) -> Callable[[CaseResult], int]:
    positions = {case.id: index for index, case in enumerate(suite.cases)}
    return lambda result: positions[result.case_id]


@dataclass(frozen=True, slots=True)
class _Judging:
    """What the judged checks of a run are scored with."""

    judge: Judge | None
    references: Mapping[str, str]
    reference_run: bool

    def reference(self, case: Case) -> str | None:
        return case.reference if case.reference is not None else self.references.get(case.id)


async def _trial(
    agent: Agent, case: Case, limit: asyncio.Semaphore, judging: _Judging, shared: Agent
) -> TrialResult:
    async with limit:
        outcome, error = await run_case(agent, case, shared=shared)
    judged = await _judged(case, outcome, judging) if case.judged and error is None else None
    return _scored(case, outcome, error, judged)


def _scored(
    case: Case, outcome: Outcome, error: str | None, judged: Mapping[int, Verdict] | None
) -> TrialResult:
    """A trial's result: its checks judged against what the run produced."""
    if error is not None:
        failed = Verdict(False, 0.0, f"the run failed: {error}")
        checks = tuple(failed for _ in case.assert_)
        return TrialResult(TrialVerdict(False, 0.0, checks), "", outcome.latency_ms, 0, None, error)
    verdict = trial_verdict(case, outcome, judged)
    answer = outcome.answer[:SHOWN_ANSWER]
    return TrialResult(verdict, answer, outcome.latency_ms, outcome.tokens, outcome.cost)


async def _judged(case: Case, outcome: Outcome, judging: _Judging) -> dict[int, Verdict]:
    judged = [
        (i, c) for i, c in enumerate(case.assert_) if isinstance(c, RubricCheck | PairwiseCheck)
    ]
    if not judged:
        return {}
    scored = await asyncio.gather(
        *(_judge_one(check, case, outcome, judging) for _, check in judged)
    )
    return {
        index: verdict._replace(passed=verdict.passed and verdict.score >= check.threshold)
        for (index, check), verdict in zip(judged, scored, strict=True)
    }


async def _judge_one(
    check: RubricCheck | PairwiseCheck, case: Case, outcome: Outcome, judging: _Judging
) -> Verdict:
    judge = judging.judge
    if isinstance(check, PairwiseCheck):
        reference = judging.reference(case)
        if reference is None and judging.reference_run:
            return Verdict(True, 1.0, "this run is the reference: nothing to compare with")
        if reference is None:
            return Verdict(
                False,
                0.0,
                "no reference answer: give the case a reference, or run it with the stable "
                "version (compare)",
                error=True,
            )
        if judge is None:
            return Verdict(False, 0.0, "no judge: the suite names no judge agent", error=True)
        return await judge.pairwise(case.input, outcome.answer, reference, check.value)
    if judge is None:
        return Verdict(False, 0.0, "no judge: the suite names no judge agent", error=True)
    return await judge.rubric(check.value, case.input, outcome.answer)


__all__ = [
    "PLACEHOLDER",
    "CaseResult",
    "SuiteRun",
    "TrialResult",
    "eval_tools",
    "isolated",
    "run_case",
    "run_suite",
]
