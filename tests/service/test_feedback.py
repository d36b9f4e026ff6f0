"""``POST /v1/traces/{trace_id}/feedback``: one rating per run, counted for the agent, revision
and variant that served it; the guard's ``min_feedback_score`` pulls a canary callers dislike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from dynagent.registry.canary import picks_canary
from tests.support import DEFAULT_MODEL, Reply, ScriptedModelServer
from tests.support.canary import canary_document, canary_filename
from tests.support.service import (
    RunningService,
    agent_document,
    revision_of,
    running_service,
    service_config,
    write_agent,
)

CANARY_MODEL = "gpt-canary"


async def run(service: RunningService, **headers: str) -> dict[str, Any]:
    response = await service.client.post(
        "/v1/agents/bot/invoke", json={"input": "hi"}, headers=headers
    )
    body: dict[str, Any] = await response.json()
    assert response.status == 200, body
    return body


async def rate(service: RunningService, trace: str, body: Any) -> tuple[int, Any]:
    response = await service.client.post(f"/v1/traces/{trace}/feedback", json=body)
    return response.status, await response.json()


def feedback_samples(text: str) -> dict[tuple[str, str], float]:
    return {
        (sample.name, sample.labels["variant"]): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("dynagent_feedback") and sample.name.endswith("_total")
    }


async def test_a_run_is_rated_once_and_counted_for_its_variant(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    document = agent_document("bot", model_server)
    write_agent(agents_dir, document)
    model_server.script(DEFAULT_MODEL, [Reply("one"), Reply("two")])
    async with running_service(service_config(agents_dir, state_dir)) as service:
        first, second = (await run(service))["trace_id"], (await run(service))["trace_id"]
        assert await rate(service, first, {"thumbs": "up", "comment": "spot on"}) == (
            200,
            {
                "trace_id": first,
                "agent": "bot",
                "revision": revision_of(document),
                "variant": "stable",
                "score": 1.0,
                "comment": "spot on",
                "counted": True,
            },
        )
        assert (await rate(service, second, {"score": 0.5}))[0] == 200
        again = await rate(service, first, {"score": 0})
        assert (again[0], again[1]["error"]["type"]) == (409, "conflict")
        traffic = service.registry.status("bot")["traffic"]["stable"]
        assert (traffic["ratings"], traffic["recent_mean_score"]) == (2, 0.75)
        metrics = await (await service.client.get("/metrics")).text()
        assert feedback_samples(metrics) == {
            ("dynagent_feedback_total", "stable"): 2.0,
            ("dynagent_feedback_score_total", "stable"): 1.5,
        }
        trace = await (await service.client.get(f"/v1/traces/{first}")).json()
        assert trace["feedback"] == {"score": 1.0, "comment": "spot on"}
        missing = await rate(service, "f" * 32, {"score": 1})
        assert (missing[0], missing[1]["error"]["type"]) == (404, "not_found")


@pytest.mark.parametrize(
    "body",
    [{}, {"score": 1, "thumbs": "up"}, {"score": 1.5}, {"thumbs": "sideways"}, {"score": "a"}],
)
async def test_a_bad_rating_is_a_400(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path, body: Any
) -> None:
    write_agent(agents_dir, agent_document("bot", model_server))
    model_server.script(DEFAULT_MODEL, [Reply("one")])
    async with running_service(service_config(agents_dir, state_dir)) as service:
        trace = (await run(service))["trace_id"]
        status, answer = await rate(service, trace, body)
    assert (status, answer["error"]["type"]) == (400, "bad_request")


async def test_the_guard_pulls_a_canary_rated_below_its_min_feedback_score(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    stable = agent_document("bot", model_server, system="Stable.")
    candidate = agent_document("bot", model_server, system="Canary.", model={"name": CANARY_MODEL})
    guard = {"min_feedback_score": 0.5, "min_feedback": 3}
    write_agent(agents_dir, stable)
    path = write_agent(
        agents_dir,
        canary_document(candidate, weight=50, guard=guard),
        filename=canary_filename("bot"),
    )
    model_server.script(CANARY_MODEL, [Reply("meh")] * 3)
    async with running_service(service_config(agents_dir, state_dir)) as service:
        keys = [k for k in (f"caller-{i}" for i in range(100)) if picks_canary("bot", k, 50)]
        routed = [await run(service, **{"X-Canary-Key": key}) for key in keys[:3]]
        assert {body["variant"] for body in routed} == {"canary"}
        traces = [body["trace_id"] for body in routed]
        for trace, score in zip(traces, (0.4, 0.0, 0.2), strict=True):
            assert (await rate(service, trace, {"score": score}))[0] == 200
        canary = service.registry.status("bot")["canary"]
        reason = "feedback score 0.20 over the last 3 ratings is below 0.5"
        assert (canary["state"], canary["pulled"]["reason"]) == ("pulled", reason)
        await service.registry.wait_for(
            lambda r: (
                (c := r.entry("bot").canary) is not None
                and c.pulled is not None
                and c.pulled.recorded
            )
        )
    assert yaml.safe_load(path.read_text())["rollout"]["paused"]["reason"] == reason
