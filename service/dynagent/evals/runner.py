"""Running a suite: every case of an ``EvalSuite`` against one ``Agent``, its checks
judged, its verdict by the suite's pass rule.

The runner works on ``Agent`` objects, not names: which version runs (a served variant,
an old revision, a draft) is the caller's choice, and the version it was handed is the
one that runs to the end, however the registry changes meanwhile.

An evaluation has no effect outside itself. Every tool is replaced for the run
(``eval_tools``): the case's recorded result where it has one, the real tool only where
it is ``shadow_safe``, otherwise a placeholder the model sees; the run writes no
session; its events reach no listener but the runner.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dynagent.evals.engine import Outcome, ToolCall, Verdict
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
from dynagent.events import Event, ToolCallEvent, ToolResultEvent
from dynagent.exceptions import DynagentError
from dynagent.models.base import Message
from dynagent.runtime.agent import Agent
from dynagent.tools.base import Tool

PLACEHOLDER = (
    "EVALUATION RUN: this tool was not executed (it is not shadow_safe and the case "
    "records no result for it); continue as if it had succeeded."
)
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
    limit = asyncio.Semaphore(max(1, concurrency))
    results: dict[str, CaseResult] = {}
    judging = _Judging(judge, references or {}, reference_run)
    # Cases without recorded tool results share one isolated agent (its placeholders and
    # shadow-safe tools keep no state between calls); the others get their own per trial.
    shared = isolated(agent, {})

    async def one(case: Case) -> None:
        trials: tuple[TrialResult, ...]
        if case.trials == 1 and not case.judged:  # the common case: no coroutine per trial
            async with limit:
                outcome, error = await run_case(agent, case, shared=shared)
            trials = (_scored(case, outcome, error, None),)
        elif case.trials == 1:
            trials = (await _trial(agent, case, limit, judging, shared=shared),)
        else:
            each = (_trial(agent, case, limit, judging, shared=shared) for _ in range(case.trials))
            trials = tuple(await asyncio.gather(*each))
        verdicts = [trials[0].verdict] if len(trials) == 1 else [t.verdict for t in trials]
        result = CaseResult(case.id, case_verdict(case, verdicts), trials)
        results[case.id] = result
        run.cases.append(result)
        if on_case is not None:
            on_case(run, result)

    await asyncio.gather(*(one(case) for case in suite.cases))
    run.cases.sort(key=_order(suite))
    ordered = [results[case.id].verdict for case in suite.cases]
    run.verdict = suite_verdict(rule or suite.pass_, ordered, baseline)
    if judge is not None:
        run.judge_tokens, run.judge_cost = judge.tokens, judge.cost
    run.finished_at = time.time()
    return run


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
    agent: Agent,
    case: Case,
    limit: asyncio.Semaphore,
    judging: _Judging,
    *,
    shared: Agent,
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


def isolated(
    agent: Agent, recorded: Mapping[str, str | tuple[str, ...]], *, live: bool = True
) -> Agent:
    """``agent`` for an evaluation: its tools replaced (``eval_tools``), no session store."""
    tools = eval_tools(agent.tools, recorded, live=live)
    return dataclasses.replace(agent, tools=tools, sessions=None)


async def run_case(
    agent: Agent, case: Case, *, shared: Agent | None = None
) -> tuple[Outcome, str | None]:
    """One run of ``case`` on ``agent`` with its tools replaced (``eval_tools``): what it
    produced, and why it failed if it did. ``shared``: ``isolated(agent, {})`` made once,
    used when the case records no tool results and lets its safe tools run."""
    if shared is not None and not case.tool_results and case.live_tools:
        runner = shared
    else:
        runner = isolated(agent, case.tool_results, live=case.live_tools)
    # A case without history is the caller's words alone, as a plain run is given them.
    asked: str | list[Message] = case.input
    if case.history:
        asked = [{"role": t.role, "content": t.content} for t in case.history]
        asked.append({"role": "user", "content": case.input})
    started = time.perf_counter()
    try:
        result = await runner.run(asked, variables=case.variables, variant="stable")
    except DynagentError as exc:  # a failed run's error carries its events (RunError)
        latency = (time.perf_counter() - started) * 1000
        events: Sequence[Event] = getattr(exc, "events", ())
        return Outcome("", latency_ms=latency, tool_calls=_calls(events)), str(exc)
    latency = (time.perf_counter() - started) * 1000
    usage = result.usage
    tokens = usage.input_tokens + usage.output_tokens
    output = result.output
    answer = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
    structured = None if isinstance(output, str) else output
    outcome = Outcome(
        answer, structured, _calls(result.events), result.steps, latency, tokens, result.cost_usd
    )
    return outcome, None


def _calls(events: Sequence[Event]) -> tuple[ToolCall, ...]:
    if ToolCallEvent not in map(type, events):  # most runs of a suite: no tool was called
        return ()
    asked = [event for event in events if isinstance(event, ToolCallEvent)]
    results = {e.call_id: e.output for e in events if isinstance(e, ToolResultEvent)}
    return tuple(
        ToolCall(event.name, _args(event.arguments), results.get(event.call_id)) for event in asked
    )


def _args(arguments: str) -> Mapping[str, Any]:
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def eval_tools(
    tools: Mapping[str, Tool],
    recorded: Mapping[str, str | tuple[str, ...]],
    *,
    live: bool = True,
) -> dict[str, Tool]:
    """``tools`` for an evaluation: a recorded result where the case has one (a list: one
    per call, in order, the last repeated), the real tool where it is ``shadow_safe`` (and
    ``live``), otherwise a placeholder. No tool without a recorded result or
    ``shadow_safe`` runs; with ``live`` False, none runs at all."""
    return {name: _eval_tool(tool, recorded.get(name), live) for name, tool in tools.items()}


def _eval_tool(tool: Tool, recorded: str | tuple[str, ...] | None, live: bool) -> Tool:
    if recorded is None:
        return tool if tool.shadow_safe and live else _answering(tool, (PLACEHOLDER,))
    answers = (recorded,) if isinstance(recorded, str) else recorded
    return _answering(tool, answers or (PLACEHOLDER,))


def _answering(tool: Tool, answers: tuple[str, ...]) -> Tool:
    calls = iter(range(1 << 62))

    async def replay(arguments: dict[str, Any]) -> str:
        return answers[min(next(calls), len(answers) - 1)]

    return dataclasses.replace(tool, function=replay)
