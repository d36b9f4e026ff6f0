"""Running an agent's evaluation suite on demand: what runs, against what, judged by whom.

``start_eval`` resolves the request at once (a served variant, an old revision, or a
draft document built but never put in the registry; the agent's suite or one given; the
judge agent in the registry) so that a bad request fails before anything runs, then
runs the suite in the background and keeps the run in ``service.evals``. When the pass
rule needs a baseline (``no_regressions``) or the caller asks to ``compare``, the stable
version runs the same cases first and its answers are the references of ``pairwise``
checks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from loguru import logger

from dynagent.core.eval_runs import EvalHandle, Trigger, count_case
from dynagent.evals.judge import Judge
from dynagent.evals.record import KIND, SuiteRecord
from dynagent.evals.runner import CaseResult, SuiteRun, run_suite
from dynagent.evals.spec import EvalSuite, PassRule, load_suite
from dynagent.exceptions import BadRequest, Conflict, NotFound
from dynagent.runtime.agent import Agent, SourceInfo
from dynagent.spec.agent import load_spec

if TYPE_CHECKING:
    from dynagent.core.service import Service

DEFAULT_CONCURRENCY = 8
DRAFT = SourceInfo("code", "draft", {"draft": "request"})
"""Where a draft agent document comes from: the request, never a source."""


@dataclass(frozen=True, slots=True)
class EvalRequest:
    """What to evaluate. At most one of ``variant``, ``revision`` and ``spec``; none: the
    stable version."""

    variant: Literal["stable", "canary"] | None = None
    revision: str | None = None
    """A revision the registry still keeps (the served ones and the recent history)."""
    spec: Mapping[str, Any] | None = None
    """A draft agent document: validated and built, never served."""
    suite: Mapping[str, Any] | None = None
    """A suite document to run instead of the agent's own."""
    concurrency: int | None = None
    compare: bool = False
    """Run the stable version on the same cases too, and show the per-case difference."""
    cases: Sequence[str] | None = None
    """Only these cases (by id)."""
    rule: PassRule | None = None
    """Overrides the suite's pass rule (the gate's overrides)."""


@dataclass(frozen=True, slots=True)
class _Plan:
    candidate: Agent
    variant: str
    stable: Agent | None
    """The stable version, when it runs too."""
    suite: EvalSuite
    rule: PassRule
    judge: Judge | None


async def start_eval(
    service: Service, name: str, request: EvalRequest, *, by: str, trigger: Trigger = "api"
) -> EvalHandle:
    """Start evaluating ``name`` as ``request`` says; the run goes on in the background.

    Raises at once, before anything runs: ``AgentNotFound``, ``NotFound`` (a revision not
    kept), ``Conflict`` (no canary, no suite, no judge to score the suite's checks …),
    ``BadRequest`` and ``ConfigError`` (a draft or suite document that is not valid)."""
    plan = await _plan(service, name, request)
    concurrency = request.concurrency or DEFAULT_CONCURRENCY
    run = SuiteRun(
        name, plan.candidate.revision, plan.variant, plan.suite.revision, len(plan.suite.cases)
    )
    stable = None
    if plan.stable is not None:
        stable = SuiteRun(
            name, plan.stable.revision, "stable", plan.suite.revision, len(plan.suite.cases)
        )
    handle = EvalHandle(run, trigger, by, stable=stable, compare=request.compare)
    if plan.judge is not None:
        run.judge = plan.judge.label
    handle.task = asyncio.get_running_loop().create_task(
        _run(service, handle, plan, concurrency), name=f"eval {name} {run.id}"
    )
    service.evals.add(name, handle)
    logger.info(
        "agent {}: evaluation {} of revision {} ({}) started by {} ({})",
        name,
        run.id,
        run.revision,
        run.variant,
        by,
        trigger,
    )
    return handle


async def _run(service: Service, handle: EvalHandle, plan: _Plan, concurrency: int) -> SuiteRun:
    run, trigger = handle.run, handle.trigger

    def told(done: SuiteRun, case: CaseResult) -> None:
        count_case(service.metrics, done, case, trigger, plan.suite)
        handle.case_done(done, case)

    try:
        baseline: dict[str, bool] | None = None
        references: dict[str, str] = {}
        if plan.stable is not None and handle.stable is not None:
            before = await run_suite(
                plan.stable,
                plan.suite,
                judge=plan.judge,
                rule=plan.rule,
                concurrency=concurrency,
                on_case=told,
                run=handle.stable,
                reference_run=True,
            )
            baseline = {case.case_id: case.passed for case in before.cases}
            references = {
                case.case_id: case.trials[-1].answer
                for case in before.cases
                if case.trials and case.trials[-1].error is None
            }
        await run_suite(
            plan.candidate,
            plan.suite,
            variant=plan.variant,
            judge=plan.judge,
            baseline=baseline,
            rule=plan.rule,
            concurrency=concurrency,
            on_case=told,
            run=run,
            references=references,
            reference_run=plan.stable is None and _is_stable(service, plan.candidate),
        )
    except asyncio.CancelledError:
        run.error = "the evaluation was cancelled: the service is stopping"
        raise
    except Exception as exc:  # a failure of the machinery, not of a case: the run says so
        logger.exception("agent {}: evaluation {} failed", run.agent, run.id)
        run.error = f"the evaluation could not finish: {type(exc).__name__}: {exc}"
    finally:
        handle.finish()
        _logged(handle)
    return run


