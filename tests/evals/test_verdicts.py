"""From check verdicts to a trial's, a case's and a suite's: weights, trials, pass rules."""

from __future__ import annotations

from typing import Any

from dynagent.evals import (
    Case,
    Outcome,
    PassRule,
    Verdict,
    case_verdict,
    suite_verdict,
    trial_verdict,
)
from dynagent.evals.verdicts import CaseVerdict


def case(checks: list[dict[str, Any]], **fields: Any) -> Case:
    return Case.model_validate({"id": "c1", "input": "hi", "assert": checks, **fields})


def test_a_trial_passes_when_every_weighted_check_passes_and_scores_their_weighted_mean() -> None:
    subject = case(
        [
            {"type": "contains", "value": "a", "weight": 3},
            {"type": "contains", "value": "zz", "weight": 0},
            {"type": "contains", "value": "b", "weight": 1},
        ]
    )
    both = trial_verdict(subject, Outcome("a b"))
    one = trial_verdict(subject, Outcome("a"))
    assert (both.passed, both.score) == (True, 1.0)
    assert (one.passed, one.score) == (False, 0.75)


def test_a_trial_of_weightless_checks_scores_one_and_reports_them_only() -> None:
    verdict = trial_verdict(case([{"type": "contains", "value": "zz", "weight": 0}]), Outcome("a"))
    assert (verdict.passed, verdict.score, verdict.checks[0].passed) == (True, 1.0, False)


def test_a_rubric_check_fails_the_trial_until_a_judge_scores_it() -> None:
    subject = case([{"type": "contains", "value": "a"}, {"type": "llm-rubric", "value": "kind"}])
    unjudged = trial_verdict(subject, Outcome("a"))
    judged = trial_verdict(subject, Outcome("a"), {1: Verdict(True, 0.8, "kind enough")})
    assert (unjudged.passed, unjudged.needs_judge, unjudged.score) == (False, True, 0.5)
    assert (judged.passed, judged.needs_judge, judged.score) == (True, False, 0.9)


def test_a_case_passes_when_its_share_of_passing_trials_reaches_pass_trials() -> None:
    subject = case([{"type": "contains", "value": "ok"}], trials=3, pass_trials=2 / 3)
    runs = [trial_verdict(subject, Outcome(answer)) for answer in ("ok", "ok", "no")]
    verdict = case_verdict(subject, runs)
    assert (verdict.passed, verdict.pass_share, round(verdict.score, 3)) == (True, 2 / 3, 0.667)
    strict = case([{"type": "contains", "value": "ok"}], trials=3)
    failed = case_verdict(strict, runs)
    assert (failed.passed, failed.reason) == (
        False,
        "2 of 3 trials passed (needs 100%): contains: the answer does not contain 'ok'",
    )
    assert case_verdict(strict, []).passed is False


def verdicts(**passed: bool) -> list[CaseVerdict]:
    return [
        CaseVerdict(name, ok, 1.0 if ok else 0.0, 1.0 if ok else 0.0, (), "")
        for name, ok in passed.items()
    ]


def test_a_suite_passes_its_rule_on_pass_rate_mean_score_and_regressions() -> None:
    cases = verdicts(a=True, b=True, c=False, d=True)
    assert suite_verdict(PassRule(), cases).reason == (
        "1 of 4 cases failed: c; pass rate 75.0% below 100.0%"
    )
    assert suite_verdict(PassRule(min_pass_rate=0.75), cases).passed is True
    low_mean = suite_verdict(PassRule(min_pass_rate=0.5, min_mean_score=0.8), cases)
    assert (low_mean.passed, low_mean.mean_score) == (False, 0.75)
    rule = PassRule(min_pass_rate=0.5, no_regressions=True)
    assert suite_verdict(rule, cases, {"c": False}).passed is True
    regressed = suite_verdict(rule, cases, {"c": True, "a": True})
    assert (regressed.passed, regressed.regressions, regressed.failed) == (False, ("c",), ("c",))
    assert regressed.reason == "1 of 4 cases failed: c; 1 regression(s): c"
    assert suite_verdict(rule, cases).passed is True  # no baseline: nothing to regress from


def test_a_suite_with_no_case_run_fails_and_long_failure_lists_are_cut() -> None:
    assert suite_verdict(PassRule(min_pass_rate=0), []).passed is False
    many = verdicts(**{f"c{i}": False for i in range(8)})
    assert suite_verdict(PassRule(), many).reason.startswith(
        "8 of 8 cases failed: c0, c1, c2, c3, c4 and 3 more;"
    )
