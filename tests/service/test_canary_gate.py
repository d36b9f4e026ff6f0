"""Gated canaries in a folder (one replica): ``rollout.gate`` keeps a canary out of live
traffic until its evaluation suite passed for exactly its revision, the result is written
into the canary's file, a failure pauses the canary, promote refuses an unproven revision
unless forced, and a new canary, suite or judge revision runs the gate again."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from dynagent.evals import CaseResult, SuiteRun, load_suite
from dynagent.exceptions import ConfigError
from dynagent.http.state import SERVICE
from dynagent.registry.canary import load_canary
from dynagent.registry.facade import AgentRegistry
from dynagent.registry.gate import GateKey, GateRecord, gate_state
from dynagent.rollout import gate as gate_module
from tests.support.canary import canary_document, canary_filename, canary_revision
from tests.support.service import (
    RunningService,
    agent_document,
    revision_of,
    running_service,
    service_config,
)

STABLE = agent_document("bot", system="Stable.")
CANDIDATE = agent_document("bot", system="Candidate.")
GATED = canary_document(CANDIDATE, weight=100, gate={})
"""At 100 %, every unpinned caller gets the canary once its gate is open."""
JUDGE_SCHEMA = {
    "type": "object",
    "properties": {
        "score": {"type": "number", "minimum": 0, "maximum": 1, "examples": [1]},
        "reason": {"type": "string", "examples": ["it does"]},
    },
    "required": ["score", "reason"],
}
JUDGE = agent_document("judge", system="You grade answers.", output={"schema": JUDGE_SCHEMA})
"""A judge on the offline model: its answer is the schema's example, a score of 1."""

GREETS = {"id": "greets", "input": "hello", "assert": [{"type": "icontains", "value": "hello"}]}
ECHOES = {"id": "echoes", "input": "ping", "assert": [{"type": "contains", "value": "ping"}]}
REFUNDS = {
    "id": "refunds",
    "input": "refund me",
    "assert": [{"type": "contains", "value": "refund approved"}],
}
RUBRIC = {
    "id": "polite",
    "input": "hello",
    "assert": [{"type": "llm-rubric", "value": "The answer is polite."}],
}
PASSING = {"cases": [GREETS]}
FAILING = {"cases": [GREETS, REFUNDS]}


def gate_of(registry: AgentRegistry) -> dict[str, Any] | None:
    canary = registry.status("bot")["canary"] if "bot" in registry else None
    return canary.get("gate") if canary else None


def gate_is(state: str, **fields: Any) -> Any:
    def reached(registry: AgentRegistry) -> bool:
        gate = gate_of(registry)
        return gate is not None and gate["state"] == state and fields.items() <= gate.items()

    return reached


async def variant(service: RunningService) -> str:
    response = await service.client.post(
        "/v1/agents/bot/invoke", json={"input": "hi"}, headers={"X-Canary-Key": "c"}
    )
    assert response.status == 200, await response.text()
    return str((await response.json())["variant"])


def write(folder: Path, filename: str, document: dict[str, Any]) -> None:
    (folder / filename).write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")


def stored_rollout(folder: Path) -> dict[str, Any]:
    text = (folder / canary_filename("bot")).read_text(encoding="utf-8")
    rollout: dict[str, Any] = yaml.safe_load(text)["rollout"]
    return rollout


@pytest.fixture
async def service(agents_dir: Path, state_dir: Path) -> Any:
    write(agents_dir, "bot.yaml", STABLE)
    config = service_config(agents_dir, state_dir, sessions={"store": "memory"})
    async with running_service(config) as running:
        await running.wait_serving("bot", revision_of(STABLE))
        yield running