def _logged(handle: EvalHandle) -> None:
    run = handle.run
    logger.info(
        "agent {}: evaluation {} of revision {} {}: {}",
        run.agent,
        run.id,
        run.revision,
        run.state,
        run.as_dict()["reason"],
    )


async def _plan(service: Service, name: str, request: EvalRequest) -> _Plan:
    registry = service.registry
    entry = registry.entry(name)  # AgentNotFound: a 404
    suite = _suite(service, name, request)
    candidate, variant = await _candidate(service, name, request)
    stable = entry.stable
    is_stable = stable is not None and candidate is stable
    rule = request.rule or suite.pass_
    wants_stable = request.compare or rule.no_regressions
    if request.compare and (stable is None or is_stable):
        raise Conflict(
            f"compare runs the stable version of {name!r} beside a candidate: choose the "
            "canary, a revision or a draft spec"
            if stable is not None
            else f"agent {name!r} has no stable version to compare with"
        )
    runs_stable = stable if wants_stable and stable is not None and not is_stable else None
    judge = _judge(service, suite)
    return _Plan(candidate, variant, runs_stable, suite, rule, judge)


def _suite(service: Service, name: str, request: EvalRequest) -> EvalSuite:
    if request.suite is not None:
        suite = load_suite(request.suite, source="the request's suite", agent=name)
    else:
        held = service.registry.attachments.get(name, KIND)
        suite_of = held.suite if isinstance(held, SuiteRecord) else None
        if suite_of is None:
            raise Conflict(
                f"agent {name!r} has no evaluation suite: add {name}.evals.yaml beside it, "
                "or send one as suite"
            )
        suite = suite_of
    if request.cases is None:
        return suite
    wanted = list(dict.fromkeys(request.cases))
    known = {case.id: case for case in suite.cases}
    unknown = [case_id for case_id in wanted if case_id not in known]
    if unknown:
        raise BadRequest(
            f"the suite has no case {', '.join(map(repr, unknown[:5]))}", param="cases"
        )
    if not wanted:
        raise BadRequest("cases: name at least one case", param="cases")
    return suite.model_copy(update={"cases": [known[case_id] for case_id in wanted]})


async def _candidate(service: Service, name: str, request: EvalRequest) -> tuple[Agent, str]:
    """The version to evaluate and how the run names it: stable, canary, revision, draft."""
    registry = service.registry
    entry = registry.entry(name)
    if request.spec is not None:
        return await _draft(service, name, request.spec), "draft"
    if request.revision is not None:
        served = [entry.stable, entry.canary.agent if entry.canary else None]
        kept = [a for a in served if a is not None] + [
            record.agent for record in reversed(registry.history(name))
        ]
        found = next((a for a in kept if a.revision == request.revision), None)
        if found is None:
            raise NotFound(
                f"revision {request.revision!r} of agent {name!r} is not kept: only the served "
                "versions and the recent history are (GET /v1/agents/{name}/revisions)"
            )
        return found, "canary" if entry.canary and found is entry.canary.agent else "revision"
    if request.variant == "canary":
        if entry.canary is None:
            raise Conflict(f"agent {name!r} has no canary to evaluate")
        return entry.canary.agent, "canary"
    return registry.get(name), "stable"  # AgentUnavailable (503) when none is valid


async def _draft(service: Service, name: str, document: Mapping[str, Any]) -> Agent:
    """``document`` built as the agent it defines, outside the registry."""
    spec = load_spec(dict(document), source="the request's spec")
    if spec.name != name:
        raise BadRequest(
            f"the draft spec defines agent {spec.name!r}, not {name!r}", param="spec.name"
        )
    entry = service.registry.entry(name)
    factory_name = entry.stable.factory if entry.stable is not None else "default"
    factory = service.factories.get(factory_name) or service.factories["default"]
    builder = factory.builder()
    await builder.prepare(spec)
    return builder.build(spec, source=DRAFT)


def _judge(service: Service, suite: EvalSuite) -> Judge | None:
    settings = suite.judge
    if settings is None:
        return None
    registry = service.registry
    if settings.agent not in registry or registry.entry(settings.agent).stable is None:
        raise Conflict(
            f"the suite's judge agent {settings.agent!r} is not served: define it (an agent "
            "whose output schema has score 0-1 and reason)"
        )
    agent = registry.get(settings.agent)
    if suite.needs_judge and agent.spec.output is None:
        raise Conflict(
            f"the judge agent {settings.agent!r} has no output schema: give it output with "
            "score (0-1) and reason"
        )
    return Judge(
        agent,
        concurrency=settings.concurrency,
        timeout=settings.timeout,
    )


def _is_stable(service: Service, agent: Agent) -> bool:
    entry = service.registry.table.find(agent.name)
    return entry is not None and entry.stable is agent
