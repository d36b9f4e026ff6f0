"""What the canary guard takes as evidence: the traffic the router chose, judged by what the
version did. A caller that pins the canary, sends a schema nothing satisfies or rates its
own pinned runs down cannot pull a canary; the same failures and ratings on routed traffic
still do."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from dynagent.http.state import SERVICE
from dynagent.registry.canary import picks_canary
from tests.support import DEFAULT_MODEL, CallTools, Fail, Reply, ScriptedModelServer
from tests.support.canary import canary_document, canary_filename
from tests.support.scripted_model import Step
from tests.support.service import (
    RunningService,
    agent_document,
    running_service,
    service_config,
    write_agent,
)

CANARY_MODEL = "gpt-canary"
FAILURES = 21
"""More than the guard's default ``min_requests`` (20)."""
IMPOSSIBLE = {
    "type": "object",
    "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 0}},
    "required": ["n"],
}
"""A JSON Schema no answer satisfies."""


def canary_keys(count: int, weight: float) -> list[str]:
    """``X-Canary-Key`` values the router sends to the canary."""
    keys = (f"caller-{i}" for i in range(100_000))
    return [k for k in keys if picks_canary("bot", k, weight)][:count]


async def chat(service: RunningService, model: str, key: str, **extra: Any) -> tuple[int, Any]:
    response = await service.client.post(
        "/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": "hi"}], **extra},
        headers={"X-Canary-Key": key},
    )
    return response.status, await response.json()


async def invoke(service: RunningService, key: str, **headers: str) -> tuple[int, Any]:
    response = await service.client.post(
        "/v1/agents/bot/invoke", json={"input": "hi"}, headers={"X-Canary-Key": key, **headers}
    )
    return response.status, await response.json()


def impossible_format() -> dict[str, Any]:
    return {
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "never", "schema": IMPOSSIBLE},
        }
    }


Forced = Callable[[RunningService, str], Awaitable[tuple[int, Any]]]


async def pinned_with_impossible_schema(service: RunningService, key: str) -> tuple[int, Any]:
    return await chat(service, "bot@canary", key, **impossible_format())


async def routed_with_impossible_schema(service: RunningService, key: str) -> tuple[int, Any]:
    return await chat(service, "bot", key, **impossible_format())


async def pinned_by_header_failing(service: RunningService, key: str) -> tuple[int, Any]:
    return await invoke(service, key, **{"X-Agent-Variant": "canary"})


async def pinned_by_model_name_failing(service: RunningService, key: str) -> tuple[int, Any]:
    return await chat(service, "bot@canary", key)


def canary_state(service: RunningService) -> str:
    state: str = service.registry.status("bot")["canary"]["state"]
    return state


@pytest.mark.parametrize(
    ("forced", "failing_model", "kind"),
    [
        (pinned_with_impossible_schema, False, "output_invalid"),
        (routed_with_impossible_schema, False, "output_invalid"),
        (pinned_by_header_failing, True, "model_error"),
        (pinned_by_model_name_failing, True, "model_error"),
    ],
)
async def test_failures_the_caller_chose_never_pull_the_canary(
    model_server: ScriptedModelServer,
    agents_dir: Path,
    state_dir: Path,
    forced: Forced,
    failing_model: bool,
    kind: str,
) -> None:
    stable = agent_document("bot", model_server, system="Stable.", model={"retries": 0})
    candidate = agent_document(
        "bot", model_server, system="Canary.", model={"name": CANARY_MODEL, "retries": 0}
    )
    write_agent(agents_dir, stable)
    write_agent(agents_dir, canary_document(candidate, weight=50), filename=canary_filename("bot"))
    keys = canary_keys(FAILURES + 20, 50)
    forced_answer = Fail(500) if failing_model else Reply("plain text, not JSON")
    model_server.script(CANARY_MODEL, [forced_answer], cycle=True)
    async with running_service(service_config(agents_dir, state_dir)) as service:
        answers = [await forced(service, key) for key in keys[:FAILURES]]
        assert {status for status, _ in answers} == {422 if kind == "output_invalid" else 502}
        assert canary_state(service) == "serving"
        assert service.registry.status("bot")["traffic"].get("canary", {}).get("errors", 0) == 0

        # The same failures on traffic the router chose, with nothing of the caller's own:
        # the guard still pulls (a failing model; no schema of the agent's to miss).
        model_server.script(CANARY_MODEL, [Fail(500)], cycle=True)
        routed = [await invoke(service, key) for key in keys[FAILURES:]]
        assert {status for status, _ in routed} == {502}
        assert canary_state(service) == "pulled"


