"""A gated canary's suite runs (``rollout.gate``) kept as evaluation runs: listed at
``GET /v1/agents/{name}/evals`` with trigger ``gate`` and counted in
``dynagent_eval_cases_total`` like the runs a person starts."""

from __future__ import annotations

from collections.abc import Callable

from dynagent.core.eval_runs import EvalHandle, EvalRuns, count_case
from dynagent.core.metrics import Metrics
from dynagent.evals.record import KIND, SuiteRecord
from dynagent.evals.runner import CaseResult, SuiteRun
from dynagent.notifications import Notice
from dynagent.registry.facade import AgentRegistry


class GateRuns:
    """Told of each gate run (a ``GateRunObserver``): records it in ``runs``."""

    def __init__(
        self,
        runs: EvalRuns,
        metrics: Metrics,
        registry: AgentRegistry,
        notify: Callable[[Notice], None] = lambda notice: None,
    ) -> None:
        self.runs = runs
        self.metrics = metrics
        self.registry = registry
        self.notify = notify
        """Told the result of each gate run this replica made (a webhook notice)."""
        self._handles: dict[str, EvalHandle] = {}
        """Run id (the canary's and the stable's) → the record of the gate run."""

    def started(self, run: SuiteRun, stable: SuiteRun | None, by: str) -> None:
        handle = EvalHandle(run, "gate", by, stable=stable, compare=stable is not None)
        self._handles[run.id] = handle
        if stable is not None:
            self._handles[stable.id] = handle
        self.runs.add(run.agent, handle)

    def case_done(self, run: SuiteRun, case: CaseResult) -> None:
        handle = self._handles.get(run.id)
        if handle is None:
            return
        handle.case_done(run, case)
        held = self.registry.attachments.get(run.agent, KIND)
        suite = held.suite if isinstance(held, SuiteRecord) else None
        count_case(self.metrics, run, case, "gate", suite)

    def finished(self, run: SuiteRun) -> None:
        handle = self._handles.get(run.id)
        if handle is None or handle.run is not run:
            return  # the stable's part ended; the record ends with the canary's
        for key in [k for k, h in self._handles.items() if h is handle]:
            del self._handles[key]
        handle.finish()
        details = {"state": run.state, "reason": run.as_dict()["reason"], "run_id": run.id}
        details["suite_revision"] = run.suite_revision
        self.notify(Notice("gate", run.agent, run.revision, details))
