"""One run of a gated canary's suite: the stable version first when the rule needs a
baseline (``no_regressions``), then the canary, each judged by its own ``Judge`` (so the
judge's spend is counted per run), with observers told as the run goes — where the
service records it as an evaluation run with trigger ``gate``."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from dynagent.evals.judge import Judge
from dynagent.evals.runner import CaseResult, SuiteRun, run_suite
from dynagent.evals.spec import EvalSuite, PassRule
from dynagent.registry.gate import GatePolicy
from dynagent.runtime.agent import Agent


class GateRunObserver(Protocol):
    """Told of a gate run: its start (the canary's run, the stable's when it runs too, and
    the replica running it), each finished case of either, and its end."""

    def started(self, run: SuiteRun, stable: SuiteRun | None, by: str) -> None: ...

    def case_done(self, run: SuiteRun, case: CaseResult) -> None: ...

    def finished(self, run: SuiteRun) -> None: ...


@dataclass(frozen=True, slots=True)
class GateRun:
    """What one gate run runs."""

    canary: Agent
    stable: Agent | None
    """The stable version, run first for a ``no_regressions`` baseline (else None)."""
    suite: EvalSuite
    judge: Agent | None
    rule: PassRule
    concurrency: int
    run_id: str
    by: str
    """The replica running it."""

    def judged(self) -> Judge | None:
        settings = self.suite.judge
        if self.judge is None or settings is None:
            return None
        return Judge(self.judge, concurrency=settings.concurrency, timeout=settings.timeout)


async def run_gate(request: GateRun, observers: Sequence[GateRunObserver] = ()) -> SuiteRun:
    """Run ``request``; the canary's run, its verdict by the gate's rule (or ``error`` set
    when the run itself failed: a failed run fails the gate, it never opens it)."""
    suite, canary = request.suite, request.canary
    run = SuiteRun(
        canary.name, canary.revision, "canary", suite.revision, len(suite.cases), id=request.run_id
    )
    stable = None
    if request.stable is not None:
        stable = SuiteRun(
            canary.name, request.stable.revision, "stable", suite.revision, len(suite.cases)
        )
    for observer in observers:
        observer.started(run, stable, request.by)

    def told(done: SuiteRun, case: CaseResult) -> None:
        for observer in observers:
            observer.case_done(done, case)

    rule, concurrency = request.rule, request.concurrency
    try:
        baseline = None
        if request.stable is not None and stable is not None:
            await run_suite(
                request.stable,
                suite,
                judge=request.judged(),
                rule=rule,
                concurrency=concurrency,
                on_case=told,
                run=stable,
            )
            baseline = {case.case_id: case.passed for case in stable.cases}
        await run_suite(
            canary,
            suite,
            variant="canary",
            judge=request.judged(),
            baseline=baseline,
            rule=rule,
            concurrency=concurrency,
            on_case=told,
            run=run,
        )
    except Exception as exc:  # the machinery failed, not a case: the run says so
        run.error = f"the suite could not run: {type(exc).__name__}: {exc}"
        run.finished_at = time.time()
    finally:
        for observer in observers:
            observer.finished(run)
    return run


def gate_rule(suite: PassRule, gate: GatePolicy) -> PassRule:
    """The suite's pass rule with the gate's overrides."""
    overrides = {
        field: value
        for field in ("min_pass_rate", "min_mean_score", "no_regressions")
        if (value := getattr(gate, field)) is not None
    }
    return suite.model_copy(update=overrides)


class KeptRuns:
    """The last ``count`` gate runs this replica made, newest last (``CanaryGate.runs``)."""

    def __init__(self, count: int) -> None:
        self.runs: deque[SuiteRun] = deque(maxlen=count)

    def started(self, run: SuiteRun, stable: SuiteRun | None, by: str) -> None:
        self.runs.append(run)

    def case_done(self, run: SuiteRun, case: CaseResult) -> None:
        pass

    def finished(self, run: SuiteRun) -> None:
        pass