async def test_a_gated_canary_takes_no_live_traffic_until_its_suite_passes_for_its_revision(
    service: RunningService, agents_dir: Path
) -> None:
    registry = service.registry
    write(agents_dir, canary_filename("bot"), GATED)
    await registry.wait_for(gate_is("pending"))
    assert gate_of(registry) == {
        "state": "pending",
        "revision": canary_revision(GATED),
        "suite_revision": None,
        "judge": None,
        "run_id": None,
        "reason": "no evaluation suite: publish bot.evals.yaml",
        "at": 0.0,
        "by": None,
    }
    assert [await variant(service) for _ in range(3)] == ["stable"] * 3

    write(agents_dir, "bot.evals.yaml", PASSING)
    await registry.wait_for(gate_is("passed"))
    gate = gate_of(registry)
    assert gate is not None
    record = stored_rollout(agents_dir)["gate_record"]
    assert (record["state"], record["revision"], record["suite_revision"], record["run_id"]) == (
        "passed",
        canary_revision(GATED),
        load_suite(PASSING).revision,
        gate["run_id"],
    )
    assert gate["reason"] == "0 of 1 cases failed"
    assert [run.id for run in service.app[SERVICE].gate.runs] == [gate["run_id"]]
    assert await variant(service) == "canary"
    metrics = await (await service.client.get("/metrics")).text()
    assert 'dynagent_eval_gate{agent="bot",state="passed"} 1.0' in metrics


async def test_a_failing_suite_pauses_the_canary_and_promote_refuses_it_unless_forced(
    service: RunningService, agents_dir: Path
) -> None:
    registry = service.registry
    write(agents_dir, "bot.evals.yaml", FAILING)
    write(agents_dir, canary_filename("bot"), GATED)
    await registry.wait_for(gate_is("failed"))
    reason = "1 of 2 cases failed: refunds; pass rate 50.0% below 100.0%"
    canary = registry.status("bot")["canary"]
    assert (canary["state"], canary["pulled"]["by"], canary["pulled"]["reason"]) == (
        "pulled",
        "gate",
        f"eval: {reason}",
    )
    assert canary["gate"]["reason"] == reason
    paused = stored_rollout(agents_dir)["paused"]
    assert (paused["by"], paused["reason"], paused["revision"]) == (
        "gate",
        f"eval: {reason}",
        canary_revision(GATED),
    )
    assert await variant(service) == "stable"
    metrics = await (await service.client.get("/metrics")).text()
    assert 'dynagent_eval_gate{agent="bot",state="failed"} 1.0' in metrics

    response = await service.client.post("/v1/agents/bot/promote")
    assert (response.status, await response.json()) == (
        409,
        {
            "error": {
                "type": "conflict",
                "message": f"cannot promote: canary revision {canary_revision(GATED)} of 'bot' "
                f"has no passing evaluation record (gate failed: {reason}); let its suite "
                "pass, or force it (dynagent promote --force)",
            }
        },
    )
    assert registry.status("bot")["revision"] == revision_of(STABLE)

    response = await service.client.post("/v1/agents/bot/promote", json={"force": True})
    body = await response.json()
    assert response.status == 200, body
    assert (body["revision"], body["canary"]) == (canary_revision(GATED), None)
    forced = body["forced"]
    assert (forced["state"], forced["by"], forced["revision"]) == (
        "forced",
        "operator",
        canary_revision(GATED),
    )
    assert forced["reason"] == "promoted without a passing record (failed)"


