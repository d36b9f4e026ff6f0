"""From check verdicts to a trial's, a case's and a suite's. Pure: no I/O.

A trial passes when every check of weight above 0 passes; its score is the weighted mean
of its checks' scores. A case passes when its share of passing trials reaches
``pass_trials``. A suite passes its rule: the share of passing cases, their mean score,
and (against a baseline, the stable version's verdicts) no case that passed there failing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dynagent.evals.engine import Outcome, Verdict, evaluate
from dynagent.evals.spec import Case, PassRule

SHOWN_FAILURES = 5
"""Failed case ids named in a suite's reason; the rest are counted."""

_EPSILON = 1e-9
_ONE_PASSED = "1 of 1 trials passed"


@dataclass(slots=True)
class TrialVerdict:
    passed: bool
    score: float
    checks: tuple[Verdict, ...]

    @property
    def needs_judge(self) -> bool:
        return any(check.needs_judge for check in self.checks)


@dataclass(slots=True)
class CaseVerdict:
    case_id: str
    passed: bool
    score: float
    pass_share: float
    """The share of its trials that passed."""
    trials: tuple[TrialVerdict, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class SuiteVerdict:
    passed: bool
    pass_rate: float
    mean_score: float
    failed: tuple[str, ...]
    """The ids of the cases that failed, in the suite's order."""
    regressions: tuple[str, ...]
    """Cases that pass on the baseline and fail here (only with a baseline)."""
    reason: str


def trial_verdict(
    case: Case, outcome: Outcome, judged: Mapping[int, Verdict] | None = None
) -> TrialVerdict:
    """Every check of ``case`` against one run; ``judged``: verdicts a judge gave, by the
    check's position (an ``llm-rubric`` check without one is not passed)."""
    # One pass over the checks: a suite runs this for every trial of every case.
    if judged:
        checks = [judged.get(i) or evaluate(c, outcome) for i, c in enumerate(case.assert_)]
    else:
        checks = [evaluate(check, outcome) for check in case.assert_]
    total = weighted = 0.0
    passed = True
    for check, verdict in zip(case.assert_, checks, strict=True):
        weight = check.weight
        total += weight
        weighted += weight * verdict.score
        if weight > 0 and not verdict.passed:
            passed = False
    score = weighted / total if total else 1.0
    return TrialVerdict(passed, _unit(score), tuple(checks))


def case_verdict(case: Case, trials: Sequence[TrialVerdict]) -> CaseVerdict:
    """The verdict of ``case`` from its trials' verdicts."""
    if not trials:
        return CaseVerdict(case.id, False, 0.0, 0.0, (), "no trial ran")
    if len(trials) == 1 and trials[0].passed:  # most cases of most runs: their one trial passed
        trial = trials[0]
        return CaseVerdict(case.id, True, trial.score, 1.0, (trial,), _ONE_PASSED)
    passing, scores = 0, 0.0
    for trial in trials:  # one pass, no generator: a suite does this for every case
        passing += trial.passed
        scores += trial.score
    share = passing / len(trials)
    passed = share + _EPSILON >= case.pass_trials
    score = _unit(scores / len(trials))
    reason = f"{passing} of {len(trials)} trials passed"
    if not passed:
        reason += f" (needs {case.pass_trials:.0%}): {_first_failure(case, trials)}"
    return CaseVerdict(case.id, passed, score, share, tuple(trials), reason)


def suite_verdict(
    rule: PassRule, cases: Sequence[CaseVerdict], baseline: Mapping[str, bool] | None = None
) -> SuiteVerdict:
    """Whether ``cases`` pass ``rule``; ``baseline``: case id → passed on the stable version
    (``no_regressions`` holds trivially without one: there is nothing to regress from)."""
    total = len(cases)
    failed = tuple(case.case_id for case in cases if not case.passed)
    rate = (total - len(failed)) / total if total else 0.0
    mean = _unit(sum(case.score for case in cases) / total) if total else 0.0
    regressions = tuple(
        case_id for case_id in failed if baseline is not None and baseline.get(case_id, False)
    )
    broken: list[str] = []
    if not total:
        broken.append("no case ran")
    if rate + _EPSILON < rule.min_pass_rate:
        broken.append(f"pass rate {rate:.1%} below {rule.min_pass_rate:.1%}")
    if rule.min_mean_score is not None and mean + _EPSILON < rule.min_mean_score:
        broken.append(f"mean score {mean:.3f} below {rule.min_mean_score:.3f}")
    if rule.no_regressions and regressions:
        broken.append(f"{len(regressions)} regression(s): {_listed(regressions)}")
    summary = f"{len(failed)} of {total} cases failed" + (f": {_listed(failed)}" if failed else "")
    reason = summary if not broken else f"{summary}; " + "; ".join(broken)
    return SuiteVerdict(not broken, rate, mean, failed, regressions, reason)


def _first_failure(case: Case, trials: Sequence[TrialVerdict]) -> str:
    for trial in trials:
        for check, verdict in zip(case.assert_, trial.checks, strict=True):
            if not verdict.passed and check.weight > 0:
                return f"{check.type}: {verdict.reason}"
    return "too few trials passed"


def _listed(ids: Sequence[str]) -> str:
    shown = ", ".join(ids[:SHOWN_FAILURES])
    more = len(ids) - SHOWN_FAILURES
    return f"{shown} and {more} more" if more > 0 else shown


def _unit(value: float) -> float:
    return min(1.0, max(0.0, value))