async def test_ratings_of_pinned_runs_never_pull_and_ratings_of_routed_runs_do(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    stable = agent_document("bot", model_server, system="Stable.")
    candidate = agent_document("bot", model_server, system="Canary.", model={"name": CANARY_MODEL})
    guard = {"min_feedback_score": 0.5, "min_feedback": 5}
    write_agent(agents_dir, stable)
    write_agent(
        agents_dir,
        canary_document(candidate, weight=50, guard=guard),
        filename=canary_filename("bot"),
    )
    model_server.script(CANARY_MODEL, [Reply("meh")], cycle=True)
    model_server.script(DEFAULT_MODEL, [Reply("fine")], cycle=True)
    keys = canary_keys(10, 50)
    async with running_service(service_config(agents_dir, state_dir)) as service:
        pinned = [await invoke(service, "me", **{"X-Agent-Variant": "canary"}) for _ in range(6)]
        ratings = [await rate(service, body["trace_id"]) for _, body in pinned]
        assert [(status, body["variant"], body["counted"]) for status, body in ratings] == [
            (200, "canary", False)
        ] * 6
        assert canary_state(service) == "serving"
        assert service.registry.status("bot")["traffic"].get("canary", {}).get("ratings", 0) == 0

        routed = [await invoke(service, key) for key in keys[:5]]
        assert {(status, body["variant"]) for status, body in routed} == {(200, "canary")}
        ratings = [await rate(service, body["trace_id"]) for _, body in routed]
        assert [body["counted"] for _, body in ratings] == [True] * 5
        assert canary_state(service) == "pulled"


async def rate(service: RunningService, trace_id: str) -> tuple[int, Any]:
    response = await service.client.post(f"/v1/traces/{trace_id}/feedback", json={"thumbs": "down"})
    return response.status, await response.json()


async def test_a_failing_canary_that_only_other_agents_call_is_pulled(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    """Runs of an agent called as a tool (``type: agent``) never pass through a request's
    run path; they are evidence about the version that served them all the same."""
    stable = agent_document("bot", model_server, system="Stable.", model={"retries": 0})
    candidate = agent_document(
        "bot", model_server, system="Canary.", model={"name": CANARY_MODEL, "retries": 0}
    )
    ask_bot = [{"type": "agent", "name": "bot", "description": "Ask bot."}]
    front = agent_document("front", model_server, model={"name": "gpt-front"}, tools=ask_bot)
    write_agent(agents_dir, stable)
    write_agent(agents_dir, canary_document(candidate, weight=100), filename=canary_filename("bot"))
    write_agent(agents_dir, front)
    model_server.script(CANARY_MODEL, [Fail(500)], cycle=True)
    asks: list[Step] = [CallTools([("bot", {"input": "help?"})]), Reply("bot is out; sorry")]
    model_server.script("gpt-front", asks, cycle=True)
    async with running_service(service_config(agents_dir, state_dir)) as service:
        for _ in range(FAILURES - 1):  # the guard's default min_requests
            response = await service.client.post("/v1/agents/front/invoke", json={"input": "hi"})
            assert response.status == 200  # the caller reports the tool's error and answers
        traffic = service.registry.status("bot")["traffic"]["canary"]
        state = canary_state(service)
        model_server.end_cycle("gpt-front")

    assert traffic["errors"] == FAILURES - 1
    assert state == "pulled"


async def test_a_canary_that_only_other_agents_call_is_judged_and_pulled_on_its_scores(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    """``rollout.judge`` samples the answers of a called agent's runs like a request's."""
    judge = {"sample": 1, "rubric": "The answer is correct.", "agent": "judge-bot"}
    candidate = agent_document("bot", model_server, system="Canary.", model={"name": CANARY_MODEL})
    ask_bot = [{"type": "agent", "name": "bot", "description": "Ask bot."}]
    write_agent(agents_dir, agent_document("bot", model_server, system="Stable."))
    write_agent(
        agents_dir,
        canary_document(
            candidate, 100, judge=judge, guard={"min_judge_score": 0.5, "min_judged": 3}
        ),
        filename=canary_filename("bot"),
    )
    write_agent(agents_dir, agent_document("judge-bot", model_server, model={"name": "gpt-judge"}))
    write_agent(
        agents_dir,
        agent_document("front", model_server, model={"name": "gpt-front"}, tools=ask_bot),
    )
    model_server.script(CANARY_MODEL, [Reply("a wrong answer")] * 3)
    model_server.script("gpt-judge", [Reply('{"score": 0.1, "reason": "wrong"}')] * 3)
    asks: list[Step] = [CallTools([("bot", {"input": "2+2?"})]), Reply("bot says so")]
    model_server.script("gpt-front", asks * 3)
    async with running_service(service_config(agents_dir, state_dir)) as service:
        for _ in range(3):
            response = await service.client.post("/v1/agents/front/invoke", json={"input": "hi"})
            assert response.status == 200
        await service.app[SERVICE].judging.idle()
        pulled = service.registry.status("bot")["canary"]["pulled"]

    assert pulled is not None
    assert pulled["reason"] == "judged score 0.10 over the last 3 scored runs is below 0.5"
