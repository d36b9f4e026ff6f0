"""Gated canaries in a folder (one replica): ``rollout.gate`` keeps a canary out of live
traffic until its evaluation suite passed for exactly its revision, the result is written
into the canary's file, a failure pauses the canary, promote refuses an unproven revision
unless forced, and a new canary, suite or judge revision runs the gate again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from dynagent.evals import load_suite
from dynagent.http.state import SERVICE
from dynagent.registry.facade import AgentRegistry
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
