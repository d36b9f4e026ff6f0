"""Every sample agent runs offline (the ``test`` model) through the HTTP API."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import jsonschema
import pytest
import yaml

from dynagent.config import load_config
from dynagent.evals import (
    Case,
    Outcome,
    ToolCall,
    case_verdict,
    load_suite,
    suite_verdict,
    trial_verdict,
)
from dynagent.registry.canary import load_canary
from tests.support.service import RunningService, parse_sse, running_service

SAMPLES = Path(__file__).parents[2] / "config-samples"
EXPECTED_EVENTS = {
    "assistant": ["run_started", "model_request", "model_response", "final_output"],
    "support-bot": [
        "run_started",
        "model_request",
        "model_response",
        "tool_call",
        "tool_call",
        "tool_result",
        "tool_result",
        "model_request",
        "model_response",
        "final_output",
    ],
    "ticket-triage": ["run_started", "model_request", "model_response", "final_output"],
    "librarian": [
        "run_started",
        "model_request",
        "model_response",
        "tool_call",
        "tool_call",
        "tool_result",
        "tool_result",
        "model_request",
        "model_response",
        "final_output",
    ],
    "concierge": [
        "run_started",
        "model_request",
        "model_response",
        "tool_call",
        "tool_result",
        "model_request",
        "model_response",
        "final_output",
    ],
}


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[RunningService]:
    """The sample service config, with sessions moved to a temporary file."""
    config = load_config(
        SAMPLES / "service.yaml", {"DYNAGENT_SESSIONS_PATH": str(tmp_path / "sessions.db")}
    )
    async with running_service(config, environ={}) as running:
        # The MCP sample starts its stdio server first; the agent calling it comes after.
        await running.registry.wait_for(
            lambda r: all(n in r and r.entry(n).stable is not None for n in EXPECTED_EVENTS),
            within=30,
        )
        yield running


SAMPLE_VARIANTS = [*((name, "stable") for name in sorted(EXPECTED_EVENTS)), ("assistant", "canary")]
"""Every sample file: an agent, or (``{name}.canary.yaml``) the canary of one."""


def sample_path(name: str, variant: str) -> Path:
    return SAMPLES / "agents" / (f"{name}.canary.yaml" if variant == "canary" else f"{name}.yaml")


SAMPLE_SUITES = ["support-bot"]
"""The sample agents with an evaluation suite (``{name}.evals.yaml``)."""


def test_every_sample_is_covered() -> None:
    assert sorted((SAMPLES / "agents").glob("*.yaml")) == sorted(
        [
            *(sample_path(name, variant) for name, variant in SAMPLE_VARIANTS),
            *(SAMPLES / "agents" / f"{name}.evals.yaml" for name in SAMPLE_SUITES),
        ]
    )


async def test_the_canary_sample_runs_beside_the_assistant(service: RunningService) -> None:
    spec, policy = load_canary(sample_path("assistant", "canary").read_text(encoding="utf-8"))
    canary = service.registry.status("assistant")["canary"]
    assert (canary["revision"], canary["weight"], canary["state"]) == (
        spec.revision,
        policy.weight,
        "serving",
    )
    assert (policy.weight, spec.revision != service.serving("assistant")) == (10, True)


@pytest.mark.parametrize("name,variant", SAMPLE_VARIANTS)
async def test_a_sample_answers_offline(service: RunningService, name: str, variant: str) -> None:
    spec = yaml.safe_load(sample_path(name, variant).read_text(encoding="utf-8"))
    response = await service.client.post(
        f"/v1/agents/{name}/invoke",
        json={"input": "My order 1234 has not arrived."},
        headers={"X-Agent-Variant": variant},
    )
    body = await response.json()
    assert response.status == 200, body
    assert set(body) == {
        "output",
        "agent",
        "revision",
        "variant",
        "trace_id",
        "session_id",
        "usage",
        "steps",
    }
    entry = service.registry.entry(name)
    serving = entry.canary.agent if variant == "canary" and entry.canary else entry.stable
    assert serving is not None
    assert (body["agent"], body["revision"], body["variant"]) == (name, serving.revision, variant)
    assert body["steps"] == EXPECTED_EVENTS[name].count("model_request")
    assert body["usage"]["total_tokens"] == (
        body["usage"]["input_tokens"] + body["usage"]["output_tokens"]
    )
    if "output" in spec:
        jsonschema.validate(body["output"], spec["output"]["schema"])
    else:
        assert isinstance(body["output"], str) and body["output"]

    trace = await (await service.client.get(f"/v1/traces/{body['trace_id']}")).json()
    assert [e["type"] for e in trace["events"]] == [*EXPECTED_EVENTS[name], "run_finished"]
    assert not any(e.get("is_error") for e in trace["events"])


async def test_the_tool_sample_streams_its_tool_results(service: RunningService) -> None:
    response = await service.client.post(
        "/v1/agents/support-bot/invoke", json={"input": "What is 2 + 2 * 3?", "stream": True}
    )
    events = parse_sse(await response.text())
    results = {data["name"]: data["output"] for name, data in events if name == "tool_result"}
    assert results.keys() == {"calculator", "current_time"}
    assert results["calculator"] == "8"
    assert events[-1][1]["status"] == "ok"


async def test_every_sample_answers_the_openai_endpoint(service: RunningService) -> None:
    for name in EXPECTED_EVENTS:
        response = await service.client.post(
            "/v1/chat/completions",
            json={"model": name, "messages": [{"role": "user", "content": "Hello"}]},
        )
        body = await response.json()
        assert response.status == 200, body
        assert body["choices"][0]["message"]["content"]


async def outcome_of(service: RunningService, name: str, case: Case) -> Outcome:
    """One offline run of ``case`` through the HTTP API, as the engine sees it."""
    response = await service.client.post(
        f"/v1/agents/{name}/invoke", json={"input": case.input, "variables": case.variables}
    )
    body = await response.json()
    assert response.status == 200, body
    trace = await (await service.client.get(f"/v1/traces/{body['trace_id']}")).json()
    events = trace["events"]
    results = {e.get("call_id"): e.get("output") for e in events if e["type"] == "tool_result"}
    calls = tuple(
        ToolCall(e["name"], e.get("arguments") or {}, results.get(e.get("call_id")))
        for e in events
        if e["type"] == "tool_call"
    )
    answer = body["output"] if isinstance(body["output"], str) else json.dumps(body["output"])
    return Outcome(
        answer, tool_calls=calls, steps=body["steps"], tokens=body["usage"]["total_tokens"]
    )


@pytest.mark.parametrize("name", SAMPLE_SUITES)
async def test_a_sample_suite_passes_against_the_offline_model(
    service: RunningService, name: str
) -> None:
    suite = load_suite((SAMPLES / "agents" / f"{name}.evals.yaml").read_text(encoding="utf-8"))
    assert service.registry.status(name)["evals"]["revision"] == suite.revision
    verdicts = []
    for case in suite.cases:
        trials = [
            trial_verdict(case, await outcome_of(service, name, case)) for _ in range(case.trials)
        ]
        verdicts.append(case_verdict(case, trials))
    verdict = suite_verdict(suite.pass_, verdicts)
    assert (verdict.passed, verdict.reason) == (True, f"0 of {len(suite.cases)} cases failed"), [
        (v.case_id, v.reason, [t.checks for t in v.trials]) for v in verdicts
    ]