async def test_a_new_suite_canary_or_judge_revision_runs_the_gate_again(
    service: RunningService, agents_dir: Path
) -> None:
    """Each is a new key for the record: the old result is stale and the suite runs again;
    a pass after a failure lifts the gate's own pause."""
    registry = service.registry
    write(agents_dir, "judge.yaml", JUDGE)
    await service.wait_serving("judge", revision_of(JUDGE))
    judged = {"cases": [GREETS, RUBRIC], "judge": {"agent": "judge"}}
    write(agents_dir, "bot.evals.yaml", judged)
    write(agents_dir, canary_filename("bot"), GATED)
    judge_label = f"judge@{revision_of(JUDGE)}"
    await registry.wait_for(gate_is("passed", judge=judge_label))
    runs = [gate_of(registry)["run_id"]]  # type: ignore[index]

    write(agents_dir, "bot.evals.yaml", {**judged, "cases": [REFUNDS, RUBRIC]})  # a new suite
    await registry.wait_for(gate_is("failed"))
    assert registry.status("bot")["canary"]["state"] == "pulled"
    assert await variant(service) == "stable"

    fixed = {**judged, "cases": [ECHOES, RUBRIC]}
    write(agents_dir, "bot.evals.yaml", fixed)  # passes again: the gate's pause goes
    await registry.wait_for(gate_is("passed", suite_revision=load_suite(fixed).revision))
    assert registry.status("bot")["canary"]["state"] == "serving"
    assert "paused" not in stored_rollout(agents_dir)
    assert await variant(service) == "canary"

    judge_v2 = agent_document(
        "judge", system="You grade strictly.", output={"schema": JUDGE_SCHEMA}
    )
    write(agents_dir, "judge.yaml", judge_v2)  # a new judge revision
    await registry.wait_for(gate_is("passed", judge=f"judge@{revision_of(judge_v2)}"))

    candidate_v2 = canary_document(
        agent_document("bot", system="Candidate, second try."), weight=100, gate={}
    )
    write(agents_dir, canary_filename("bot"), candidate_v2)  # a new canary revision
    await registry.wait_for(gate_is("passed", revision=canary_revision(candidate_v2)))
    runs.append(gate_of(registry)["run_id"])  # type: ignore[index]
    gate_runs = service.app[SERVICE].gate.runs
    assert [(run.revision, run.suite_revision) for run in gate_runs] == [
        (canary_revision(GATED), load_suite(judged).revision),
        (canary_revision(GATED), load_suite({**judged, "cases": [REFUNDS, RUBRIC]}).revision),
        (canary_revision(GATED), load_suite(fixed).revision),
        (canary_revision(GATED), load_suite(fixed).revision),
        (canary_revision(candidate_v2), load_suite(fixed).revision),
    ]
    assert [run.judge for run in gate_runs] == [judge_label] * 3 + [
        f"judge@{revision_of(judge_v2)}"
    ] * 2
    assert runs == [gate_runs[0].id, gate_runs[-1].id]


async def test_a_claim_its_replica_stopped_renewing_is_taken_over(
    service: RunningService, agents_dir: Path
) -> None:
    """A replica that crashed while running the gate leaves a ``running`` claim whose
    ``until`` passes: the claim is stale, and another replica runs the suite."""
    registry = service.registry
    write(agents_dir, "bot.evals.yaml", PASSING)
    await registry.wait_for(lambda r: "evals" in r.status("bot"))
    crashed = {
        "state": "running",
        "revision": canary_revision(GATED),
        "suite_revision": load_suite(PASSING).revision,
        "run_id": "0123456789abcdef",
        "at": "2026-01-01T00:00:00+00:00",
        "by": "crashed-replica",
        "until": "2026-01-01T00:00:30+00:00",
    }
    gated = canary_document(CANDIDATE, weight=100, gate={}, gate_record=crashed)
    write(agents_dir, canary_filename("bot"), gated)
    await registry.wait_for(gate_is("passed"))
    gate = gate_of(registry)
    assert gate is not None
    assert gate["run_id"] != crashed["run_id"]
    assert gate["by"] == service.app[SERVICE].gate.replica
    assert [run.id for run in service.app[SERVICE].gate.runs] == [gate["run_id"]]


