"""Evaluation suites: ``{name}.evals.yaml`` beside an agent, the pure engine that checks
what a run produced against a suite's assertions, the runner and the judges."""

from dynagent.evals.engine import Outcome, ToolCall, Verdict, evaluate
from dynagent.evals.judge import Judge, parse_score
from dynagent.evals.runner import CaseResult, SuiteRun, TrialResult, eval_tools, run_case, run_suite
from dynagent.evals.spec import (
    Case,
    EvalSuite,
    PassRule,
    is_suite_key,
    load_suite,
    suite_agent,
)
from dynagent.evals.verdicts import (
    CaseVerdict,
    SuiteVerdict,
    TrialVerdict,
    case_verdict,
    suite_verdict,
    trial_verdict,
)

__all__ = [
    "Case",
    "CaseResult",
    "CaseVerdict",
    "EvalSuite",
    "Judge",
    "Outcome",
    "PassRule",
    "SuiteRun",
    "SuiteVerdict",
    "ToolCall",
    "TrialResult",
    "TrialVerdict",
    "Verdict",
    "case_verdict",
    "eval_tools",
    "evaluate",
    "is_suite_key",
    "load_suite",
    "parse_score",
    "run_case",
    "run_suite",
    "suite_agent",
    "suite_verdict",
    "trial_verdict",
]
