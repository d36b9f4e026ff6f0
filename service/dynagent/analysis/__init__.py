"""Rollout analysis: the statistics that judge a canary against its stable version.

Pure functions over counts, samples and scores: no I/O, no clock. Each check answers
*pass* (the step may advance), *fail* (pause, with the figures) or *inconclusive*
(hold the step), as Argo Rollouts' analysis runs do. Every interval is an always-valid
confidence sequence, so checking after every request raises the false-alarm rate no
higher than checking once at the end.
"""

from dynagent.analysis.checks import (
    Check,
    CheckVerdict,
    error_rate_check,
    latency_check,
    sample_ratio_check,
    score_check,
)

__all__ = [
    "Check",
    "CheckVerdict",
    "error_rate_check",
    "latency_check",
    "sample_ratio_check",
    "score_check",
]