async def test_a_result_the_config_center_refused_is_written_later_not_run_again(
    service: RunningService, agents_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The suite ran, but the config center was out when its result was to be written:
    the replica keeps the run and writes it once the center answers, rather than waiting
    for its claim to expire and running the suite (its judge's and model's calls) again."""
    gate = service.app[SERVICE].gate
    real_edit = gate.decisions.edit
    refused: list[str] = []

    async def out_once(name: str, revision: str, change: Any) -> bool:
        if gate.runs and gate.runs[-1].finished_at is not None and not refused:
            refused.append(name)
            raise ConfigError("the canary document could not be written: its source is out")
        return await real_edit(name, revision, change)

    monkeypatch.setattr(gate.decisions, "edit", out_once)
    monkeypatch.setattr(gate_module, "RETRY_SECONDS", 0.1)
    write(agents_dir, "bot.evals.yaml", PASSING)
    await service.registry.wait_for(lambda r: "evals" in r.status("bot"))
    write(agents_dir, canary_filename("bot"), GATED)

    await service.registry.wait_for(gate_is("passed"))

    assert refused == ["bot"]
    assert len(gate.runs) == 1  # the suite ran once
    assert stored_rollout(agents_dir)["gate_record"]["run_id"] == gate.runs[0].id
    assert await variant(service) == "canary"


@pytest.mark.parametrize(
    ("gate", "path", "message"),
    [
        ({"suit": "other"}, "rollout.gate.suit", "Extra inputs are not permitted"),
        ({"min_pass_rate": 2}, "rollout.gate.min_pass_rate", "less than or equal to 1"),
        ({"concurrency": 0}, "rollout.gate.concurrency", "greater than or equal to 1"),
        ("yes", "rollout.gate", "valid dictionary"),
    ],
)
def test_a_gate_with_a_wrong_field_is_refused_naming_it(gate: Any, path: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_canary(canary_document(CANDIDATE, weight=10, gate=gate), name="bot")
    assert caught.value.path == path
    assert message in str(caught.value)


def test_a_record_holds_for_exactly_its_canary_suite_and_judge_revisions() -> None:
    """The pure rule every replica applies: any of the three changed makes it stale; a
    forced record holds for its canary revision; an expired claim is stale."""
    at = datetime(2026, 1, 1, tzinfo=UTC)
    key = GateKey("canary-1", "suite-1", "judge@1")
    passed = GateRecord(
        state="passed", revision="canary-1", suite_revision="suite-1", judge="judge@1", at=at
    )
    assert gate_state(passed, key, 0).state == "passed"
    for changed in (
        GateKey("canary-2", "suite-1", "judge@1"),
        GateKey("canary-1", "suite-2", "judge@1"),
        GateKey("canary-1", "suite-1", "judge@2"),
    ):
        assert gate_state(passed, changed, 0).state == "stale"
    forced = passed.model_copy(update={"state": "forced", "suite_revision": "old"})
    assert gate_state(forced, key, 0).state == "forced"
    claim = passed.model_copy(update={"state": "running", "until": at + timedelta(seconds=30)})
    assert gate_state(claim, key, at.timestamp() + 29).state == "running"
    assert gate_state(claim, key, at.timestamp() + 30).state == "stale"
    assert gate_state(None, key, 0, "no suite").reason == "no suite"


class Told:
    """A gate run observer, as the service's record of evaluation runs is one."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def started(self, run: SuiteRun, stable: SuiteRun | None, by: str) -> None:
        self.events.append(("started", run.variant, stable.variant if stable else "-"))

    def case_done(self, run: SuiteRun, case: CaseResult) -> None:
        self.events.append(("case", run.variant, case.case_id))

    def finished(self, run: SuiteRun) -> None:
        self.events.append(("finished", run.variant, run.state))


async def test_no_regressions_in_the_gate_runs_the_stable_first_and_fails_a_regression(
    service: RunningService, agents_dir: Path
) -> None:
    """The gate's overrides of the pass rule: no pass rate needed, but no case may pass on
    the stable and fail on the canary (the offline model's answer shows the prompt)."""
    told = Told()
    service.app[SERVICE].gate.observers.append(told)
    stays = {"id": "stays", "input": "hi", "assert": [{"type": "contains", "value": "Stable."}]}
    write(agents_dir, "bot.evals.yaml", {"cases": [stays, REFUNDS]})
    gate = {"min_pass_rate": 0, "no_regressions": True, "concurrency": 1}
    write(agents_dir, canary_filename("bot"), canary_document(CANDIDATE, weight=100, gate=gate))
    await service.registry.wait_for(gate_is("failed"))
    assert gate_of(service.registry)["reason"] == (  # type: ignore[index]
        "2 of 2 cases failed: stays, refunds; 1 regression(s): stays"
    )
    assert told.events == [
        ("started", "canary", "stable"),
        ("case", "stable", "stays"),
        ("case", "stable", "refunds"),
        ("case", "canary", "stays"),
        ("case", "canary", "refunds"),
        ("finished", "canary", "failed"),
    ]
