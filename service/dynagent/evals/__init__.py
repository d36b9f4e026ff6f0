"""Evaluation suites: ``{name}.evals.yaml`` beside an agent, and the pure engine that
checks what a run produced against a suite's assertions."""

from dynagent.evals.engine import Outcome, ToolCall, Verdict, evaluate
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
    "CaseVerdict",
    "EvalSuite",
    "Outcome",
    "PassRule",
    "SuiteVerdict",
    "ToolCall",
    "TrialVerdict",
    "Verdict",
    "case_verdict",
    "evaluate",
    "is_suite_key",
    "load_suite",
    "suite_agent",
    "suite_verdict",
    "trial_verdict",
]
